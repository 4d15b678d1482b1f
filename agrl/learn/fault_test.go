package learn

import (
	"agrl.dev/agrl"

	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fault injection: run directories never lie and never get stuck. The CLI's tests
// (agrl/cmd/agrl/fault_test.go) add real signals: SIGINT, SIGTERM, SIGKILL and SIGSTOP.

// quickGRPO trains in a few seconds: tinyGRPO with smaller steps and splits.
func quickGRPO(t *testing.T) agrl.GRPO {
	return tinyGRPO(t).Group(4).TasksPerStep(2).EvalTasks(6).Steps(2)
}

// quickWarm adds a short warm start.
func quickWarm(g agrl.GRPO) agrl.GRPO {
	return g.WarmStart(agrl.SFT().Steps(24).Batch(8), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1}, agrl.Demo{Name: "guess", Agent: addGuesser, Weight: 1}).
		DemoEpisodes(48)
}

// sameHistories reports every metric (times and throughput aside) on which two runs' step
// histories differ; NaN equals NaN. what names the two runs ("straight", "resumed").
func sameHistories(t *testing.T, a, b []agrl.Metrics, what [2]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("%d steps %s, %d %s", len(a), what[0], len(b), what[1])
		return
	}
	for i := range a {
		for k, v := range a[i] {
			if strings.HasPrefix(k, "time/") || k == agrl.MetricTokensPerSecond {
				continue
			}
			w, ok := b[i][k]
			if !ok {
				t.Errorf("step %d %s: logged %s, not %s", i+1, k, what[0], what[1])
			} else if v != w && !(math.IsNaN(v) && math.IsNaN(w)) {
				t.Errorf("step %d %s: %v %s, %v %s", i+1, k, v, what[0], w, what[1])
			}
		}
		for k := range b[i] {
			if _, ok := a[i][k]; !ok {
				t.Errorf("step %d %s: logged %s, not %s", i+1, k, what[1], what[0])
			}
		}
	}
}

func train(t *testing.T, g agrl.GRPO) *TrainResult {
	t.Helper()
	_, res := buildAndTrain(t, g)
	return res
}

// buildAndTrain builds g and trains it to the end, failing the test on any error.
func buildAndTrain(t *testing.T, g agrl.GRPO) (*GRPOTrainer, *TrainResult) {
	t.Helper()
	tr, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tr, res
}

