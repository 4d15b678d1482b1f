package learn

import (
	"agrl.dev/agrl"

	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
)

// advLoss is a policy-gradient-shaped loss: -Σ mask·adv·logp / Σ mask.
func advLoss(in LossInputs) (*graph.Node, map[string]*graph.Node) {
	mask := graph.Mul(in.Values["mask"], in.Valid)
	g := mask.Graph()
	n := graph.Max(in.Sums["mask"], graph.Const(g, float32(1)))
	loss := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(graph.Mul(mask, in.Values["adv"]), in.LogProbs))), n)
	return loss, map[string]*graph.Node{"entropy": graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Entropy)), n)}
}

// oneStep returns the weights after one AdamW step on b from the seed-6 test model, and the loss.
func oneStep(t *testing.T, b TrainBatch) (map[string][]float32, float64) {
	p := MustNewPolicy(testLM().Seed(6))
	tr, err := p.NewTrainer("pg", advLoss, []string{"mask", "adv"}, agrl.NewAdamW().LR(1e-2), 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	return weightsOf(t, p), st.Loss
}

func TestLossMasking(t *testing.T) {
	tok := agrl.ASCIITokenizer()
	// Prompt, an action, an observation, an action, then a trailing observation.
	build := func(lastObs string) ([]int32, []float32) {
		ids := tok.AppendEncode([]int32{agrl.BOS}, "What is 2+3?")
		mask := make([]float32, len(ids))
		add := func(text string, m float32) {
			n := len(ids)
			ids = tok.AppendEncode(ids, text)
			for range len(ids) - n {
				mask = append(mask, m)
			}
		}
		add("<tool>add(2+3)</tool>", 1)
		add("<obs>5</obs>", 0)
		add("<answer>5</answer>", 1)
		add("<obs>"+lastObs+"</obs>", 0)
		return ids, mask
	}
	ids1, mask1 := build("correct!")
	ids2, mask2 := build("WRONG?!x") // same length: the batch is laid out (packed) identically
	adv := func(mask []float32, junk float32) []float32 {
		a := make([]float32, len(mask))
		for i, m := range mask {
			if m == 1 {
				a[i] = 0.7
			} else {
				a[i] = junk // must not matter
			}
		}
		return a
	}
	batch := func(ids []int32, mask []float32, junk float32) TrainBatch {
		return TrainBatch{Tokens: [][]int32{ids, ids1[:20]}, Values: map[string][][]float32{
			"mask": {mask, mask1[:20]}, "adv": {adv(mask, junk), adv(mask1[:20], junk)}}}
	}
	w1, loss1 := oneStep(t, batch(ids1, mask1, 0))
	w2, loss2 := oneStep(t, batch(ids2, mask2, 0))  // other observation targets
	w3, loss3 := oneStep(t, batch(ids1, mask1, 50)) // other values where the mask is 0
	if loss1 != loss2 || loss1 != loss3 {
		t.Errorf("losses differ: %v %v %v", loss1, loss2, loss3)
	}
	if d := maxDiff(w1, w2); d > 1e-7 {
		t.Errorf("changing observation targets changed the update by %g", d)
	}
	if d := maxDiff(w1, w3); d > 1e-7 {
		t.Errorf("changing masked values changed the update by %g", d)
	}
	// And the loss is the masked mean the scorer gives.
	p := MustNewPolicy(testLM().Seed(6))
	sc, err := p.Score([][]int32{ids1, ids1[:20]}, 1)
	if err != nil {
		t.Fatal(err)
	}
	sum, n := 0.0, 0.0
	for i, m := range [][]float32{mask1, mask1[:20]} {
		for j := 1; j < len(m); j++ {
			sum += float64(m[j]) * 0.7 * float64(sc[i].LogProbs[j-1])
			n += float64(m[j])
		}
	}
	if want := -sum / n; math.Abs(want-loss1) > 1e-5 {
		t.Errorf("loss %v, masked mean of scorer log-probs %v", loss1, want)
	}
	if slices.Equal(ids1, ids2) {
		t.Fatal("test batches are equal")
	}
}

func TestTrainerValidation(t *testing.T) {
	p := MustNewPolicy(testLM())
	if _, err := p.NewTrainer("bad name", nil, []string{"a", "a"}, agrl.NewAdamW().LR(-1), 0); err == nil {
		t.Fatal("bad trainer accepted")
	}
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Step(TrainBatch{Tokens: [][]int32{{agrl.BOS, 20, 21}}, Values: map[string][][]float32{"mask": {{0, 1}}}})
	if err == nil {
		t.Error("misaligned values accepted")
	}
	_, err = tr.Step(TrainBatch{Tokens: [][]int32{{agrl.BOS, 20, 21}}})
	if err == nil {
		t.Error("missing values accepted")
	}
	if got := agrl.NewAdamW().LR(1).Warmup(10).LearningRate(5); got != 0.5 {
		t.Errorf("warm-up LR %v", got)
	}
}

func TestShardedStepMatchesUnsharded(t *testing.T) {
	var ws []map[string][]float32
	var stats []agrl.StepStats
	// The graph: 1 shard of the whole batch padded to its longest sequence, then 1, 2 and 3
	// workers running pieces cut by length.
	for i, shards := range []int{1, 1, 2, 3} {
		p := MustNewPolicy(testLM().Seed(8).Shards(shards))
		p.graphOnly = true
		p.wholeBatches = i == 0
		tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-2), 1)
		if err != nil {
			t.Fatal(err)
		}
		st, err := tr.Step(sftBatch(t, p.Tokenizer(), 7))
		if err != nil {
			t.Fatal(err)
		}
		ws, stats = append(ws, weightsOf(t, p)), append(stats, st)
	}
	for i := 1; i < len(ws); i++ {
		if d := maxDiff(ws[0], ws[i]); d > 1e-4 { // Adam's first step is ≈ lr·sign(g): tiny gradients may round either way
			t.Errorf("case %d: weights differ from one whole batch by %g", i, d)
		}
		if d := math.Abs(stats[0].Loss - stats[i].Loss); d > 1e-5 {
			t.Errorf("case %d: loss %v vs %v", i, stats[i].Loss, stats[0].Loss)
		}
		if stats[0].Metrics["tokens"] != stats[i].Metrics["tokens"] || math.Abs(stats[0].Metrics["accuracy"]-stats[i].Metrics["accuracy"]) > 1e-6 {
			t.Errorf("case %d: metrics %v vs %v", i, stats[i].Metrics, stats[0].Metrics)
		}
	}
}

