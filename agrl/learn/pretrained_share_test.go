package learn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
)

// sharedTestBatch is a GRPO-like batch of vocabulary vocab: prompts of the given lengths,
// each followed by episodes' rests of the lengths in rests (one slice per prompt), then the
// lone sequences of lengths lone; values as segTestBatch's (an advantage per token, the
// mask on from a third of each sequence).
func sharedTestBatch(vocab int, prompts []int, rests [][]int, lone ...int) TrainBatch {
	rng := rand.New(rand.NewPCG(3, 8))
	toks := func(n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(rng.IntN(vocab))
		}
		return s
	}
	b := TrainBatch{Values: map[string][][]float32{}}
	add := func(seq []int32) {
		n := len(seq)
		adv, mask := make([]float32, n), make([]float32, n)
		for i := range adv {
			adv[i] = float32(rng.Float64()*2 - 1)
			if i >= n/3 {
				mask[i] = 1
			}
		}
		b.Tokens = append(b.Tokens, seq)
		b.Values["adv"] = append(b.Values["adv"], adv)
		b.Values["mask"] = append(b.Values["mask"], mask)
	}
	for k, n := range prompts {
		prompt := toks(n)
		for _, r := range rests[k] {
			add(slices.Concat(prompt, toks(r)))
		}
	}
	for _, n := range lone {
		add(toks(n))
	}
	return b
}

// TestHostSharedPrompt: a host step that traces each prompt once for its episodes (hostPlan,
// llm.TraceAfter) takes the step that tracing every sequence whole takes — loss, metrics and
// gradients to rounding — with LoRA on Llama and Qwen3 and with full fine-tuning, for two
// steps; shareGroups finds the prompts' groups (and leaves the lone sequence alone), hostPlan
// traces the prompt once and each episode's rest after it, and under a call budget that a
// group of four does not fit, shareChunks splits it in two parts that do.
func TestHostSharedPrompt(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	defer func(b int, s bool) { headBlock, hostSharing = b, s }(headBlock, hostSharing)
	headBlock = 16
	// two prompts of 40 and 24 tokens, with four and three episodes; one lone sequence
	batch := sharedTestBatch(320, []int{40, 24}, [][]int{{7, 20, 3, 11}, {12, 25, 5}}, 18)
	for _, c := range []struct {
		name string
		f    hf.Family
		full bool
	}{{"llama lora", hf.Llama, false}, {"qwen3 lora", hf.Qwen3, false}, {"qwen3 full", hf.Qwen3, true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyFamily(t, c.f)
			var runs []*recordedRun
			for range 2 {
				spec := agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(4)
				if c.full {
					spec = agrl.Pretrained(dir).Full().MicroBatch(4)
				}
				p, err := LoadPretrained(spec, 5)
				if err != nil {
					t.Fatal(err)
				}
				if !c.full {
					withRandomAdapters(t, p)
				}
				runs = append(runs, newHostRun(t, p, false, 1e-2))
			}
			sorted := byLength(batch, nil).Tokens
			groups := shareGroups(sorted)
			sizes := []int{}
			for _, g := range groups {
				sizes = append(sizes, len(g))
			}
			if slices.Sort(sizes); !slices.Equal(sizes, []int{1, 3, 4}) {
				t.Fatalf("shareGroups: %v, want groups of 4, 3 and 1", groups)
			}
			p := runs[0].tr.p
			m, err := p.hostModel()
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range groups {
				seqs := make([][]int32, len(g))
				for k, i := range g {
					seqs[k] = sorted[i]
				}
				units, ok := p.hostPlan(m, seqs, true)
				switch {
				case !ok:
					t.Fatalf("group %v: not on the host", g)
				case len(g) == 1 && len(units) != 1:
					t.Errorf("a lone sequence: %d traces", len(units))
				case len(g) > 1 && (len(units) != len(g)+1 || len(units[0].ids) < 24 || len(units[0].seqs) != len(g) || !units[0].opts.Prefix):
					t.Errorf("group %v: units %+v, want the prompt once then each rest", g, units)
				}
				if len(g) == 4 { // a budget the whole group does not fit, checkpointed, and its halves do
					light := func(units []hostUnit) float64 {
						for i := range units {
							units[i].opts.Checkpointed = true
						}
						return p.hostBytes(m, units)
					}
					half, _ := p.hostPlan(m, seqs[:2], true)
					whole := light(units)
					if light(half) >= whole-1 {
						t.Fatalf("a half's estimate %.0f, the whole group's %.0f", light(half), whole)
					}
					defer func(g float64) { p.spec.CallMemoryGiB = g }(p.spec.CallMemoryGiB)
					p.spec.CallMemoryGiB = (whole - 1) / (1 << 30)
					// shortest first: the group of three, the four in halves, the lone sequence
					_, chunks := p.shareChunks(m, byLength(batch, []string{"adv", "mask"}), []string{"adv", "mask"})
					if want := [][2]int{{0, 3}, {3, 5}, {5, 7}, {7, 8}}; !slices.Equal(chunks, want) {
						t.Errorf("under %.0f bytes: micro-batches %v, want %v", whole-1, chunks, want)
					}
				}
			}
			for range 2 {
				hostSharing = true
				stepRuns(t, runs[:1], batch)
				hostSharing = false
				stepRuns(t, runs[1:], batch)
			}
			for step := range 2 {
				a, b := runs[0].stats[step], runs[1].stats[step]
				near := func(what string, x, y float64) {
					if math.Abs(x-y) > 1e-5*(1+math.Abs(y)) || bad(x) || bad(y) {
						t.Errorf("step %d %s: shared %v, alone %v", step+1, what, x, y)
					}
				}
				near("loss", a.Loss, b.Loss)
				near("grad norm", a.GradNorm, b.GradNorm)
				for k, v := range b.Metrics {
					near(k, a.Metrics[k], v)
				}
				tol := []float64{1e-5, 1e-3}[step] // step 2 from AdamW's first update: TestHostLoRAStepMatchesGraph says why wider
				for i, g := range runs[1].grads[step] {
					worst, scale, at := gradGap(g, runs[0].grads[step][i])
					if worst > tol*scale || scale == 0 || bad(scale) {
						t.Errorf("step %d %s: shared and alone gradients differ by %.3g at %d (largest %.3g)",
							step+1, p.trainVars()[i].Path(), worst, at, scale)
					}
				}
			}
		})
	}
}
