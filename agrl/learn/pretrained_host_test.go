package learn

import (
	"math"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
)

// TestHostLoRAStepMatchesGraph: a LoRA step on the host (Trace and Backward, the loss's graph
// over the statistics) computes the whole graph's loss, metrics and adapter gradients, to
// rounding — on every family (Qwen2's biases, Qwen3's q/k norms and tied embeddings), over two
// micro-batches (one of them with a padding row; a sequence with a single target), the head in
// blocks of 16 positions, for two steps (the second from the first's update, which the host
// path hands the sampler's adapters through the store). A fourth run's call budget fits the
// host path's memory for the short sequences only: the others' micro-batches train through
// the graphs (segment by segment), in the same step. The graph is the independent reference: GoMLX's automatic differentiation of
// the model hfgraph builds.
func TestHostLoRAStepMatchesGraph(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	defer func(b int) { headBlock = b }(headBlock)
	headBlock = 16
	for _, f := range []hf.Family{hf.Llama, hf.Qwen2, hf.Qwen3} {
		t.Run(string(f), func(t *testing.T) {
			dir := tinyFamily(t, f)
			type run struct {
				tr    *pretrainedTrainer
				grads [][][]float32
				stats []agrl.StepStats
			}
			var runs []*run
			// host (keeping the head's log-probs for the backward pass), graph, host (running the
			// head again in the backward pass), host and graph by memory
			const mixedGiB = 0.00008 // 86 KB: the host path's estimate for a sequence of 2 tokens (one a call), not of 8
			for k, graphPath := range []bool{false, true, false, false} {
				p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(4), 5)
				if err != nil {
					t.Fatal(err)
				}
				if k == 3 { // below what CallMemory accepts (0.25 GiB), for the tiny model
					p.spec.CallMemoryGiB = mixedGiB
				}
				withRandomAdapters(t, p)
				p.graphTraining = graphPath
				l, err := p.newLearner("grpo", segTestLoss, []string{"adv", "mask"}, agrl.NewAdamW().LR(1e-2), 0.8)
				if err != nil {
					t.Fatal(err)
				}
				r := &run{tr: l.(*pretrainedTrainer)}
				if r.tr.hostTraining() == graphPath {
					t.Fatalf("graphTraining %v: hostTraining %v", graphPath, r.tr.hostTraining())
				}
				r.tr.onGrads = func(g [][]float32) { r.grads = append(r.grads, clone2(g)) }
				runs = append(runs, r)
			}
			batch := segTestBatch(320, 30, 45, 12, 20, 2, 33, 8) // micro-batches of 4 and 3 (in 4 rows)
			mp := runs[3].tr.p
			if !mp.hostFits([][]int32{batch.Tokens[4]}) || mp.hostFits([][]int32{batch.Tokens[6]}) {
				t.Fatalf("the mixed run's budget: %.0f bytes; the host path's estimate %.0f for 2 tokens, %.0f for 8",
					mp.callBudget(), mp.hostBytes([]int{1}, 4), mp.hostBytes([]int{7}, 4))
			}
			if c := mp.chunks(byLength(batch, nil).Tokens); len(c) != 7 {
				t.Fatalf("the mixed run's micro-batches %v, want one sequence each", c)
			}
			for step := range 2 {
				for i, r := range runs {
					if i == 2 {
						hostKeepBytes = 0
					}
					st, err := r.tr.Step(batch)
					hostKeepBytes = 1 << 30
					if err != nil {
						t.Fatal(err)
					}
					r.stats = append(r.stats, st)
				}
				// Keeping the log-probs or running the head again: the probabilities from the
				// log-probs' exponentials rather than the softmax's (the first step only: AdamW
				// spreads the rounding, as below).
				for i, g := range runs[2].grads[step] {
					if worst, scale, _ := gradGap(g, runs[0].grads[step][i]); step == 0 && worst > 1e-5*scale {
						t.Errorf("step %d variable %d: the head run again changes the gradient by %.3g (largest %.3g)", step+1, i, worst, scale)
					}
				}
				host, gr := runs[0].stats[step], runs[1].stats[step]
				near := func(what string, x, y float64) {
					if math.Abs(x-y) > 1e-5*(1+math.Abs(x)) || bad(x) || bad(y) {
						t.Errorf("step %d %s: host %v, graph %v", step+1, what, x, y)
					}
				}
				near("loss", host.Loss, gr.Loss)
				near("grad norm", host.GradNorm, gr.GradNorm)
				if len(host.Metrics) != 2 {
					t.Errorf("host metrics %v", host.Metrics)
				}
				for m, v := range gr.Metrics {
					near(m, host.Metrics[m], v)
				}
				// The second step's tolerance is wider: AdamW's first update moves each element by
				// ±lr whatever its gradient's size, so an element whose gradient is rounding noise
				// can move the other way in one run, and the second step starts from weights that
				// differ there (measured: 1.2e-6 … 1.8e-6 at step 1, up to 1.6e-4 at step 2).
				tol := []float64{1e-4, 1e-3}[step]
				rel := 0.0
				for i, g := range runs[1].grads[step] {
					if worst, scale, _ := gradGap(g, runs[3].grads[step][i]); step == 0 && worst > 1e-4*scale {
						t.Errorf("step 1 variable %d: host and graph by memory differ from the graph by %.3g (largest %.3g)", i, worst, scale)
					}
					worst, scale, at := gradGap(g, runs[0].grads[step][i])
					rel = max(rel, worst/scale)
					if worst > tol*scale || scale == 0 || bad(scale) {
						t.Errorf("step %d %s: host and graph gradients differ by %.3g at %d (largest %.3g)",
							step+1, runs[1].tr.p.trainVars()[i].Path(), worst, at, scale)
					}
				}
				t.Logf("step %d: largest relative gradient difference %.3g", step+1, rel)
			}
		})
	}
}
