package learn

import (
	"reflect"

	"agrl.dev/agrl"

	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/core/tensors"
)

// addGuesser answers addEnv tasks at once with a guess that is right a third of the time: the
// imperfect half of the warm start's demonstrations.
var addGuesser = agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
	gold, _ := strconv.Atoi(ep.Task.Answer)
	rng := rand.New(rand.NewPCG(uint64(gold), uint64(len(ep.Task.Prompt))))
	if rng.IntN(3) > 0 {
		gold += 1 + rng.IntN(5)
	}
	return agrl.AnswerText(strconv.Itoa(gold)), nil
})

// tinyGRPO is a configuration that trains in seconds: a 2-layer width-64 model on addEnv.
func tinyGRPO(t *testing.T) agrl.GRPO {
	return agrl.NewGRPO().Env(addEnv{}).
		Rubric(agrl.NewRubric().Add("answer", agrl.ExactAnswer, 1).Add("tool", agrl.UsedTool("add"), 0.5)).
		Mix(agrl.NewMix(1).Only(agrl.Medium)).
		Policy(agrl.TinyLM().Width(64).Heads(4).Layers(2).MLP(128).Context(64)).
		Group(8).TasksPerStep(4).LR(5e-4).KL(0).MaxActionTokens(24).
		EvalTasks(24).EvalEvery(0).TrajectoriesEvery(5).CheckpointEvery(0).Steps(20).Seed(1).
		Out(filepath.Join(t.TempDir(), "run"))
}

// warm adds the warm start: SFT on half expert, half guessing demonstrations.
func warm(g agrl.GRPO) agrl.GRPO {
	return g.WarmStart(agrl.SFT().Steps(150).Batch(16), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1}, agrl.Demo{Name: "guess", Agent: addGuesser, Weight: 1}).
		DemoEpisodes(120)
}

