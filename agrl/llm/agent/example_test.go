package agent_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"
)

// Two episodes of one calc task played by a tiny random Qwen3 in its own chat format. With a
// real checkpoint, agent.Load("path/to/Qwen3-0.6B") is the only line that changes; a random
// model writes nonsense, so its actions are cut at the cap, invalid, and answered with a
// tool turn telling it so, until three invalid actions in a row end the episode.
func Example() {
	dir, err := os.MkdirTemp("", "agent-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := writeTinyModel(dir); err != nil {
		log.Fatal(err)
	}

	p, err := agent.Load(dir) // config.json, model.safetensors, tokenizer.json
	if err != nil {
		log.Fatal(err)
	}
	p = p.System("Use the calc tool, then answer with the number.")
	fmt.Println("format:", p.Format().Name(), "stops:", p.Tokenizer().Decode(p.StopTokens()))

	env := calc.New()
	task, err := calc.NewTask("6*7", agrl.Easy)
	if err != nil {
		log.Fatal(err)
	}
	eps, st, err := p.Rollout(env, []agrl.Task{task, task}, agrl.RolloutOptions{
		Sampling: agrl.Sampling{Temperature: 1, Seed: 7, MaxActionTokens: 8},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, ep := range eps {
		if _, err := calc.Rubric().Score(ep); err != nil {
			log.Fatal(err)
		}
		sampled := 0
		for _, m := range ep.LossMask {
			sampled += int(m)
		}
		fmt.Printf("%d turns, %s, reward %.1f: %d tokens, %d of them sampled\n",
			len(ep.Turns), ep.Termination, ep.Reward, len(ep.Tokens), sampled)
	}
	fmt.Println("turn 1:", eps[0].Turns[0].Observation)
	fmt.Println("generated:", st.Generated)
	// Output:
	// format: qwen3 stops: <|im_end|><|endoftext|>
	// 3 turns, invalid_actions, reward 0.0: 669 tokens, 24 of them sampled
	// 3 turns, invalid_actions, reward 0.0: 669 tokens, 24 of them sampled
	// turn 1: invalid action: the action reached the cap of 8 tokens before its end-of-turn token
	// generated: 48
}

// writeTinyModel writes a random Qwen3 whose vocabulary holds the test tokenizer's ids, and
// the tokenizer, to dir.
func writeTinyModel(dir string) error {
	cfg := llm.Tiny(hf.Qwen3)
	cfg.VocabSize, cfg.MaxPositionEmbeddings = 320, 2048
	cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
	if err := llm.WriteRandom(dir, cfg, 1, 1); err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join("testdata", "tokenizer.json"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644)
}
