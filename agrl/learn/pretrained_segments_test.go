package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/gomlx/core/graph"
)

// tinyFamily writes a random checkpoint of family f's tiny shape (llm.Tiny: Llama untied,
// Qwen2 with q/k/v biases, Qwen3 with q/k norms and tied embeddings) with the test tokenizer
// into a new temporary directory.
func tinyFamily(t *testing.T, f hf.Family) string {
	t.Helper()
	dir := t.TempDir()
	cfg := llm.Tiny(f)
	cfg.VocabSize, cfg.MaxPositionEmbeddings = 320, 2048
	cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
	writeTestModel(t, dir, cfg, 3)
	return dir
}

// recordedRun is a test's learner on a policy, with each step's summed gradients (as the
// update receives them) and stats kept for comparing runs.
type recordedRun struct {
	p     *PretrainedPolicy
	tr    *pretrainedTrainer
	grads [][][]float32
	stats []agrl.StepStats
}

// newRecordedRun builds p's learner for segTestLoss (AdamW at lr, temperature 0.8), keeping
// the gradients of each of its steps.
func newRecordedRun(t *testing.T, p *PretrainedPolicy, lr float64) *recordedRun {
	t.Helper()
	l, err := p.newLearner("grpo", segTestLoss, []string{"adv", "mask"}, agrl.NewAdamW().LR(lr), 0.8)
	if err != nil {
		t.Fatal(err)
	}
	r := &recordedRun{p: p, tr: l.(*pretrainedTrainer)}
	r.tr.onGrads = func(g [][]float32) { r.grads = append(r.grads, clone2(g)) }
	return r
}

// newHostRun is newRecordedRun on p after p.graphTraining = graphPath, checking that the
// learner then trains on the host exactly when graphPath is false.
func newHostRun(t *testing.T, p *PretrainedPolicy, graphPath bool, lr float64) *recordedRun {
	t.Helper()
	p.graphTraining = graphPath
	r := newRecordedRun(t, p, lr)
	if r.tr.hostTraining() == graphPath {
		t.Fatalf("graphTraining %v: hostTraining %v", graphPath, r.tr.hostTraining())
	}
	return r
}

// stepRuns takes one step of b with each run, keeping its stats.
func stepRuns(t *testing.T, runs []*recordedRun, b TrainBatch) {
	t.Helper()
	for _, r := range runs {
		st, err := r.tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		r.stats = append(r.stats, st)
	}
}

// segTestLoss uses every statistic the trainer hands a loss: a policy-gradient term on the
// log-probs, an entropy bonus, and the top-1 accuracy and token count as metrics.
func segTestLoss(in LossInputs) (*graph.Node, map[string]*graph.Node) {
	mask := graph.Mul(in.Values["mask"], in.Valid)
	g := mask.Graph()
	n := graph.Max(in.Sums["mask"], graph.Const(g, float32(1)))
	pg := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(graph.Mul(mask, in.Values["adv"]), in.LogProbs))), n)
	ent := graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Entropy)), n)
	loss := graph.Sub(pg, graph.MulScalar(ent, 0.05))
	return loss, map[string]*graph.Node{"entropy": ent, "accuracy": graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Top1)), n)}
}