// TestGRPOImprovesOnTrivialTask: after an imperfect warm start, GRPO must discover that calling
// the tool pays (the rubric rewards it), on held-out dev tasks, with a fixed seed.
func TestGRPOImprovesOnTrivialTask(t *testing.T) {
	tr, err := Build(warm(tinyGRPO(t)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	for _, m := range res.History {
		t.Logf("step %2.0f reward %.3f tool %.2f kl %.4f entropy %.3f zero-std %.2f %.1fs",
			m["step"], m["reward/mean"], m["tool_call_rate"], m["kl"], m["entropy"], m["frac_reward_zero_std"], m["time/step_seconds"])
	}
	t.Logf("sft %+v final %+v wall %.0fs", *s.SFT, *s.Final, s.WallSeconds)
	if s.Final.MeanReward < s.SFT.MeanReward+0.15 {
		t.Errorf("dev mean reward %.3f after GRPO vs %.3f after SFT: no improvement", s.Final.MeanReward, s.SFT.MeanReward)
	}
	first, last := res.History[0], res.History[len(res.History)-1]
	if last["tool_call_rate"] < first["tool_call_rate"]+0.3 {
		t.Errorf("tool-call rate %.2f -> %.2f", first["tool_call_rate"], last["tool_call_rate"])
	}
	r, err := agrl.OpenRun(tr.Run().Dir())
	if err != nil {
		t.Fatal(err)
	}
	steps, _ := r.TrajectorySteps()
	if len(r.Metrics) != 20 || len(steps) != 5 || r.Summary.Status != "completed" || len(r.Evals) != 6 {
		t.Errorf("run directory: %d metrics, trajectories at %v, status %q, %d evals", len(r.Metrics), steps, r.Summary.Status, len(r.Evals))
	}
	for _, name := range []string{"reward/mean", "reward/std", "reward/answer", "reward/tool", "success", "frac_reward_zero_std", "kl", "entropy",
		"clip/low", "clip/high", "response_length", "truncated", "turns", "tool_call_rate", "tool_error_rate", "invalid_rate", "error_then_quit",
		"grad_norm", "lr", "time/step_seconds", "tokens_per_second"} {
		if _, ok := r.Metrics[0][name]; !ok {
			t.Errorf("metric %q missing", name)
		}
	}
}

// TestGRPORatioIsOneOnFirstMinibatch: the weights that sampled are the weights of the first
// minibatch, so the importance ratio is exactly 1 there (not merely close to 1: the old
// log-probs are the current ones, stop-gradient), even with several epochs and minibatches.
func TestGRPORatioIsOneOnFirstMinibatch(t *testing.T) {
	tr, err := Build(tinyGRPO(t).Epochs(2).Minibatches(2).Steps(1).KL(0.05))
	if err != nil {
		t.Fatal(err)
	}
	m, err := tr.Step()
	if err != nil {
		t.Fatal(err)
	}
	// ratio/dev is the mean of |ratio-1|: exactly 0 means every token's ratio is exactly 1 (ratio/mean is a
	// float32 sum over shards, so it is 1 only to rounding).
	if math.Abs(m["ratio/mean"]-1) > 1e-6 || m["ratio/dev"] != 0 || m["clip/low"] != 0 || m["clip/high"] != 0 || m["approx_kl"] != 0 {
		t.Errorf("first minibatch: ratio mean %v, mean |ratio-1| %v, clip %v/%v, approx kl %v", m["ratio/mean"], m["ratio/dev"], m["clip/low"], m["clip/high"], m["approx_kl"])
	}
	if m["kl"] != 0 {
		t.Errorf("KL to the reference before any update: %v", m["kl"])
	}
}

// TestGRPOLossMatchesReference checks the graph loss against the host reference arithmetic
// (ClippedSurrogate, TokenKL, NormalizeLoss) on a batch with hand-set advantages and old
// log-probs away from the current ones, so that clipping and KL are active. The batch holds a
// fully masked episode (as MaskTruncated leaves a truncated one): both the graph and
// NormalizeLoss count it as a sequence of the batch (SeqMean: 3 of the 4 sequences are not
// enough).
func TestGRPOLossMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		norm agrl.LossNorm
		est  agrl.KLEstimator
		hi   float64
	}{{agrl.TokenMean, agrl.K3, 0.2}, {agrl.SeqMean, agrl.K1, 0.28}, {agrl.ConstNorm, agrl.K3, 0.28}} {
		g := tinyGRPO(t).LossNorm(tc.norm).KLEstimator(tc.est).KL(0.05).ClipHigh(tc.hi)
		tr, err := Build(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.ensureLearner(); err != nil {
			t.Fatal(err)
		}
		tasks := tr.Tasks(agrl.Dev)[:3]
		eps, _, err := tr.policy.Rollout(addEnv{}, tasks, tr.rolloutOptions(true, 9))
		if err != nil {
			t.Fatal(err)
		}
		masked := *eps[0]
		masked.LossMask = make([]uint8, len(eps[0].LossMask))
		masked.LogProbs = slices.Clone(eps[0].LogProbs)
		eps = append(eps, &masked)
		adv := []float64{1.5, -0.7, 0.3, 0.9}
		rng := rand.New(rand.NewPCG(1, 1))
		cur, err := tr.policy.Score(tokensOf(eps), g.Spec().Temperature)
		if err != nil {
			t.Fatal(err)
		}
		// Fake "old" and "reference" log-probs: the current ones shifted by ±0.4.
		ref := make([]TokenScores, len(eps))
		for i, ep := range eps {
			ref[i].LogProbs = make([]float32, len(cur[i].LogProbs))
			for j := range ep.LogProbs {
				if j > 0 {
					ep.LogProbs[j] = cur[i].LogProbs[j-1] + float32(rng.Float64()*0.8-0.4)
					ref[i].LogProbs[j-1] = cur[i].LogProbs[j-1] + float32(rng.Float64()*0.8-0.4)
				}
			}
		}
		batch := tr.batch(eps, perEpisode(adv), ref, []int{0, 1, 2, 3}, false)
		st, err := tr.learner.(*Trainer).Eval(batch)
		if err != nil {
			t.Fatal(err)
		}
		var losses [][]float64
		var masks [][]uint8
		for i, ep := range eps {
			l := make([]float64, len(ep.Tokens))
			for j := 1; j < len(ep.Tokens); j++ {
				if ep.LossMask[j] == 0 {
					continue
				}
				lp := float64(cur[i].LogProbs[j-1])
				obj, _, _ := agrl.ClippedSurrogate(lp, float64(ep.LogProbs[j]), adv[i], 0.2, tc.hi)
				l[j] = -obj + 0.05*agrl.TokenKL(tc.est, lp, float64(ref[i].LogProbs[j-1]))
			}
			losses, masks = append(losses, l), append(masks, ep.LossMask)
		}
		want, err := agrl.NormalizeLoss(tc.norm, losses, masks, tr.resolved.MaxTokens)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Loss-want) > 1e-4*math.Max(1, math.Abs(want)) {
			t.Errorf("%s/%s: graph loss %.6f, reference %.6f", tc.norm, tc.est, st.Loss, want)
		}
		if st.Metrics["clip/low"]+st.Metrics["clip/high"] == 0 {
			t.Errorf("%s: the test batch should clip some tokens", tc.norm)
		}
	}
}