// trainUntil trains g and cancels it once GRPO step `step` is logged, as Ctrl-C would; it
// returns what Train returned and fails the test unless Train stopped with context.Canceled.
func trainUntil(t *testing.T, g agrl.GRPO, step int) *TrainResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := Build(g.OnStep(func(m agrl.Metrics) {
		if m.Step() == step {
			cancel()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Train(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run cancelled at step %d: %v", step, err)
	}
	return res
}

// TestResumeChecksItsSettings: resuming with other settings is refused with each one named
// (old → new); with ResumeWithNewSettings it continues, config.json holds the new settings and
// config_history.jsonl the change. More steps need no opt-in, and are recorded too.
func TestResumeChecksItsSettings(t *testing.T) {
	g := quickGRPO(t).Steps(1)
	train(t, g)
	other := g.LR(1e-3).Seed(9).Policy(agrl.TinyLM().Width(32).Heads(4).Layers(2).MLP(128).Context(64))
	_, err := Build(other)
	var me *agrl.ResumeMismatchError
	if !errors.As(err, &me) {
		t.Fatalf("want a ResumeMismatchError, got %v", err)
	}
	for _, want := range []string{"optimizer.lr: 0.0005 → 0.001", "seed: 1 → 9", "policy.width: 64 → 32"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if r, _ := agrl.OpenRun(g.Spec().Out); r.Config.Seed != 1 || len(r.Metrics) != 1 {
		t.Errorf("a refused resume changed the run: seed %v, %d metrics lines", r.Config.Seed, len(r.Metrics))
	}

	// The model cannot change, even with the opt-in: the checkpoint's weights are the model.
	_, err = Build(other.ResumeWithNewSettings(true))
	if !errors.As(err, &me) || !me.Model || !strings.Contains(err.Error(), "policy.width: 64 → 32") || strings.Contains(err.Error(), "optimizer.lr") {
		t.Fatalf("model change with the opt-in: %v", err)
	}
	// Extending the run is a free change; a new learning rate needs the opt-in.
	train(t, g.Steps(2).LR(1e-3).ResumeWithNewSettings(true))
	r, err := agrl.OpenRun(g.Spec().Out)
	if err != nil {
		t.Fatal(err)
	}
	if lr := r.Config.Optimizer.LR; lr != 1e-3 || r.Config.Steps != 2 || len(r.Metrics) != 2 {
		t.Errorf("config.json after the change: lr %v, steps %v; %d metrics lines", lr, r.Config.Steps, len(r.Metrics))
	}
	hist, err := agrl.ConfigHistory(g.Spec().Out)
	if err != nil || len(hist) != 1 {
		t.Fatalf("config history: %v %+v", err, hist)
	}
	h := hist[0]
	var changed []string
	for _, c := range h.Changes {
		changed = append(changed, c.String())
	}
	if h.Step != 1 || !h.NewSettings || strings.Join(changed, "; ") != "optimizer.lr: 0.0005 → 0.001; steps: 1 → 2" {
		t.Errorf("history entry: step %d, opt-in %v, changes %q", h.Step, h.NewSettings, changed)
	}
}

// TestRunDirectoryIsLocked: a second trainer on a run directory in use is refused at once,
// naming the holder; the directory is free again once the first is closed (Train closes it).
func TestRunDirectoryIsLocked(t *testing.T) {
	g := quickGRPO(t)
	first, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(g)
	if !errors.Is(err, agrl.ErrRunLocked) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Build: %v", err)
	}
	first.Close()
	second, err := Build(g)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	second.Close()
}

// TestNoStuckDirectories: a start that stopped before its first checkpoint (here: built, never
// trained) does not block the directory: the same configuration — or a corrected one, such as
// another From — starts afresh. A failed Build leaves nothing behind, and config.json is written
// only once the starting policy has loaded.
func TestNoStuckDirectories(t *testing.T) {
	g := quickGRPO(t)
	first, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if _, err := os.Stat(filepath.Join(g.Spec().Out, agrl.RunConfigFile)); err != nil {
		t.Fatal("no config.json after Build")
	}
	train(t, g)

	// A From that is not a checkpoint: no directory at all.
	bad := t.TempDir()
	out := filepath.Join(t.TempDir(), "from")
	if _, err := Build(quickGRPO(t).From(bad).Out(out)); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Fatalf("bad From: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Build left %s behind (%v)", out, err)
	}
	// The corrected command runs.
	train(t, quickGRPO(t).From(g.Spec().Out+"/checkpoints").Out(out).Steps(1))
}

// TestWarmStartInterruptedResumesExactly: a run cancelled during SFT stops at once with a
// checkpoint of the warm start; the same configuration resumes SFT there and ends exactly where
// an uninterrupted run ends, with each evaluation logged once.
func TestWarmStartInterruptedResumesExactly(t *testing.T) {
	full := train(t, quickWarm(quickGRPO(t)).Steps(1))

	dir := filepath.Join(t.TempDir(), "interrupted")
	ctx, cancel := context.WithCancel(context.Background())
	var stoppedAt time.Time
	cancelAt := func(st agrl.StepStats) {
		if st.Step == 10 {
			cancel()
			stoppedAt = time.Now()
		}
	}
	g := quickWarm(quickGRPO(t)).Steps(1).Out(dir)
	withLog := g.WarmStart(agrl.SFT().Steps(24).Batch(8).Log(cancelAt), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1}, agrl.Demo{Name: "guess", Agent: addGuesser, Weight: 1})
	tr, err := Build(withLog)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Train(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled warm start: %v", err)
	}
	t.Logf("stopped %v after the cancel", time.Since(stoppedAt).Round(time.Millisecond))
	ck, ok := newestCheckpoint(filepath.Join(dir, agrl.RunCheckpointsDir))
	if !ok || ck.Stage != StageSFT || ck.SFTStep != 10 {
		t.Fatalf("checkpoint after the cancel: %+v", ck)
	}
	r, _ := agrl.OpenRun(dir)
	if r.Summary == nil || r.Summary.Status != "cancelled" || !strings.Contains(r.Summary.Resume, "SFT step 10") {
		t.Fatalf("summary after the cancel: %+v", r.Summary)
	}
	var msgs []string
	again, err := Build(g.Progress(func(m string) { msgs = append(msgs, m) }))
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "continuing at step 11 of 24") {
		t.Errorf("the resumed run did not continue the warm start:\n%s", strings.Join(msgs, "\n"))
	}
	for _, k := range []string{"reward/mean", "loss", "entropy", "grad_norm"} {
		if got.History[0][k] != full.History[0][k] {
			t.Errorf("step 1 %s: resumed %v, uninterrupted %v", k, got.History[0][k], full.History[0][k])
		}
	}
	if *got.Summary.SFT != *full.Summary.SFT {
		t.Errorf("warm-start evaluation: resumed %+v, uninterrupted %+v", *got.Summary.SFT, *full.Summary.SFT)
	}
	r, _ = agrl.OpenRun(dir)
	counts := map[string]int{}
	for _, e := range r.Evals {
		counts[e.Label+"/"+e.Split.String()]++
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("eval.jsonl holds %s %d times", k, n)
		}
	}
	if len(counts) != 6 {
		t.Errorf("eval.jsonl: %v", counts)
	}
}