// TestSegmentedStep: a training step taken segment by segment (embedding, one graph per
// layer, the head in chunks of positions, each backward pass recomputing its forward pass)
// computes the whole graph's loss, metrics and gradients — on every family, with LoRA (with
// dropout: each layer draws the masks the whole graph draws; over bfloat16 base weights) and
// with full fine-tuning (the head's, the norms' and the embedding's gradients, tied or not),
// over two micro-batches (shortest first: eight sequences of width 32 in two head chunks,
// then three of width 48, one filling it, in four rows — one of padding, fewer than the
// eight a call takes — in three head chunks), for two steps (the second from the first's
// update). Each variable's gradients are compared with that variable's largest.
func TestSegmentedStep(t *testing.T) {
	defer func(b int) { headChunkBytes = b }(headChunkBytes)
	headChunkBytes = 6 * 4 * 320 * 4 * 20 // 16 positions a chunk for 4 or 8 rows
	cases := []struct {
		name    string
		family  hf.Family
		full    bool
		dropout float64
		weights string
	}{
		{"qwen3-lora-dropout", hf.Qwen3, false, 0.3, ""},
		{"qwen2-lora", hf.Qwen2, false, 0, ""},
		{"llama-lora-bf16", hf.Llama, false, 0, "bfloat16"},
		{"llama-full", hf.Llama, true, 0, ""},
		{"qwen3-full", hf.Qwen3, true, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyFamily(t, c.family)
			spec := agrl.Pretrained(dir).MicroBatch(8).Weights(c.weights)
			if c.full {
				spec = spec.Full()
			} else {
				spec = spec.LoRA(4, 8).Dropout(c.dropout)
			}
			runs := make([]*recordedRun, 2)
			for i := range runs {
				p, err := LoadPretrained(spec, 5)
				if err != nil {
					t.Fatal(err)
				}
				if !c.full {
					withRandomAdapters(t, p)
				}
				if i == 1 {
					p.segmentFrom = 2
				}
				p.graphTraining = true // the graphs, not the host's step (pretrained_host.go)
				runs[i] = newRecordedRun(t, p, 1e-2)
			}
			batch := segTestBatch(320, 11, 48, 3, 30, 2, 38, 20, 9, 14, 25, 33)
			sorted := byLength(batch, nil).Tokens
			if got := runs[0].p.chunks(sorted); !slices.Equal(got, [][2]int{{0, 8}, {8, 11}}) {
				t.Fatalf("micro-batches %v, want 8 then 3 sequences", got)
			}
			if _, _, rows, width, err := runs[1].p.pad(sorted[8:]); err != nil || rows != 4 || width != 48 {
				t.Fatalf("the second micro-batch: %d rows of width %d (%v), want 4 of 48", rows, width, err)
			}
			for step := range 2 {
				stepRuns(t, runs, batch)
				whole, seg := runs[0].stats[step], runs[1].stats[step]
				close := func(what string, a, b, tol float64) {
					if math.Abs(a-b) > tol*(1+math.Abs(a)) || bad(a) || bad(b) {
						t.Errorf("step %d %s: whole %v, segmented %v", step+1, what, a, b)
					}
				}
				close("loss", whole.Loss, seg.Loss, 1e-5)
				close("grad norm", whole.GradNorm, seg.GradNorm, 1e-4)
				for k, v := range whole.Metrics {
					close(k, v, seg.Metrics[k], 1e-5)
				}
				if len(seg.Metrics) != len(whole.Metrics) {
					t.Errorf("step %d metrics: whole %v, segmented %v", step+1, whole.Metrics, seg.Metrics)
				}
				vars := runs[0].p.trainVars()
				var worstRel, largest float64
				where := ""
				for i, g := range runs[0].grads[step] {
					worst, scale, at := gradGap(g, runs[1].grads[step][i])
					largest = max(largest, scale)
					if scale == 0 {
						continue // B zero at the first step: A's gradient is 0 in both
					}
					if worst/scale > worstRel {
						worstRel, where = worst/scale, fmt.Sprintf("%s[%d] (largest %.3g)", vars[i].Path(), at, scale)
					}
				}
				// Step 1 compares the same weights; step 2 weights that one Adam update (which
				// divides by the gradients' size) moved from slightly different gradients.
				tol := 1e-4
				if step > 0 {
					tol = 1e-3
				}
				if largest == 0 || worstRel > tol {
					t.Errorf("step %d: gradients differ by up to %.3g of their variable's largest, at %s", step+1, worstRel, where)
				}
				t.Logf("step %d: loss %.6f, largest gradient %.3g, largest relative difference %.3g", step+1, whole.Loss, largest, worstRel)
			}
			if runs[0].tr.seg != nil || runs[1].tr.seg == nil {
				t.Error("the whole-graph policy built segment graphs, or the segmented one did not")
			}
		})
	}
}

// segTestBatch is a train batch of random token sequences of the given lengths, with
// per-token advantages in [-1, 1) and a mask that leaves each sequence's first third out.
func segTestBatch(vocab int, lens ...int) TrainBatch {
	rng := rand.New(rand.NewPCG(9, 9))
	b := TrainBatch{Values: map[string][][]float32{}}
	for _, n := range lens {
		seq, adv, mask := make([]int32, n), make([]float32, n), make([]float32, n)
		for i := range seq {
			seq[i] = int32(rng.IntN(vocab))
			adv[i] = float32(rng.Float64()*2 - 1)
			if i >= n/3 {
				mask[i] = 1
			}
		}
		b.Tokens = append(b.Tokens, seq)
		b.Values["adv"] = append(b.Values["adv"], adv)
		b.Values["mask"] = append(b.Values["mask"], mask)
	}
	return b
}

// gradGap compares one variable's gradients from two runs: the largest difference, where it
// is, and the largest magnitude of a's.
func gradGap(a, b []float32) (worst, scale float64, at int) {
	for j, x := range a {
		scale = max(scale, math.Abs(float64(x)))
		if d := math.Abs(float64(x - b[j])); d > worst {
			worst, at = d, j
		}
	}
	return worst, scale, at
}

func clone2(g [][]float32) [][]float32 {
	out := make([][]float32, len(g))
	for i := range g {
		out[i] = append([]float32(nil), g[i]...)
	}
	return out
}