// TestHostStepSameOnAnyWorkers: the host trainer splits rows and columns over its workers,
// never a sum, so a step on 1, 2 or 3 workers gives the same bits.
func TestHostStepSameOnAnyWorkers(t *testing.T) {
	var ws []map[string][]float32
	for _, shards := range []int{1, 2, 3} {
		ws = append(ws, twoHostSteps(t, shards))
	}
	for i := 1; i < len(ws); i++ {
		if d := maxDiff(ws[0], ws[i]); d != 0 {
			t.Errorf("%d workers: weights differ from one worker's by %g", i+1, d)
		}
	}
}

// twoHostSteps returns the weights after two host-path SFT steps of the seed-8 test model on
// the given number of workers (the portable loops too, in builds without the vector kernels).
func twoHostSteps(t *testing.T, shards int) map[string][]float32 {
	t.Helper()
	p := MustNewPolicy(testLM().Seed(8).Shards(shards))
	p.hostAlways = true
	if !p.onHost() {
		t.Skip("not on the go backend")
	}
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-2), 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tr.Step(sftBatch(t, p.Tokenizer(), 7)); err != nil {
			t.Fatal(err)
		}
	}
	return weightsOf(t, p)
}

// TestUnfusedPath runs the graphs as on XLA, which has none of the go backend's fused ops
// (GOMLX_FUSION=false makes GoMLX decompose them): the model then uses GoMLX's LayerNorm,
// softmax and ReLU, and must compute the same loss, update and log-probs.
func TestUnfusedPath(t *testing.T) {
	step := func() (map[string][]float32, float64, []TokenScores) {
		p := MustNewPolicy(testLM().Seed(21))
		p.graphOnly = true // fusion is a property of the graphs
		tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-3), 1)
		if err != nil {
			t.Fatal(err)
		}
		b := sftBatch(t, p.Tokenizer(), 5)
		st, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := p.Score(b.Tokens, 0.8)
		if err != nil {
			t.Fatal(err)
		}
		return weightsOf(t, p), st.Loss, sc
	}
	w1, l1, s1 := step()
	t.Setenv("GOMLX_FUSION", "false")
	w2, l2, s2 := step()
	if math.Abs(l1-l2) > 1e-4 {
		t.Errorf("loss fused %v, unfused %v", l1, l2)
	}
	if d := maxDiff(w1, w2); d > 1e-4 {
		t.Errorf("updates differ by %g", d)
	}
	for i := range s1 {
		for j := range s1[i].LogProbs {
			if d := math.Abs(float64(s1[i].LogProbs[j] - s2[i].LogProbs[j])); d > 1e-4 {
				t.Fatalf("log-probs differ by %g", d)
			}
		}
	}
}

