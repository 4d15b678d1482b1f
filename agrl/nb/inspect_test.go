package nb

import (
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// inspectedRun writes a run directory with one step record (two episodes of one task, rewards 1
// and 0) and its metrics line, re-derived from the record so they match.
func inspectedRun(t *testing.T) *agrl.Run {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	w, err := agrl.CreateRun(dir, map[string]any{"env": "hand"}, false)
	if err != nil {
		t.Fatal(err)
	}
	task := agrl.Task{ID: "t1", Prompt: "Compute: 2+3", Difficulty: agrl.Easy}
	win := &agrl.Episode{Task: task, Tokens: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, Reward: 1, Correct: true}
	loss := &agrl.Episode{Task: task, Tokens: []int32{1, 4, 3}, LossMask: []uint8{0, 1, 1}, Reward: 0}
	rec := &agrl.StepRecord{Step: 3, ClipLow: 0.2, ClipHigh: 0.2, KL: 0.1, Group: 2, Temperature: 1,
		Episodes: []agrl.StepEpisode{{Group: 0, Returns: []float64{1}, Advantages: []float64{0.707}, Episode: win},
			{Group: 0, Returns: []float64{0}, Advantages: []float64{-0.707}, Episode: loss}},
		Passes: []agrl.StepPass{{Fresh: true, Episodes: []int{0, 1},
			Mask:     [][]float32{{0, 1, 1}, {0, 1, 1}},
			Adv:      [][]float32{{0, 0.707, 0.707}, {0, -0.707, -0.707}},
			Old:      [][]float32{{0, -1, -0.5}, {0, -2, -0.7}},
			Ref:      [][]float32{{0, -1.1, -0.5}, {0, -1.9, -0.6}},
			Weight:   [][]float32{{0, 0.25, 0.25}, {0, 0.25, 0.25}},
			LogProbs: [][]float32{{0, -1, -0.5}, {0, -2, -0.7}},
			Entropy:  [][]float32{{0, 1, 1}, {0, 1, 1}}}},
		Pieces: map[int32]string{1: "<s>", 2: "5", 3: "</answer>", 4: "6"}}
	pt := rec.Terms(0)
	rec.Passes[0].Loss = pt.Loss
	m := agrl.Metrics{agrl.MetricStep: 3, agrl.MetricLoss: pt.Loss}
	for k, v := range pt.Metrics {
		m[k] = v
	}
	if err := w.LogMetrics(m); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveStepRecord(rec); err != nil {
		t.Fatal(err)
	}
	run, err := agrl.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestInspectStepHTML: the view holds the check line, the groups' rewards → advantages, the
// episode's tokens coloured by advantage with their numbers, HTML-escaped pieces; a bad episode
// or step is an error.
func TestInspectStepHTML(t *testing.T) {
	run := inspectedRun(t)
	s, err := agrl.InspectStep(run.Dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.TopEpisode(); got != 0 {
		t.Errorf("TopEpisode %d, want 0 (|advantage| ties: the first)", got)
	}
	h := InspectStepHTML(s, 1)
	for _, want := range []string{"every metric re-derived from the record to within 1e-5", "1→+0.71", "0→-0.71",
		"rgba(198,40,40", "&lt;/answer&gt;", "Compute: 2+3", "<th>loss term</th>", "ratios are exactly 1"} {
		if !strings.Contains(h, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if strings.Contains(h, "</answer>") {
		t.Error("a token piece is not escaped")
	}
	if err := InspectEpisode(run, 3, 2); err == nil {
		t.Error("episode 2 of 2 shown")
	}
	if err := InspectStep(run, 4); err == nil || !strings.Contains(err.Error(), "recorded steps: 3") {
		t.Errorf("step 4: %v", err)
	}
}
