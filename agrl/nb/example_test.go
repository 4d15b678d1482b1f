package nb_test

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"

	"agrl.dev/agrl"
	"agrl.dev/agrl/nb"
	"agrl.dev/envs/calc"
)

// The plain-text viewer, as a terminal shows an episode.
func ExampleEpisodeText() {
	env := calc.New()
	task := agrl.Task{ID: "calc-demo", Env: "calc", Prompt: calc.PromptPrefix + "12+7*(3-5)", Answer: "-2",
		Difficulty: agrl.Hard, Meta: map[string]string{"expr": "12+7*(3-5)"}}
	ep, _ := agrl.Play(env, task, calc.Expert(), agrl.Limits{})
	calc.Rubric().Score(ep)
	fmt.Print(nb.EpisodeText(ep))
	// Output:
	// == SOLVED  calc-demo  hard  ended: answered  reward 1.000
	//    answer "-2"  gold "-2"  (2 turns, 1 tool calls, 0 tool errors, 0 invalid)
	//    prompt [masked out of the loss]
	//    | Compute: 12+7*(3-5)
	// -- turn 1 [policy, trained on]
	//    tool call: calc(12+7*(3-5))
	//    observation [masked out of the loss]
	//    | -2
	// -- turn 2 [policy, trained on]
	//    answer: -2
	//    rewards: format 1×0.2=+0.200 tool 1×0.3=+0.300 answer 1×0.5=+0.500 turns 2×0=+0.000 tool_errors 0×0=+0.000  total +1.000
}

// Curves of a run directory as PNG bytes, e.g. for an HTML report.
func ExampleCurvesPNG() {
	dir := filepath.Join(os.TempDir(), "agrl-nb-example")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	w, _ := agrl.CreateRun(dir, map[string]any{"env": "calc"}, false)
	for step := 1; step <= 20; step++ {
		w.LogMetrics(agrl.Metrics{"step": float64(step), "reward/mean": float64(step) / 20, "kl": 0.001 * float64(step)})
	}
	run, _ := agrl.OpenRun(dir)
	b, err := nb.CurvesPNG(run, "reward/mean", "kl")
	if err != nil {
		fmt.Println(err)
		return
	}
	img, _ := png.Decode(bytes.NewReader(b))
	fmt.Println(img.Bounds().Size())
	_, err = nb.CurvesPNG(run, "entropy")
	fmt.Println(err)
	// Output:
	// (840,280)
	// nb: run "agrl-nb-example" has no metric "entropy" (it has: kl, reward/mean)
}

func ExampleMust() {
	double := func(x int) (int, error) {
		if x < 0 {
			return 0, errors.New("negative")
		}
		return 2 * x, nil
	}
	fmt.Println(nb.Must(double(21)))
	defer func() { fmt.Println("panic:", recover()) }()
	nb.Must(double(-1))
	// Output:
	// 42
	// panic: negative
}