// TestGRPOKLZeroNeedsNoReference: with KL(0) the trainer builds no reference policy (no copy,
// no checkpoint, no scoring), its KL term and "kl" metric are exactly 0, and it still trains;
// with a positive KL the first step builds the reference.
func TestGRPOKLZeroNeedsNoReference(t *testing.T) {
	tr, err := Build(tinyGRPO(t).Epochs(2).Minibatches(2).Steps(2)) // tinyGRPO has KL(0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m, err := tr.Step()
		if err != nil {
			t.Fatal(err)
		}
		if m["kl"] != 0 || bad(m["loss"]) || m["grad_norm"] > m["grad_norm_max"] {
			t.Errorf("KL(0) step %v: kl %v, loss %v, grad norm %v (max %v)", m["step"], m["kl"], m["loss"], m["grad_norm"], m["grad_norm_max"])
		}
	}
	refDir := filepath.Join(tr.Run().CheckpointDir(), "reference")
	if tr.ref != nil || len(Checkpoints(refDir)) > 0 {
		t.Errorf("KL(0) built a reference policy (%v, checkpoints %v)", tr.ref != nil, Checkpoints(refDir))
	}
	if got := tr.learner.Steps(); got != 2*2*2 { // 2 GRPO steps × 2 epochs × 2 minibatches
		t.Errorf("%d optimizer steps, want 8", got)
	}

	// The graph loss without a reference: with hand-set advantages the loss is the policy
	// gradient term alone (token mean: loss = pg_loss), and kl is exactly 0 although ref_logp
	// (all 0) is far from the policy's log-probs.
	eps, _, err := tr.policy.Rollout(addEnv{}, tr.Tasks(agrl.Dev)[:3], tr.rolloutOptions(true, 7))
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.learner.(*Trainer).Eval(tr.batch(eps, perEpisode([]float64{1.5, -0.7, 0.3}), nil, []int{0, 1, 2}, true))
	if err != nil {
		t.Fatal(err)
	}
	if st.Metrics["kl"] != 0 || st.Loss == 0 || math.Abs(st.Loss-st.Metrics["pg_loss"]) > 1e-6 {
		t.Errorf("KL(0) loss %v, pg_loss %v, kl %v", st.Loss, st.Metrics["pg_loss"], st.Metrics["kl"])
	}

	withKL, err := Build(tinyGRPO(t).KL(0.05).Steps(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withKL.Step(); err != nil {
		t.Fatal(err)
	}
	if withKL.ref == nil || len(Checkpoints(filepath.Join(withKL.Run().CheckpointDir(), "reference"))) == 0 {
		t.Error("KL(0.05) built no reference policy")
	}
}

// TestGRPOUpdateMetricsAreMeans: "loss" and "grad_norm" are means over a step's optimizer
// steps, "grad_norm_max" the largest norm, "lr" the last step's, "tokens/trained" the sum.
func TestGRPOUpdateMetricsAreMeans(t *testing.T) {
	var u updateStats
	for _, st := range []agrl.StepStats{
		{Loss: 1, GradNorm: 0.5, LR: 3e-4, Tokens: 100},
		{Loss: 2, GradNorm: 2, LR: 2e-4, Tokens: 120},
		{Loss: -6, GradNorm: 0.5, LR: 1e-4, Tokens: 80},
	} {
		u.add(st)
	}
	m := agrl.Metrics{}
	u.report(m)
	want := map[string]float64{"loss": -1, "grad_norm": 1, "grad_norm_max": 2, "lr": 1e-4, "tokens/trained": 300}
	for k, w := range want {
		if math.Abs(m[k]-w) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, m[k], w)
		}
	}
}

