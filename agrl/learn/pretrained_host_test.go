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
// micro-batches (one of them with a padding row; a sequence with a single target), for two steps (the
// second from the first's update, which the host path hands the sampler's adapters through
// the store). The graph is the independent reference: GoMLX's automatic differentiation of
// the model hfgraph builds.
func TestHostLoRAStepMatchesGraph(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	for _, f := range []hf.Family{hf.Llama, hf.Qwen2, hf.Qwen3} {
		t.Run(string(f), func(t *testing.T) {
			dir := tinyFamily(t, f)
			type run struct {
				tr    *pretrainedTrainer
				grads [][][]float32
				stats []agrl.StepStats
			}
			var runs []*run
			for _, graphPath := range []bool{false, true} {
				p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(4), 5)
				if err != nil {
					t.Fatal(err)
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
			for step := range 2 {
				for _, r := range runs {
					st, err := r.tr.Step(batch)
					if err != nil {
						t.Fatal(err)
					}
					r.stats = append(r.stats, st)
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
				for i, g := range runs[1].grads[step] {
					worst, scale, at := gradGap(g, runs[0].grads[step][i])
					if worst > 1e-4*scale || scale == 0 || bad(scale) {
						t.Errorf("step %d %s: host and graph gradients differ by %.3g at %d (largest %.3g)",
							step+1, runs[1].tr.p.trainVars()[i].Path(), worst, at, scale)
					}
				}
			}
		})
	}
}