func TestLearningRateSchedules(t *testing.T) {
	base := agrl.NewAdamW().LR(1).Warmup(10)
	cases := []struct {
		name string
		opt  agrl.AdamW
		step int
		want float64
	}{
		{"warm-up", base, 5, 0.5},
		{"constant after warm-up", base, 500, 1},
		{"cosine at the peak", base.Schedule(agrl.CosineLR, 110, 0.1), 10, 1},
		// Halfway (step 60 of 10..110) the cosine factor is 0.5: 0.1 + 0.9 × 0.5.
		{"cosine halfway", base.Schedule(agrl.CosineLR, 110, 0.1), 60, 0.55},
		// A quarter of the way: 0.5 × (1 + cos(π/4)) = 0.853553…; 0.1 + 0.9 × that.
		{"cosine a quarter", base.Schedule(agrl.CosineLR, 110, 0.1), 35, 0.1 + 0.9*0.5*(1+math.Sqrt2/2)},
		{"cosine at the horizon", base.Schedule(agrl.CosineLR, 110, 0.1), 110, 0.1},
		{"cosine after the horizon", base.Schedule(agrl.CosineLR, 110, 0.1), 400, 0.1},
		{"linear halfway", base.Schedule(agrl.LinearLR, 110, 0), 60, 0.5},
		{"linear at 90%", base.Schedule(agrl.LinearLR, 110, 0.2), 100, 0.2 + 0.8*0.1},
		{"horizon from the run", base.Schedule(agrl.LinearLR, 0, 0).ForSteps(110), 60, 0.5},
		{"own horizon wins", base.Schedule(agrl.LinearLR, 210, 0).ForSteps(110), 110, 0.5},
		{"no warm-up", agrl.NewAdamW().LR(2).Schedule(agrl.LinearLR, 101, 0), 51, 1},
	}
	for _, c := range cases {
		if got := c.opt.LearningRate(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: LR at step %d = %v, want %v", c.name, c.step, got, c.want)
		}
	}
	for _, bad := range []agrl.AdamW{
		agrl.NewAdamW().Schedule(agrl.LRSchedule(7), 0, 0.1),
		agrl.NewAdamW().Schedule(agrl.CosineLR, -1, 0.1),
		agrl.NewAdamW().Schedule(agrl.CosineLR, 0, 1.5),
		agrl.NewAdamW().Schedule(agrl.CosineLR, 0, math.NaN()),
	} {
		if bad.Validate() == nil {
			t.Errorf("invalid schedule accepted: %+v", bad)
		}
	}
}