// TestGRPOObservationTokensGetNoGradient: values at positions outside the loss mask (prompt and
// observation tokens) must not change the loss or the update.
func TestGRPOObservationTokensGetNoGradient(t *testing.T) {
	base := tinyGRPO(t)
	tr, err := Build(base)
	if err != nil {
		t.Fatal(err)
	}
	eps, _, err := tr.policy.Rollout(addEnv{}, tr.Tasks(agrl.Dev)[:4], tr.rolloutOptions(true, 5))
	if err != nil {
		t.Fatal(err)
	}
	obsTokens := 0
	for _, ep := range eps {
		for _, v := range ep.LossMask {
			obsTokens += int(1 - v)
		}
	}
	if obsTokens == 0 {
		t.Fatal("no prompt or observation tokens to perturb")
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := tr.policy.Save(dir); err != nil {
		t.Fatal(err)
	}
	adv := []float64{1, -1, 0.5, -0.5}
	ref, _ := tr.policy.Score(tokensOf(eps), base.Spec().Temperature)
	step := func(perturb bool) (agrl.StepStats, []float32) {
		p, err := LoadPolicy(dir, "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := p.NewTrainer("grpo", grpoLoss(0.2, 0.2, 0.1, agrl.K3), grpoValues, base.Spec().Optimizer, base.Spec().Temperature)
		if err != nil {
			t.Fatal(err)
		}
		b := tr.batch(eps, perEpisode(adv), ref, []int{0, 1, 2, 3}, false)
		if perturb {
			for i, ep := range eps {
				for j, m := range ep.LossMask {
					if m == 0 {
						b.Values[valAdv][i][j] = 1e3
						b.Values[valOldLogp][i][j] = -50
						b.Values[valRefLogp][i][j] = 7
					}
				}
			}
		}
		st, err := l.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := p.Store().GetVariable("/lm/head_w").Value()
		return st, tensors.MustCopyFlatData[float32](v)
	}
	a, wa := step(false)
	b, wb := step(true)
	if a.Loss != b.Loss || a.GradNorm != b.GradNorm {
		t.Errorf("loss %v vs %v, grad norm %v vs %v", a.Loss, b.Loss, a.GradNorm, b.GradNorm)
	}
	for i := range wa {
		if wa[i] != wb[i] {
			t.Fatalf("updated weights differ at %d", i)
		}
	}
}

// TestGRPODeterministic: the same seed on the same backend gives the same metrics.
func TestGRPODeterministic(t *testing.T) {
	run := func() []agrl.Metrics {
		tr, err := Build(tinyGRPO(t).Steps(2).KL(0.02))
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.Train(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res.History
	}
	a, b := run(), run()
	sameHistories(t, a, b, [2]string{"first run", "second run"})
}

// TestGRPOResumeContinuesTheSameRun: a run stopped after 2 steps and resumed to 4 logs the same
// metrics as a run of 4 steps without a stop.
func TestGRPOResumeContinuesTheSameRun(t *testing.T) {
	full, err := Build(tinyGRPO(t).Steps(4).KL(0.02))
	if err != nil {
		t.Fatal(err)
	}
	want, err := full.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "resumed")
	ctx, cancel := context.WithCancel(context.Background())
	first, err := Build(tinyGRPO(t).Steps(4).KL(0.02).Out(dir).OnStep(func(m agrl.Metrics) {
		if m.Step() == 2 {
			cancel()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := first.Train(ctx)
	if !errors.Is(err, context.Canceled) || len(res.History) != 2 {
		t.Fatalf("cancelled run: %v, %d steps", err, len(res.History))
	}
	if r, _ := agrl.OpenRun(dir); r.Summary == nil || r.Summary.Status != "cancelled" {
		t.Fatalf("summary after cancel: %+v", r.Summary)
	}
	again, err := Build(tinyGRPO(t).Steps(4).KL(0.02).Out(dir))
	if err != nil {
		t.Fatal(err)
	}
	if again.StepNumber() != 2 {
		t.Fatalf("resumed at step %d", again.StepNumber())
	}
	got, err := again.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) != 4 {
		t.Fatalf("history of %d steps", len(got.History))
	}
	for i := 2; i < 4; i++ {
		for _, k := range []string{"reward/mean", "loss", "kl", "entropy", "grad_norm", "response_length"} {
			if got.History[i][k] != want.History[i][k] {
				t.Errorf("step %d %s: resumed %v, uninterrupted %v", i+1, k, got.History[i][k], want.History[i][k])
			}
		}
	}
}

// TestGRPOStopsOnNaN: non-finite weights stop training with an error naming the step, and the
// last good checkpoint stays loadable and finite (a checkpoint of NaN weights is refused).
func TestGRPOStopsOnNaN(t *testing.T) {
	for _, when := range []string{"after the checkpoint", "before the checkpoint"} {
		tr, err := Build(tinyGRPO(t).Steps(3).CheckpointEvery(1))
		if err != nil {
			t.Fatal(err)
		}
		poison := func() {
			v := tr.policy.Store().GetVariable("/lm/head_w")
			val, _ := v.Value()
			data := tensors.MustCopyFlatData[float32](val)
			data[0] = float32(math.NaN())
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(data, val.Shape().Dimensions...)); err != nil {
				t.Fatal(err)
			}
		}
		if when == "after the checkpoint" { // step 2's rollout meets the NaN
			tr.cfg.Progress = func(msg string) {
				if msg == "checkpoint at step 1" {
					poison()
				}
			}
		} else { // step 2's checkpoint meets the NaN
			tr.cfg.OnStep = func(m agrl.Metrics) {
				if m.Step() == 2 {
					poison()
				}
			}
		}
		_, err = tr.Train(context.Background())
		if err == nil || !strings.Contains(err.Error(), "step 2") {
			t.Fatalf("%s: want an error naming step 2, got %v", when, err)
		}
		t.Logf("%s: %v", when, err)
		p, err := LoadPolicy(tr.Run().CheckpointDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.checkFinite(); err != nil {
			t.Fatalf("%s: the checkpoint on disk is corrupt: %v", when, err)
		}
		if r, _ := agrl.OpenRun(tr.Run().Dir()); r.Summary == nil || !strings.HasPrefix(r.Summary.Status, "failed") {
			t.Errorf("%s: summary %+v", when, r.Summary)
		}
	}
}

func TestGRPOBuildReportsEveryProblem(t *testing.T) {
	_, err := Build(agrl.NewGRPO().Group(1).ClipEps(-1).KL(math.NaN()).Minibatches(0).Temperature(0).
		Rubric(agrl.NewRubric().Add("x", nil, 1)).WarmStart(agrl.SFT()))
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"no environment", "group size 1", "clip ε low -1", "KL coefficient NaN",
		"minibatches 0", "train temperature 0", `"x" has no function`, "warm start without demonstrations", "no run directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Curriculum settings: After outside [0, 1), and no source at the first step.
	late := agrl.Demo{Name: "guess", Agent: addGuesser, Weight: 1, After: 0.5}
	_, err = Build(agrl.NewGRPO().Env(addEnv{}).WarmStart(agrl.SFT(), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1, After: 1}, late))
	for _, want := range []string{`demo 0 ("expert") joins after 1 of the SFT steps`, "no demonstration source with a positive weight starts at the first SFT step"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A sweep derives variants without changing the base.
	base := agrl.NewGRPO().KL(0.01)
	_ = base.KL(0.04).Group(16)
	if base.Spec().KL != 0.01 || base.Spec().Group != 8 {
		t.Error("setters changed the base")
	}
}

// TestGRPOFromCheckpointEvaluatesTheStart: a run started from a checkpoint (no warm start of its
// own) evaluates that checkpoint on every split as the "before" of its before/after table.
func TestGRPOFromCheckpointEvaluatesTheStart(t *testing.T) {
	base := tinyGRPO(t)
	p, err := NewPolicy(base.Spec().LM)
	if err != nil {
		t.Fatal(err)
	}
	start := filepath.Join(t.TempDir(), "start")
	if _, err := p.Save(start); err != nil {
		t.Fatal(err)
	}
	g := base.From(start).Steps(1).EvalTasks(8)
	probe, err := Build(g.Out(filepath.Join(t.TempDir(), "probe")))
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := probe.EvaluateSplit(agrl.Test, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := train(t, g)
	if s := res.Summary.SFT; s == nil || s.TestSuccess != want.Success {
		t.Fatalf("summary's starting point %+v; the checkpoint's own test success is %v (reward %v)", s, want.Success, want.MeanReward)
	}
	r, err := agrl.OpenRun(g.Spec().Out)
	if err != nil {
		t.Fatal(err)
	}
	before, after := r.BeforeAfter()
	for _, s := range []agrl.Split{agrl.Dev, agrl.Test, agrl.OOD} {
		if _, ok := before[s]; !ok {
			t.Errorf("no before for %s", s)
		}
		if _, ok := after[s]; !ok {
			t.Errorf("no after for %s", s)
		}
	}
	if before[agrl.Test].MeanReward != want.MeanReward {
		t.Errorf("before test reward %v, want the checkpoint's %v", before[agrl.Test].MeanReward, want.MeanReward)
	}
	if got, ok := r.Before(agrl.Test); !ok || got.MeanReward != want.MeanReward || got.Success != want.Success {
		t.Errorf("Before(test) %+v %v, want the checkpoint's %+v", got, ok, want)
	}
	if got, ok := r.Final(agrl.Dev); !ok || !reflect.DeepEqual(got, after[agrl.Dev]) {
		t.Errorf("Final(dev) %+v %v", got, ok)
	}
}

// TestGRPOCurriculum: each step's task weights are CurriculumWeights of the counts logged over
// the previous window steps, the logged counts add up to the groups sampled, and a resumed run
// draws the same weights as an uninterrupted one (they are a function of the logged history).
func TestGRPOCurriculum(t *testing.T) {
	cfg := func(dir string) agrl.GRPO {
		return warm(tinyGRPO(t)).Mix(agrl.NewMix(1)).Curriculum(2).Steps(5).DemoEpisodes(60).Out(dir)
	}
	want := train(t, cfg(filepath.Join(t.TempDir(), "full")))
	base := agrl.NewMix(1).Fractions()
	ds := []agrl.Difficulty{agrl.Easy, agrl.Medium, agrl.Hard}
	for i, m := range want.History {
		groups, signal := map[agrl.Difficulty]int{}, map[agrl.Difficulty]int{}
		for _, prev := range want.History[max(0, i-2):i] {
			for _, d := range ds {
				groups[d] += int(prev[agrl.MetricCurriculumGroups(d)])
				signal[d] += int(prev[agrl.MetricCurriculumSignal(d)])
			}
		}
		w, err := agrl.CurriculumWeights(base, groups, signal)
		if err != nil {
			t.Fatal(err)
		}
		total, sig := 0.0, 0.0
		for _, d := range ds {
			if got := m[agrl.MetricCurriculumWeight(d)]; math.Abs(got-w[d]) > 1e-12 {
				t.Errorf("step %d %s weight %v, want %v", i+1, d, got, w[d])
			}
			total += m[agrl.MetricCurriculumGroups(d)]
			sig += m[agrl.MetricCurriculumSignal(d)]
		}
		// Without dynamic sampling one round: 4 groups, and the zero-std share matches.
		if total != 4 || math.Abs((total-sig)/total-m[agrl.MetricFracRewardZeroStd]) > 1e-12 {
			t.Errorf("step %d: %v groups, %v with signal, frac_reward_zero_std %v", i+1, total, sig, m[agrl.MetricFracRewardZeroStd])
		}
	}
	if w := want.History[0][agrl.MetricCurriculumWeight(agrl.Medium)]; math.Abs(w-0.5) > 1e-12 {
		t.Errorf("first step draws with the base mix: medium %v", w)
	}

	dir := filepath.Join(t.TempDir(), "resumed")
	trainUntil(t, cfg(dir), 3)
	got := train(t, cfg(dir))
	for i := 3; i < 5; i++ {
		for _, d := range ds {
			for _, k := range []string{agrl.MetricCurriculumWeight(d), agrl.MetricCurriculumGroups(d)} {
				if got.History[i][k] != want.History[i][k] {
					t.Errorf("step %d %s: resumed %v, uninterrupted %v", i+1, k, got.History[i][k], want.History[i][k])
				}
			}
		}
		if got.History[i]["loss"] != want.History[i]["loss"] {
			t.Errorf("step %d loss: resumed %v, uninterrupted %v", i+1, got.History[i]["loss"], want.History[i]["loss"])
		}
	}
}

// perEpisode wraps one advantage per episode in the trainer's per-turn layout.
func perEpisode(adv []float64) [][]float64 {
	out := make([][]float64, len(adv))
	for i, a := range adv {
		out[i] = []float64{a}
	}
	return out
}

// TestGRPOTurnAdvantages: each turn's policy tokens carry that turn's advantage; with outcome
// rewards only and γ = 1, turn-level credit trains exactly as plain GRPO; with a per-turn
// component and a discount it trains and logs finite metrics.
func TestGRPOTurnAdvantages(t *testing.T) {
	base := warm(tinyGRPO(t)).Steps(2)
	want := train(t, base)
	turned, err := Build(base.TurnAdvantages(true).Out(filepath.Join(t.TempDir(), "turns")))
	if err != nil {
		t.Fatal(err)
	}
	got, err := turned.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.History {
		for _, k := range []string{"loss", "pg_loss", "grad_norm", "reward/mean"} {
			if got.History[i][k] != want.History[i][k] {
				t.Errorf("step %d %s: turn-level %v, episode-level %v", i+1, k, got.History[i][k], want.History[i][k])
			}
		}
	}

	// The layout: the k-th run of policy tokens gets advantage k.
	eps, _, err := turned.policy.Rollout(addEnv{}, turned.Tasks(agrl.Dev)[:6], turned.rolloutOptions(true, 3))
	if err != nil {
		t.Fatal(err)
	}
	adv := make([][]float64, len(eps))
	idx := make([]int, len(eps))
	multi := 0
	for i, ep := range eps {
		idx[i] = i
		for k := range ep.Turns {
			adv[i] = append(adv[i], float64(10*i+k+1))
		}
		if len(ep.Turns) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatal("no multi-turn episode to check")
	}
	b := turned.batch(eps, adv, nil, idx, true)
	for i, ep := range eps {
		spans := agrl.TurnSpans(ep.LossMask)
		if len(spans) != len(ep.Turns) {
			t.Fatalf("episode %d: %d runs of policy tokens for %d turns", i, len(spans), len(ep.Turns))
		}
		inSpan := make([]int, len(ep.Tokens))
		for k, sp := range spans {
			for j := sp[0]; j < sp[1]; j++ {
				inSpan[j] = k + 1
			}
		}
		for j, v := range b.Values[valAdv][i] {
			wantV := float32(0)
			if inSpan[j] > 0 {
				wantV = float32(adv[i][inSpan[j]-1])
			}
			if v != wantV {
				t.Fatalf("episode %d token %d: advantage %v, want %v", i, j, v, wantV)
			}
		}
	}

	// A per-turn component (0.2 for each add call) and γ = 0.9 train to finite metrics and
	// are recorded in the configuration.
	rub := agrl.NewRubric().Add("answer", agrl.ExactAnswer, 1).
		AddTurn("call", func(ep *agrl.Episode, k int) float64 { return b2f(ep.Turns[k].Action.Tool == "add") }, 0.2)
	g := base.Rubric(rub).Gamma(0.9).TurnAdvantages(true).Out(filepath.Join(t.TempDir(), "gamma"))
	res := train(t, g)
	for _, m := range res.History {
		if bad(m["loss"]) || bad(m["grad_norm"]) {
			t.Errorf("step %v: loss %v grad norm %v", m["step"], m["loss"], m["grad_norm"])
		}
	}
	if c := g.Resolved(); c.Gamma != 0.9 || !c.TurnAdvantages {
		t.Errorf("config records γ %v, turn advantages %v", c.Gamma, c.TurnAdvantages)
	}
	if c := base.Resolved(); c.Gamma != 0 {
		t.Errorf("γ = 1 is recorded as %v (want omitted, so older run directories resume)", c.Gamma)
	}
	if _, err := Build(base.Gamma(0)); err == nil || !strings.Contains(err.Error(), "discount") {
		t.Errorf("γ = 0: %v", err)
	}
}

// TrainSeeds trains one run per seed, each from its own warm start, and its statistics are
// those of the runs' own evaluations.
func TestTrainSeeds(t *testing.T) {
	g := warm(tinyGRPO(t)).Steps(1).WarmStart(agrl.SFT().Steps(30).Batch(16), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1}).
		EvalTasks(8).Out(filepath.Join(t.TempDir(), "seeds"))
	runs, st, err := TrainSeeds(context.Background(), g, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Config.Seed != 5 || runs[1].Config.Seed != 6 || filepath.Base(runs[1].Dir) != "seed-6" {
		t.Fatalf("runs %v", runs)
	}
	test, ok := st.Split(agrl.Test)
	if !ok {
		t.Fatal("no test statistics")
	}
	a := runs[0].Summary.Final.TestSuccess - runs[0].Summary.SFT.TestSuccess
	b := runs[1].Summary.Final.TestSuccess - runs[1].Summary.SFT.TestSuccess
	if math.Abs(test.Gain.Mean-(a+b)/2) > 1e-12 || !slices.Equal(st.Seeds, []uint64{5, 6}) {
		t.Errorf("gain %+v, runs' gains %v %v", test.Gain, a, b)
	}
	if _, _, err := TrainSeeds(context.Background(), g); err == nil {
		t.Error("no seeds: no error")
	}
}

// A run resumed with settings that change what an evaluation measures compares, for
// StopOnPlateau, only the dev evaluations made as its next ones will be: neither the start's nor
// the earlier periodic ones; a change of how it trains keeps them all.
func TestPlateauAfterNewEvalSettings(t *testing.T) {
	g := warm(tinyGRPO(t)).EvalEvery(1).EvalTasks(8).StopOnPlateau(3).Steps(2)
	train(t, g) // dev evaluated at the start, at step 1, and finally (after step 2)
	for _, c := range []struct {
		name  string
		g     agrl.GRPO
		dev   int
		stale bool
	}{
		{"learning rate", g.LR(3e-4), 1, false},
		{"evaluation tasks", g.EvalTasks(6), 0, true},
		{"back to 8 tasks", g, 1, false},
	} {
		tr, err := Build(c.g.Steps(3).ResumeWithNewSettings(true))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(tr.devHist) != c.dev || tr.startStale != c.stale || tr.sft == nil {
			t.Errorf("resumed after a change of %s: %d dev evaluations compared, start stale %v; want %d, %v", c.name, len(tr.devHist), tr.startStale, c.dev, c.stale)
		}
		tr.Close()
	}
}

// StopOnPlateau ends GRPO at the first evaluation where dev success has not improved for the
// patience, and not before; summary.json says so; resuming the finished run trains no further.
func TestGRPOStopOnPlateau(t *testing.T) {
	g := warm(tinyGRPO(t)).LR(1e-12).EvalEvery(1).EvalTasks(8).StopOnPlateau(2).Steps(12)
	out := train(t, g)
	run, err := agrl.OpenRun(g.Spec().Out)
	if err != nil {
		t.Fatal(err)
	}
	dev := []float64{run.Summary.SFT.DevSuccess}
	for _, e := range run.EvalsOf(agrl.Dev) {
		if e.Label == "" {
			dev = append(dev, e.Success)
		}
	}
	n := out.Summary.Steps
	if n >= 12 || out.Summary.StoppedEarly == "" || len(dev) != n+1 {
		t.Fatalf("stopped after %d steps (%q), %d dev evaluations", n, out.Summary.StoppedEarly, len(dev)-1)
	}
	for k := 1; k < len(dev); k++ {
		if agrl.Plateaued(dev[:k], 2) {
			t.Errorf("plateau already after %d evaluations %v, yet it went on", k-1, dev[:k])
		}
	}
	if !agrl.Plateaued(dev, 2) {
		t.Errorf("stopped without a plateau: %v", dev)
	}
	if more := train(t, g); more.Summary.Steps != n || more.Summary.StoppedEarly == "" {
		t.Errorf("resumed: %d steps, %q", more.Summary.Steps, more.Summary.StoppedEarly)
	}
	if _, err := Build(g.EvalEvery(0)); err == nil || !strings.Contains(err.Error(), "plateau") {
		t.Errorf("StopOnPlateau without evaluations: %v", err)
	}
}
