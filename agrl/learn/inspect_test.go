package learn

import (
	"agrl.dev/agrl"
	"bytes"

	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInspectStep: the step records of a real run (a warm start, then GRPO with a KL penalty)
// re-derive every logged loss metric — kl, entropy, clip/*, ratio/*, approx_kl, pg_loss — and
// the loss to 1e-5; the first pass's current log-probs are the sampled ones (sampler/scorer
// agreement) and its ratios exactly 1; groups whose rewards are all equal are explained as
// such and get advantage 0.
func TestInspectStep(t *testing.T) {
	g := warm(tinyGRPO(t)).KL(0.05).Steps(6).TrajectoriesEvery(3)
	train(t, g)
	dir := g.Spec().Out
	run, err := agrl.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := run.StepRecordSteps()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(steps, []int{1, 3, 6}) {
		t.Fatalf("recorded steps %v, want [1 3 6] (step 1 and every TrajectoriesEvery)", steps)
	}
	sawSignal, sawFlat, sawKL := false, false, false
	for _, step := range steps {
		s, err := agrl.InspectStep(dir, step)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(1e-5); err != nil {
			t.Error(err)
		}
		rec := s.Record
		if len(rec.Episodes) != 32 || len(rec.Passes) != 1 || !rec.Passes[0].Fresh {
			t.Fatalf("step %d: %d episodes, %d passes (fresh %v); want 32, 1, fresh", step, len(rec.Episodes), len(rec.Passes), rec.Passes[0].Fresh)
		}
		pt := s.Passes[0]
		masked := 0
		for k, row := range pt.Tokens {
			ep := rec.Episodes[rec.Passes[0].Episodes[k]].Episode
			for j, tok := range row {
				if tok.ID != ep.Tokens[j] || tok.Mask != (ep.LossMask[j] == 1) {
					t.Fatalf("step %d episode %d token %d: id/mask %d/%v, episode %d/%d", step, k, j, tok.ID, tok.Mask, ep.Tokens[j], ep.LossMask[j])
				}
				if !tok.Mask {
					continue
				}
				masked++
				if tok.Ratio != 1 {
					t.Fatalf("step %d: fresh pass ratio %v, want exactly 1", step, tok.Ratio)
				}
				if d := math.Abs(tok.New - tok.Sampled); d > 1e-4 {
					t.Errorf("step %d episode %d token %d: scored %v, sampled %v", step, k, j, tok.New, tok.Sampled)
				}
				sawKL = sawKL || tok.KL > 0
			}
		}
		if masked == 0 {
			t.Fatalf("step %d: no token in the loss", step)
		}
		for _, gv := range s.Groups {
			if len(gv.Episodes) != 8 {
				t.Fatalf("step %d group %d: %d episodes, want 8", step, gv.Index, len(gv.Episodes))
			}
			if len(gv.Terms) != 2 || gv.Terms[0].Name != "answer" || gv.Terms[1].Name != "tool" {
				t.Errorf("step %d group %d: mean terms %+v, want the rubric's answer and tool", step, gv.Index, gv.Terms)
			}
			mean := 0.0
			for _, term := range gv.Terms {
				mean += term.Value * term.Weight
			}
			if math.Abs(mean-gv.Mean) > 1e-9 {
				t.Errorf("step %d group %d: weighted mean terms %v, mean reward %v", step, gv.Index, mean, gv.Mean)
			}
			allEqual := slices.Min(gv.Rewards) == slices.Max(gv.Rewards)
			if allEqual != !gv.Signal {
				t.Errorf("step %d group %d: rewards %v, signal %v", step, gv.Index, gv.Rewards, gv.Signal)
			}
			if allEqual {
				sawFlat = true
				if !strings.Contains(gv.Why, "every advantage is 0") || slices.Max(gv.Advantages) != 0 || slices.Min(gv.Advantages) != 0 {
					t.Errorf("step %d group %d (flat): advantages %v, why %q", step, gv.Index, gv.Advantages, gv.Why)
				}
			} else {
				sawSignal = true
			}
		}
		if got := len(rec.Pieces); got == 0 {
			t.Errorf("step %d: no token pieces", step)
		}
	}
	if !sawSignal || !sawKL {
		t.Errorf("the run never had a group with signal (%v) or a KL term above 0 after step 1 (%v): the test checks little", sawSignal, sawKL)
	}
	t.Logf("flat groups seen: %v", sawFlat)
	if _, err := agrl.InspectStep(dir, 2); err == nil || !strings.Contains(err.Error(), "recorded steps: 1, 3, 6") {
		t.Errorf("an unrecorded step: %v, want an error listing the recorded steps", err)
	}
}

// TestInspectStepLaterPasses: with two epochs of two minibatches and a large learning rate the
// later passes train on moved weights, so ratios leave 1 and the clip acts; each pass's
// re-derived loss and metrics equal what the learner computed for that optimizer step.
func TestInspectStepLaterPasses(t *testing.T) {
	g := warm(tinyGRPO(t)).Epochs(2).Minibatches(2).LR(3e-3).ClipEps(0.05).Steps(2).TrajectoriesEvery(1)
	train(t, g)
	clipped, moved := 0, 0
	for _, step := range []int{1, 2} {
		s, err := agrl.InspectStep(g.Spec().Out, step)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(1e-5); err != nil {
			t.Error(err)
		}
		if len(s.Passes) != 4 {
			t.Fatalf("step %d: %d passes, want 4", step, len(s.Passes))
		}
		for p, pt := range s.Passes[1:] {
			if s.Record.Passes[p+1].Fresh {
				t.Fatalf("step %d pass %d: fresh", step, p+1)
			}
			for _, row := range pt.Tokens {
				for _, tok := range row {
					if tok.Mask && tok.Ratio != 1 {
						moved++
					}
					if tok.ClippedLow || tok.ClippedHigh {
						clipped++
					}
				}
			}
		}
	}
	if moved == 0 || clipped == 0 {
		t.Errorf("later passes: %d tokens with ratio ≠ 1, %d clipped; want some of each", moved, clipped)
	}
}

// TestStepRecordsChangeNothing: recording every step (an extra scoring pass per optimizer
// step) trains exactly as recording only step 1 (TrajectoriesEvery 0).
func TestStepRecordsChangeNothing(t *testing.T) {
	a := train(t, tinyGRPO(t).Steps(4).TrajectoriesEvery(1))
	b := train(t, tinyGRPO(t).Steps(4).TrajectoriesEvery(0))
	sameHistories(t, a.History, b.History, [2]string{"recording", "not"})
}

// TestReplayStep: any step of a finished run re-runs from the newest kept checkpoint before it
// (the warm start's is kept) and reproduces the logged metrics bit for bit, and the recorded
// episodes token for token; its replayed record inspects like a recorded one; the run
// directory is left as it was; a configuration that differs from the run's is refused.
func TestReplayStep(t *testing.T) {
	g := warm(tinyGRPO(t)).KL(0.05).Steps(7).CheckpointEvery(3).TrajectoriesEvery(3)
	train(t, g)
	dir := g.Spec().Out
	ck := filepath.Join(dir, agrl.RunCheckpointsDir)
	var steps []int
	for _, c := range Checkpoints(ck) {
		m, err := readMark(c)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, m.Step)
	}
	slices.Sort(steps)
	if !slices.Equal(steps, []int{0, 6, 7}) {
		t.Fatalf("kept checkpoints of GRPO steps %v, want [0 6 7]: the two newest and the warm start's", steps)
	}
	before, err := os.ReadFile(filepath.Join(dir, agrl.RunMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ step, from int }{{1, 0}, {3, 0}, {5, 0}, {7, 6}} {
		r, err := ReplayStep(g, c.step)
		if err != nil {
			t.Fatal(err)
		}
		if r.From != c.from || r.Steps != c.step-c.from {
			t.Errorf("step %d: replayed %d steps from step %d, want from %d", c.step, r.Steps, r.From, c.from)
		}
		if err := r.Err(); err != nil {
			t.Error(err)
		}
		if err := r.Inspection.Check(1e-5); err != nil {
			t.Error(err)
		}
		changed := maps.Clone(r.Metrics)
		changed[agrl.MetricKL] = math.Nextafter(changed[agrl.MetricKL], 1)
		if d := metricDifferences(changed, r.Inspection.Logged); len(d) != 1 || !strings.HasPrefix(d[0], "kl:") {
			t.Errorf("a kl one ulp off: differences %v", d)
		}
		if r.Inspection.Record.Step != c.step || len(r.Inspection.Record.Episodes) != 32 {
			t.Errorf("step %d: replayed record of step %d with %d episodes", c.step, r.Inspection.Record.Step, len(r.Inspection.Record.Episodes))
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, agrl.RunMetricsFile))
	if err != nil || !slices.Equal(before, after) {
		t.Errorf("the run's metrics.jsonl changed (%v)", err)
	}
	if recs, _ := (&agrl.Run{Dir: dir}).StepRecordSteps(); !slices.Equal(recs, []int{1, 3, 6}) {
		t.Errorf("the run's step records are now %v", recs)
	}
	if _, err := ReplayStep(g.LR(1e-3), 5); err == nil || !strings.Contains(err.Error(), "optimizer.lr") {
		t.Errorf("another learning rate: %v, want the resume check's error", err)
	}
	if _, err := ReplayStep(g, 8); err == nil {
		t.Error("replayed a step the run never took")
	}
	// Without a KL penalty the reference checkpoint is not needed: the settings are what is
	// wrong, named against the run itself.
	if _, err := ReplayStep(g.KL(0), 5); err == nil || !strings.Contains(err.Error(), "kl: 0.05 → 0") ||
		!strings.Contains(err.Error(), dir+" holds a run with other settings") || strings.Contains(err.Error(), "reference") {
		t.Errorf("KL 0 for a run with KL 0.05: %v", err)
	}

	// Checkpoints record the kernels that computed them; a replay or a resume under others says
	// why its sums may differ.
	newest := Checkpoints(ck)[0]
	if m, err := readMark(newest); err != nil || m.Kernels != Kernels() {
		t.Fatalf("the newest checkpoint's kernels: %q (%v), want this process's %q", m.Kernels, err, Kernels())
	}
	r := &Replay{From: 6, Kernels: "avx9", Computes: Kernels(), Differences: []string{"loss: replayed 1, logged 2"},
		Inspection: &agrl.StepInspection{Record: &agrl.StepRecord{Step: 7}}}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "computing with the avx9 kernels, and this one computes with the "+Kernels()+" ones") {
		t.Errorf("a replay under other kernels: %v", err)
	}
	// A replay on another backend (XLA: its checkpoints record no kernels) says so instead of
	// naming the CPU kernels it did not compute with; the same set, or a checkpoint that
	// recorded none, says nothing.
	r.Computes = ""
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "computing with the avx9 CPU kernels, and this model computes on another backend") {
		t.Errorf("a replay on another backend: %v", err)
	}
	for _, c := range [][2]string{{"avx9", "avx9"}, {"", Kernels()}, {"", ""}} {
		r.Kernels, r.Computes = c[0], c[1]
		if err := r.Err(); err == nil || strings.Contains(err.Error(), "kernels") {
			t.Errorf("saved under %q, replayed under %q: %v", c[0], c[1], err)
		}
	}
	pj := filepath.Join(newest, policyFile)
	b, err := os.ReadFile(pj)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"kernels": "`+Kernels()+`"`), []byte(`"kernels": "avx9"`), 1)
	if err := os.WriteFile(pj, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var said []string
	tr, err := Build(g.Steps(8).Progress(func(s string) { said = append(said, s) }))
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if !slices.ContainsFunc(said, func(s string) bool {
		return strings.Contains(s, "was saved by a process computing with the avx9 kernels, and this one computes with the "+Kernels())
	}) {
		t.Errorf("resumed under other kernels without a word: %q", said)
	}
}

// A run resumed with new settings replays the steps after the change, bit for bit; the
// steps before it ran under settings config.json no longer holds, and are refused, as is a
// replay whose checkpoint lies before the change once the change's checkpoint is gone.
func TestReplayAfterNewSettings(t *testing.T) {
	g := warm(tinyGRPO(t)).Steps(2).CheckpointEvery(1)
	train(t, g)
	g2 := g.LR(1e-3).Steps(6).ResumeWithNewSettings(true)
	train(t, g2)
	if _, err := ReplayStep(g2, 2); err == nil || !strings.Contains(err.Error(), "step 2 of "+g.Spec().Out+" ran under the settings the run changed when it resumed after step 2") {
		t.Errorf("a step before the change: %v", err)
	}
	r, err := ReplayStep(g2, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil || r.From != 5 {
		t.Errorf("step 6 from step %d: %v", r.From, err)
	}
	// Kept: the warm start's and the two newest (5, 6): step 4 would start at step 0.
	if _, err := ReplayStep(g2, 4); err == nil || !strings.Contains(err.Error(), "would take steps 1 to 2 under the settings the run changed only after step 2") {
		t.Errorf("a replay across the change: %v", err)
	}
}
