package agrl

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// handRecord is a one-episode, later-pass (not fresh) record whose loss was worked out by hand:
// token 1 has ratio e^0.5 with advantage +1 (clipped high at 1.2) and Δ = −0.2 to the
// reference; token 2 ratio e^−0.2 with advantage −1 (inside the clip) and Δ = 0.
func handRecord() *StepRecord {
	ep := &Episode{Task: Task{ID: "t1", Difficulty: Easy}, Tokens: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, Reward: 1}
	return &StepRecord{Step: 7, ClipLow: 0.2, ClipHigh: 0.2, KL: 0.1, KLEstimator: K3, Group: 1,
		Episodes: []StepEpisode{{Group: 0, Returns: []float64{1}, Advantages: []float64{1}, Episode: ep}},
		Passes: []StepPass{{Episodes: []int{0},
			Mask:     [][]float32{{0, 1, 1}},
			Adv:      [][]float32{{0, 1, -1}},
			Old:      [][]float32{{0, -1.5, -1.8}},
			Ref:      [][]float32{{0, -1.2, -2}},
			Weight:   [][]float32{{0, 0.5, 0.5}},
			LogProbs: [][]float32{{0, -1, -2}},
			Entropy:  [][]float32{{0, 0.5, 1.5}},
			Loss:     -0.18969808585, Metrics: map[string]float64{MetricPGLoss: -0.1906346235}}},
		Pieces: map[int32]string{1: "a", 2: "b", 3: "c"}}
}

// TestStepRecordTermsByHand checks Terms against the values computed by hand (see handRecord).
func TestStepRecordTermsByHand(t *testing.T) {
	pt := handRecord().Terms(0)
	want := map[string]float64{
		MetricKL: 0.0093653765, MetricEntropy: 1, MetricClipLow: 0, MetricClipHigh: 0.5,
		MetricRatioMean: 1.23372601185, MetricRatioDev: 0.41499525885, MetricApproxKL: 0.08372601185,
		MetricPGLoss: -0.1906346235,
	}
	for k, w := range want {
		if d := math.Abs(pt.Metrics[k] - w); d > 1e-7 {
			t.Errorf("%s = %.10f, want %.10f", k, pt.Metrics[k], w)
		}
	}
	if d := math.Abs(pt.Loss - -0.18969808585); d > 1e-7 {
		t.Errorf("loss %.10f, want -0.18969808585", pt.Loss)
	}
	tok := pt.Tokens[0]
	if !tok[1].ClippedHigh || tok[1].ClippedLow || tok[2].ClippedLow || tok[2].ClippedHigh || tok[0].Mask {
		t.Errorf("clip flags / mask: %+v", tok)
	}
	if math.Abs(tok[1].Objective-1.2) > 1e-7 || math.Abs(tok[2].Objective - -0.818730753) > 1e-7 {
		t.Errorf("objectives %v %v, want 1.2 and -0.818730753", tok[1].Objective, tok[2].Objective)
	}
	// A fresh pass takes the current log-probs as the old ones: every ratio is 1, nothing clips.
	r := handRecord()
	r.Passes[0].Fresh = true
	f := r.Terms(0)
	if f.Metrics[MetricRatioMean] != 1 || f.Metrics[MetricClipHigh] != 0 || f.Metrics[MetricPGLoss] != 0 {
		t.Errorf("fresh pass: %v", f.Metrics)
	}
}

// TestInspectStepChecks: InspectStep reads a run directory's record and metrics; Check passes
// when the log matches and names the metric when it does not; a record that does not fit its
// episodes is an error, not a panic.
func TestInspectStepChecks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := CreateRun(dir, map[string]any{"env": "hand"}, false)
	if err != nil {
		t.Fatal(err)
	}
	rec := handRecord()
	pt := rec.Terms(0)
	m := Metrics{MetricStep: 7, MetricLoss: pt.Loss}
	for k, v := range pt.Metrics {
		m[k] = v
	}
	m[MetricPGLoss] += 3e-6 // within 1e-5
	if err := w.LogMetrics(m); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveStepRecord(rec); err != nil {
		t.Fatal(err)
	}
	s, err := InspectStep(dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(1e-5); err != nil {
		t.Errorf("a matching log: %v", err)
	}
	if err := s.Check(1e-6); err == nil || !strings.Contains(err.Error(), "pg_loss") {
		t.Errorf("a log 3e-6 off at tolerance 1e-6: %v, want an error naming pg_loss", err)
	}
	if len(s.Groups) != 1 || !s.Groups[0].Signal {
		t.Errorf("groups %+v", s.Groups)
	}
	if _, err := InspectStep(dir, 8); err == nil || !strings.Contains(err.Error(), "recorded steps: 7") {
		t.Errorf("step 8: %v", err)
	}
	// A damaged record: a pass with fewer values than its episode has tokens.
	rec.Passes[0].Adv[0] = rec.Passes[0].Adv[0][:2]
	if err := w.SaveStepRecord(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectStep(dir, 7); err == nil || !strings.Contains(err.Error(), "2 values for 3 tokens") {
		t.Errorf("damaged record: %v", err)
	}
	// Episodes out of their groups' order, or with advantages that no return accounts for.
	for _, c := range []struct {
		edit func(r *StepRecord)
		want string
	}{
		{func(r *StepRecord) { r.Episodes[0].Group = -1 }, "episode 0: group -1 (a step's groups are numbered from 0)"},
		{func(r *StepRecord) { r.Episodes[0].Group = 2 }, "episode 0: group 2 ("},
		{func(r *StepRecord) {
			e := r.Episodes[0]
			e.Group = 1
			r.Episodes = append(r.Episodes, e, r.Episodes[0])
		}, "episode 2: group 0 after group 1"},
		{func(r *StepRecord) { r.Episodes[0].Advantages = []float64{1, 0.5} }, "episode 0: 2 advantages for 1 returns"},
	} {
		bad := handRecord()
		c.edit(bad)
		if err := w.SaveStepRecord(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := InspectStep(dir, 7); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, RunStepsDir, "step-000007.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectStep(dir, 7); err == nil {
		t.Error("a torn record read without error")
	}
}

// TestGroupWhy: a group whose rewards are all equal is explained as carrying no signal.
func TestGroupWhy(t *testing.T) {
	r := handRecord()
	ep2 := *r.Episodes[0].Episode
	r.Episodes = []StepEpisode{{Group: 0, Advantages: []float64{0}, Episode: r.Episodes[0].Episode}, {Group: 0, Advantages: []float64{0}, Episode: &ep2}}
	g := r.groups()
	if len(g) != 1 || g[0].Signal || !strings.Contains(g[0].Why, "all 2 rewards are 1") {
		t.Errorf("%+v", g)
	}
	// Equal rewards whose discounted returns differ: the advantages come from the returns, and
	// so does the explanation.
	r.Episodes[0].Returns, r.Episodes[0].Advantages = []float64{1}, []float64{0.707}
	r.Episodes[1].Returns, r.Episodes[1].Advantages = []float64{0.5}, []float64{-0.707}
	g = r.groups()
	if !g[0].Signal || !strings.Contains(g[0].Why, "returns 0.5..1 around a mean of 0.75 (first-turn returns") {
		t.Errorf("discounted returns: %q", g[0].Why)
	}
}