// TestDamagedCheckpointIsReported: when the newest checkpoint is damaged, the older one is
// loaded with a warning naming both, and the loaded step is known; the resumed run logs every
// step and evaluation once (eval.jsonl is rewound with metrics.jsonl).
func TestDamagedCheckpointIsReported(t *testing.T) {
	g := quickGRPO(t).Steps(3).CheckpointEvery(2).EvalEvery(1)
	want := train(t, g)
	ckdir := filepath.Join(g.Spec().Out, agrl.RunCheckpointsDir)
	newest := Checkpoints(ckdir)[0]
	files, _ := filepath.Glob(filepath.Join(newest, "checkpoint-*.json"))
	if len(files) != 1 {
		t.Fatalf("checkpoint files: %v", files)
	}
	if err := os.WriteFile(files[0], []byte("{torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warned []string
	p, err := loadPolicy(ckdir, "", func(m string) { warned = append(warned, m) })
	if err != nil {
		t.Fatal(err)
	}
	info := p.Checkpoint()
	if info.Stage != StageGRPO || info.Step != 2 || len(info.Skipped) != 1 || len(warned) != 1 ||
		!strings.Contains(warned[0], filepath.Base(newest)) || !strings.Contains(warned[0], "GRPO step 2") {
		t.Fatalf("loaded %+v; warnings %q", info, warned)
	}

	var msgs []string
	got := train(t, g.Progress(func(m string) { msgs = append(msgs, m) }))
	if !strings.Contains(strings.Join(msgs, "\n"), "warning: 1 newer checkpoint(s)") {
		t.Errorf("resume did not warn:\n%s", strings.Join(msgs, "\n"))
	}
	if len(got.History) != 3 || got.History[2]["loss"] != want.History[2]["loss"] {
		t.Errorf("resumed history: %d steps", len(got.History))
	}
	r, _ := agrl.OpenRun(g.Spec().Out)
	var evals []string
	for _, e := range r.Evals {
		evals = append(evals, strconv.Itoa(e.Step)+e.Label+e.Split.String())
	}
	if strings.Join(evals, " ") != "1dev 2dev 3finaldev 3finaltest 3finalood" || len(r.Metrics) != 3 {
		t.Errorf("after the resume: evals %v, %d metrics lines", evals, len(r.Metrics))
	}
}

// TestWatchdogCountsOnlyRunningTime: the heartbeat clock counts short gaps and only one tick of
// a long one (the process was stopped), so a pause never trips the watchdog while a hang does.
func TestWatchdogCountsOnlyRunningTime(t *testing.T) {
	tick, gap := watchdogTick(10 * time.Minute)
	if tick != time.Second || gap != 5*time.Second {
		t.Errorf("tick %v gap %v", tick, gap)
	}
	t0 := time.Unix(0, 0)
	c := runningClock{last: t0, tick: tick, gap: gap}
	now := t0
	for range 30 { // running: 30 s
		now = now.Add(tick)
		c.beat(now)
	}
	now = now.Add(time.Hour) // stopped for an hour
	c.beat(now)
	for range 30 {
		now = now.Add(tick)
		c.beat(now)
	}
	if c.running != 61*time.Second || c.lost != time.Hour-tick {
		t.Errorf("running %v, lost %v", c.running, c.lost)
	}
}

// Review findings: a resume with new optimizer-step counts keeps its step; an unreadable run is
// an error, not silently overwritten; Fresh clears only once the new start has loaded; a stop
// before any progress leaves no checkpoint.
func TestResumeEdgeCases(t *testing.T) {
	// Epochs 1 → 2 with the opt-in: the run resumes at the checkpoint's step (2), not at the
	// optimizer's count divided by the new epochs (1), and keeps both logged steps.
	g := quickGRPO(t)
	train(t, g)
	tr, err := Build(g.Epochs(2).Steps(3).ResumeWithNewSettings(true))
	if err != nil {
		t.Fatal(err)
	}
	if tr.StepNumber() != 2 {
		t.Errorf("resumed at step %d after changing Epochs; want 2", tr.StepNumber())
	}
	tr.Close()
	if r, err := agrl.OpenRun(g.Spec().Out); err != nil || len(r.Metrics) != 2 {
		t.Errorf("metrics after the resume: %v, %d lines", err, len(r.Metrics))
	}

	// An unreadable config.json is reported, and the directory is left as it was.
	bad := quickGRPO(t)
	if err := os.MkdirAll(bad.Spec().Out, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(bad.Spec().Out, agrl.RunConfigFile)
	if err := os.WriteFile(cfg, []byte(`{"env": "add", "kl_estimator": "k9"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(bad); err == nil || !strings.Contains(err.Error(), agrl.RunConfigFile) {
		t.Errorf("an unreadable config.json: %v", err)
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), "k9") {
		t.Errorf("config.json was rewritten: %s", b)
	}

	// Fresh with a start that cannot load keeps the earlier run.
	missing := filepath.Join(t.TempDir(), "no-checkpoints")
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(g.From(missing).Fresh(true)); err == nil {
		t.Fatal("a start From a directory without checkpoints was accepted")
	}
	if len(Checkpoints(filepath.Join(g.Spec().Out, agrl.RunCheckpointsDir))) == 0 {
		t.Error("Fresh cleared the earlier run although the new start failed")
	}

	// A run stopped before any progress saves no checkpoint: it stays a fresh start.
	early := quickWarm(quickGRPO(t))
	tr, err = Build(early)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Train(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Train with a cancelled context: %v", err)
	}
	if c := Checkpoints(filepath.Join(early.Spec().Out, agrl.RunCheckpointsDir)); len(c) != 0 {
		t.Errorf("checkpoints after a stop before any step: %v", c)
	}
}
