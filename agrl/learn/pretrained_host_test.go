package learn

import (
	"math"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/gomlx/core/tensors"
)

// TestHostLoRAStepMatchesGraph: a LoRA step on the host (Trace and Backward, the loss's graph
// over the statistics) computes the whole graph's loss, metrics and adapter gradients, to
// rounding — on every family (Qwen2's biases, Qwen3's q/k norms and tied embeddings), over two
// micro-batches (one of them with a padding row; a sequence with a single target), the head in
// blocks of 16 positions, for two steps (the second from the first's update, which the host
// path hands the sampler's adapters through the store). A fourth run's call budget fits the
// host path's memory for the short sequences only: the others' micro-batches train through
// the graphs (segment by segment), in the same step. A fifth run checkpoints every trace
// (llm.TraceOptions.Checkpointed) and takes the first run's steps bit for bit. The graph is the
// independent reference: GoMLX's automatic differentiation of the model hfgraph builds.
func TestHostLoRAStepMatchesGraph(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	defer func(b int) { headBlock = b }(headBlock)
	headBlock = 16
	for _, f := range []hf.Family{hf.Llama, hf.Qwen2, hf.Qwen3} {
		t.Run(string(f), func(t *testing.T) {
			dir := tinyFamily(t, f)
			var runs []*recordedRun
			// host (keeping the head's log-probs for the backward pass), graph, host (running the
			// head again in the backward pass), host and graph by memory, host with every trace
			// checkpointed
			const mixedGiB = 0.00008 // 86 KB: the host path's estimate for a sequence of 2 tokens (one a call), not of 8
			for k, graphPath := range []bool{false, true, false, false, false} {
				p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(4), 5)
				if err != nil {
					t.Fatal(err)
				}
				if k == 3 { // below what CallMemory accepts (0.25 GiB), for the tiny model
					p.spec.CallMemoryGiB = mixedGiB
				}
				withRandomAdapters(t, p)
				p.checkpointTraces = k == 4
				runs = append(runs, newHostRun(t, p, graphPath, 1e-2))
			}
			batch := segTestBatch(320, 30, 45, 12, 20, 2, 33, 8) // micro-batches of 4 and 3 (in 4 rows)
			mp := runs[3].tr.p
			hm, err := mp.hostModel()
			if err != nil {
				t.Fatal(err)
			}
			_, short := mp.hostPlan(hm, [][]int32{batch.Tokens[4]}, 0, 0)
			_, long := mp.hostPlan(hm, [][]int32{batch.Tokens[6]}, 0, 0)
			if !short || long {
				t.Fatalf("the mixed run's budget: %.0f bytes; the host path's estimate %.0f for 2 tokens, %.0f for 8 (checkpointed)",
					mp.callBudget(), mp.hostBytes(hm, traceUnits([]int{1}, []bool{true}), 0), mp.hostBytes(hm, traceUnits([]int{7}, []bool{true}), 0))
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
				// Checkpointed traces: the same gradients, bit for bit.
				if ck := runs[4]; !sameGrads(ck.grads[step], runs[0].grads[step]) || ck.stats[step].Loss != host.Loss {
					t.Errorf("step %d: checkpointed traces change the step: loss %v, whole %v", step+1, ck.stats[step].Loss, host.Loss)
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

// sameGrads reports whether two steps' gradients are equal bit for bit.
func sameGrads(a, b [][]float32) bool {
	return slices.EqualFunc(a, b, func(x, y []float32) bool {
		return slices.EqualFunc(x, y, func(u, v float32) bool { return math.Float32bits(u) == math.Float32bits(v) })
	})
}

// TestHostPlan: a micro-batch's traces stay whole while its estimate fits the call budget,
// shortest first; the rest are checkpointed; past what checkpointing every trace fits, the
// micro-batch goes to the graphs.
func TestHostPlan(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyFamily(t, hf.Qwen3)).LoRA(4, 8), 5)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.hostModel()
	if err != nil {
		t.Fatal(err)
	}
	seqs := [][]int32{make([]int32, 6), make([]int32, 10), make([]int32, 18)}
	n := []int{5, 9, 17}
	plans := [][]bool{{false, false, false}, {false, false, true}, {false, true, true}, {true, true, true}}
	for i, plan := range plans {
		need := p.hostBytes(m, traceUnits(n, plan), 0)
		if i > 0 && need >= p.hostBytes(m, traceUnits(n, plans[i-1]), 0) {
			t.Fatalf("plan %v: %.0f bytes, not under %v's", plan, need, plans[i-1])
		}
		for _, budget := range []float64{need, need + 1} { // exactly the estimate, and just over it
			p.spec.CallMemoryGiB = budget / (1 << 30)
			got, ok := p.hostPlan(m, seqs, 0, 0)
			if !ok || !slices.Equal(checkpoints(got), plan) {
				t.Errorf("budget %.0f bytes: plan %v (host %v), want %v", budget, got, ok, plan)
			}
		}
	}
	p.spec.CallMemoryGiB = (p.hostBytes(m, traceUnits(n, plans[3]), 0) - 1) / (1 << 30)
	if got, ok := p.hostPlan(m, seqs, 0, 0); ok {
		t.Errorf("a budget under every trace checkpointed: plan %v on the host", got)
	}
	p.spec.CallMemoryGiB = 1
	p.checkpointTraces = true
	if got, ok := p.hostPlan(m, seqs, 0, 0); !ok || !slices.Equal(checkpoints(got), plans[3]) {
		t.Errorf("checkpointTraces: plan %v (host %v)", got, ok)
	}
	// What checkpointing saves grows with the positions: at 4,096 of a tiny model, most of it.
	whole, _ := m.TraceBytes(4096, llm.TraceOptions{})
	light, _ := m.TraceBytes(4096, llm.TraceOptions{Checkpointed: true})
	if light > whole/3 {
		t.Errorf("4,096 positions: checkpointed %.0f bytes, whole %.0f", light, whole)
	}
}

// traceUnits are a host step's units of sequences traced whole, n[i] positions each,
// checkpointed as checkpoint says (for hostBytes).
func traceUnits(n []int, checkpoint []bool) []hostUnit {
	units := make([]hostUnit, len(n))
	for i, k := range n {
		units[i] = hostUnit{seq: i, ids: make([]int32, k), opts: llm.TraceOptions{Checkpointed: checkpoint[i]}}
	}
	return units
}

// checkpoints is which of a plan's units are checkpointed.
func checkpoints(units []hostUnit) []bool {
	out := make([]bool, len(units))
	for i, u := range units {
		out[i] = u.opts.Checkpointed
	}
	return out
}

// TestHostLoRADropout: a host step with LoRA dropout draws each sequence's masks from the
// step and its place in the batch, so the step is the same (to rounding) whether its batch
// trains in micro-batches of 4 or one sequence at a time; the same again when run again, and
// with checkpointed traces (whose layers, run again, draw the masks again), bit for bit; and
// not the step without dropout. (The masks' gradients against finite
// differences: agrl/llm's TestBackwardFiniteDifferences.)
func TestHostLoRADropout(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	dir := tinyFamily(t, hf.Qwen3)
	batch := segTestBatch(320, 30, 45, 12, 20, 2, 33, 8)
	step := func(micro int, dropout float64, checkpointed bool) [][]float32 {
		p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(micro).Dropout(dropout), 5)
		if err != nil {
			t.Fatal(err)
		}
		withRandomAdapters(t, p)
		p.checkpointTraces = checkpointed
		l, err := p.newLearner("grpo", segTestLoss, []string{"adv", "mask"}, agrl.NewAdamW().LR(1e-2), 0.8)
		if err != nil {
			t.Fatal(err)
		}
		tr := l.(*pretrainedTrainer)
		if !tr.hostTraining() {
			t.Fatalf("dropout %v: the step does not take the host path", dropout)
		}
		var grads [][]float32
		tr.onGrads = func(g [][]float32) { grads = clone2(g) }
		if _, err := tr.Step(batch); err != nil {
			t.Fatal(err)
		}
		return grads
	}
	four, one, again, plain := step(4, 0.3, false), step(1, 0.3, false), step(4, 0.3, false), step(4, 0, false)
	if !sameGrads(four, again) {
		t.Error("the same step run twice: different gradients")
	}
	if !sameGrads(four, step(4, 0.3, true)) {
		t.Error("checkpointed traces under dropout: different gradients")
	}
	moved := 0.0
	for i := range four {
		if worst, scale, _ := gradGap(one[i], four[i]); worst > 1e-5*scale || scale == 0 {
			t.Errorf("variable %d: micro-batches of 1 and of 4 differ by %.3g (largest %.3g)", i, worst, scale)
		}
		worst, scale, _ := gradGap(plain[i], four[i])
		moved = max(moved, worst/scale)
	}
	if moved < 0.05 {
		t.Errorf("dropout 0.3 moves no gradient by more than %.3g of its largest", moved)
	}
}

// TestHostFullStepMatchesGraph: a full fine-tuning step on the host (Trace and
// BackwardWeights, the head's gradient from its logits', the loss's graph over the
// statistics) computes the whole graph's loss, metrics and gradient of every weight, to
// rounding — Llama with every bias (q, k, v, o, the MLP's; untied head), Qwen2 and Qwen3 (q/k
// norms, tied embeddings: the head's gradient and the embeddings' rows summed in one tensor)
// — over two micro-batches, the head in blocks of 16 positions, for two steps (the second
// from the first's update, which the host path reads back from the store). A third run
// checkpoints every trace and takes the first run's steps bit for bit.
func TestHostFullStepMatchesGraph(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	defer func(b int) { headBlock = b }(headBlock)
	headBlock = 16
	for _, f := range []string{"llama-bias", "qwen2", "qwen3"} {
		t.Run(f, func(t *testing.T) {
			var dir string
			if f == "llama-bias" {
				dir = t.TempDir()
				cfg := llm.Tiny(hf.Llama)
				cfg.VocabSize, cfg.MaxPositionEmbeddings = 320, 2048
				cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
				cfg.AttentionBias, cfg.MLPBias = true, true
				writeTestModel(t, dir, cfg, 3)
			} else {
				dir = tinyFamily(t, hf.Family(f))
			}
			var runs []*recordedRun
			for k, graphPath := range []bool{false, true, false} { // host, graph, host checkpointed
				p, err := LoadPretrained(agrl.Pretrained(dir).Full().MicroBatch(4), 5)
				if err != nil {
					t.Fatal(err)
				}
				p.checkpointTraces = k == 2
				runs = append(runs, newHostRun(t, p, graphPath, 1e-3))
			}
			vars := runs[0].tr.p.trainVars()
			if want := len(runs[0].tr.p.cfg.Tensors()); len(vars) != want {
				t.Fatalf("%d trained variables for the model's %d tensors", len(vars), want)
			}
			batch := segTestBatch(320, 30, 45, 12, 20, 2, 33, 8) // micro-batches of 4 and 3 (in 4 rows)
			for step := range 2 {
				stepRuns(t, runs, batch)
				host, gr := runs[0].stats[step], runs[1].stats[step]
				if ck := runs[2]; !sameGrads(ck.grads[step], runs[0].grads[step]) || ck.stats[step].Loss != host.Loss {
					t.Errorf("step %d: checkpointed traces change the step: loss %v, whole %v", step+1, ck.stats[step].Loss, host.Loss)
				}
				near := func(what string, x, y float64) {
					if math.Abs(x-y) > 1e-5*(1+math.Abs(x)) || bad(x) || bad(y) {
						t.Errorf("step %d %s: host %v, graph %v", step+1, what, x, y)
					}
				}
				near("loss", host.Loss, gr.Loss)
				near("grad norm", host.GradNorm, gr.GradNorm)
				for m, v := range gr.Metrics {
					near(m, host.Metrics[m], v)
				}
				// As for LoRA, the second step's tolerance is wider: AdamW's first update moves
				// each element by about ±lr whatever its gradient's size, so one whose gradient
				// is rounding noise can move the other way in one run.
				tol := []float64{1e-4, 1e-3}[step]
				rel := 0.0
				for i, g := range runs[1].grads[step] {
					worst, scale, at := gradGap(g, runs[0].grads[step][i])
					rel = max(rel, worst/scale)
					if worst > tol*scale || scale == 0 || bad(scale) {
						t.Errorf("step %d %s: host and graph gradients differ by %.3g at %d (largest %.3g)",
							step+1, vars[i].Path(), worst, at, scale)
					}
				}
				t.Logf("step %d: largest relative gradient difference %.3g", step+1, rel)
			}
		})
	}
}

// TestPretrainedHostUpdateMatchesGraph: the host's AdamW step (hostUpdate) applies the update graph's
// arithmetic: from the same gradients (large enough that clipping scales them; three
// steps, so the bias corrections move) two learners' weights, moments and step counters, and
// the norms they return, agree to float32 rounding — under LoRA (every factor decays) and
// under full fine-tuning (the matrices decay, the norms' gains do not); a gradient that is
// not finite is reported and changes nothing.
func TestPretrainedHostUpdateMatchesGraph(t *testing.T) {
	dir := tinyFamily(t, hf.Qwen3)
	for _, full := range []bool{false, true} {
		var ts [2]*pretrainedTrainer
		for k := range ts {
			spec := agrl.Pretrained(dir).LoRA(4, 8)
			if full {
				spec = spec.Full()
			}
			p, err := LoadPretrained(spec, 5)
			if err != nil {
				t.Fatal(err)
			}
			l, err := p.newLearner("grpo", segTestLoss, []string{"adv", "mask"}, agrl.NewAdamW().LR(1e-2).WeightDecay(0.1).ClipNorm(1), 1)
			if err != nil {
				t.Fatal(err)
			}
			ts[k] = l.(*pretrainedTrainer)
		}
		vars := ts[0].p.trainVars()
		for step := range 3 {
			grads := make([][]float32, len(vars))
			for i, v := range vars {
				grads[i] = make([]float32, v.Shape().Size())
				for j := range grads[i] {
					grads[i][j] = float32(math.Sin(float64(j*7+i*13+step))) * 0.3
				}
			}
			nh, err := ts[0].hostUpdate(clone2(grads), 1e-2)
			if err != nil {
				t.Fatal(err)
			}
			ng, err := ts[1].graphUpdate(clone2(grads), 1e-2)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(nh-ng) > 1e-6*ng || ng < 2 {
				t.Errorf("full %v step %d: norm %v on the host, %v by the graph (want > 2: clipped)", full, step+1, nh, ng)
			}
		}
		for _, prefix := range []string{"", ts[0].statePath("m"), ts[0].statePath("v")} {
			for _, v := range vars {
				a, b := varData(t, ts[0].p, prefix+v.Path()), varData(t, ts[1].p, prefix+v.Path())
				if worst, scale, at := gradGap(a, b); worst > 2e-6*max(scale, 1e-3) {
					t.Errorf("full %v: %s%s differs by %.3g at %d (largest %.3g)", full, prefix, v.Path(), worst, at, scale)
				}
			}
		}
		if a, b := varData(t, ts[0].p, ts[0].statePath("step")), varData(t, ts[1].p, ts[0].statePath("step")); a[0] != 3 || b[0] != 3 {
			t.Errorf("full %v: step counters %v and %v, want 3", full, a, b)
		}
		before := clone2([][]float32{varData(t, ts[0].p, vars[0].Path())})[0]
		grads := make([][]float32, len(vars))
		for i, v := range vars {
			grads[i] = make([]float32, v.Shape().Size())
		}
		grads[0][0] = float32(math.NaN())
		if n, err := ts[0].hostUpdate(grads, 1e-2); err != nil || finite(n) {
			t.Errorf("full %v: a NaN gradient: norm %v, %v", full, n, err)
		}
		if !slices.Equal(before, varData(t, ts[0].p, vars[0].Path())) {
			t.Errorf("full %v: a NaN gradient changed the weights", full)
		}
	}
}

// varData is a copy of the flat float32 value of the store variable at path.
func varData(t *testing.T, p *PretrainedPolicy, path string) []float32 {
	t.Helper()
	v := p.store.GetVariable(path)
	if v == nil {
		t.Fatalf("no variable %s", path)
	}
	val, err := v.Value()
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](val)
}
