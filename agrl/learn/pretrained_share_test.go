package learn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// sharedTestBatch is a GRPO-like batch of vocabulary vocab: prompts of the given lengths,
// each followed by episodes' rests of the lengths in rests (one slice per prompt), then the
// lone sequences of lengths lone; values as segTestBatch's (an advantage per token, the
// mask on from a third of each sequence).
func sharedTestBatch(vocab int, prompts []int, rests [][]int, lone ...int) TrainBatch {
	rng := rand.New(rand.NewPCG(3, 8))
	toks := func(n int) []int32 { return randomTokens(rng, vocab, n) }
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

// TestHostSharedPrompt: a host step that traces each prompt once for its episodes
// (pretrained_share.go) takes the step that tracing every sequence whole takes — loss,
// metrics and gradients to rounding — with LoRA on Llama and Qwen3 and with full fine-tuning,
// for two steps, and again with every trace checkpointed (the prompt's too: its backward pass
// runs its layers again, its keys and values kept). The batch: two prompts of 40 and 24
// tokens with four and three episodes, and a lone sequence; in micro-batches of two, so that
// a prompt is held across its group's micro-batches. shareChunks orders the groups by their
// shortest episode and the lone sequence last, and under a call budget that the prompt's
// whole trace does not fit beside its micro-batches it checkpoints the prompt, and under one
// that that does not fit either, traces its episodes whole.
func TestHostSharedPrompt(t *testing.T) {
	if !hostKernels {
		t.Skip("host training needs the host kernels (GOEXPERIMENT=simd on an AVX-512 or AVX2 CPU)")
	}
	defer func(b int, s bool) { headBlock, hostSharing = b, s }(headBlock, hostSharing)
	headBlock = 16
	batch := sharedTestBatch(320, []int{40, 24}, [][]int{{7, 20, 3, 11}, {12, 25, 5}}, 18)
	names := []string{"adv", "mask"}
	for _, c := range []struct {
		name string
		f    hf.Family
		full bool
	}{{"llama lora", hf.Llama, false}, {"qwen3 lora", hf.Qwen3, false}, {"qwen3 full", hf.Qwen3, true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := tinyFamily(t, c.f)
			var runs []*recordedRun // shared, whole, shared with every trace checkpointed
			for k := range 3 {
				spec := agrl.Pretrained(dir).LoRA(4, 8).MicroBatch(2)
				if c.full {
					spec = agrl.Pretrained(dir).Full().MicroBatch(2)
				}
				p, err := LoadPretrained(spec, 5)
				if err != nil {
					t.Fatal(err)
				}
				if !c.full {
					withRandomAdapters(t, p)
				}
				p.checkpointTraces = k == 2
				runs = append(runs, newHostRun(t, p, false, 1e-2))
			}
			p := runs[0].tr.p
			m, err := p.hostModel()
			if err != nil {
				t.Fatal(err)
			}
			// By length: 18 (lone), 29 (B), 36 (B), 43 (A), 47 (A), 49 (B), 51 (A), 60 (A).
			sorted := byLength(batch, names)
			if g := shareGroups(sorted.Tokens); !slices.EqualFunc(g, [][]int{{0}, {1, 2, 5}, {3, 4, 6, 7}}, slices.Equal) {
				t.Fatalf("shareGroups: %v", g)
			}
			_, chunks, shares := p.shareChunks(m, sorted, names)
			if want := [][2]int{{0, 2}, {2, 3}, {3, 5}, {5, 7}, {7, 8}}; !slices.Equal(chunks, want) {
				t.Fatalf("micro-batches %v, want %v", chunks, want)
			}
			for k, sh := range shares {
				pre := map[int]int{0: 24, 1: 24, 2: 40, 3: 40}[k] // at least: the tokens after may agree by chance
				if (k < 4) != (sh.prefix >= pre && pre > 0) || k == 4 && sh.prefix != 0 || sh.last != (k%2 == 1 && k < 4) || sh.opts.Checkpointed {
					t.Errorf("micro-batch %d: %+v, want a prefix of %d whole, last of its group %v", k, sh, pre, k%2 == 1)
				}
			}
			// Budgets from 50 KB up: the four A episodes' micro-batches (as many as the budget
			// allows, chunks) beside their prompt whole where that fits, else beside it
			// checkpointed, else each episode whole; each of the three at some budget.
			aSeqs := [][]int32{sorted.Tokens[3], sorted.Tokens[4], sorted.Tokens[6], sorted.Tokens[7]}
			aPre := sharedPrefix(aSeqs)
			need := func(o llm.TraceOptions) float64 {
				held, back := p.prefixBytes(m, aPre, o)
				most := held + back
				for _, c := range p.chunks(aSeqs) { // each micro-batch's rests, checkpointed
					var units []hostUnit
					for i, s := range aSeqs[c[0]:c[1]] {
						units = append(units, hostUnit{seq: i, ids: s[aPre : len(s)-1], after: true, opts: llm.TraceOptions{Checkpointed: true}})
					}
					most = max(most, held+p.hostBytes(m, units, aPre))
				}
				return most
			}
			restore := p.spec.CallMemoryGiB
			seen := map[string]bool{}
			for budget := 50e3; budget < 4e6; budget *= 1.1 {
				p.spec.CallMemoryGiB = budget / (1 << 30)
				want := "alone"
				if need(llm.TraceOptions{}) <= budget {
					want = "whole"
				} else if need(llm.TraceOptions{Checkpointed: true}) <= budget {
					want = "checkpointed"
				}
				_, _, sh := p.shareChunks(m, sorted, names)
				got := "alone"
				for _, s := range sh {
					if s.prefix == aPre {
						got = map[bool]string{false: "whole", true: "checkpointed"}[s.opts.Checkpointed]
					}
				}
				if got != want {
					t.Errorf("a budget of %.0f bytes: the A prompt %s, want %s (needs %.0f whole, %.0f checkpointed)", budget, got, want,
						need(llm.TraceOptions{}), need(llm.TraceOptions{Checkpointed: true}))
				}
				seen[got] = true
			}
			if len(seen) != 3 {
				t.Errorf("the budgets gave %v", seen)
			}
			p.spec.CallMemoryGiB = restore
			for range 2 {
				hostSharing = true
				stepRuns(t, []*recordedRun{runs[0], runs[2]}, batch)
				hostSharing = false
				stepRuns(t, runs[1:2], batch)
			}
			for _, k := range []int{0, 2} {
				for step := range 2 {
					a, b := runs[k].stats[step], runs[1].stats[step]
					near := func(what string, x, y float64) {
						if math.Abs(x-y) > 1e-5*(1+math.Abs(y)) || bad(x) || bad(y) {
							t.Errorf("run %d step %d %s: shared %v, whole %v", k, step+1, what, x, y)
						}
					}
					near("loss", a.Loss, b.Loss)
					near("grad norm", a.GradNorm, b.GradNorm)
					for name, v := range b.Metrics {
						near(name, a.Metrics[name], v)
					}
					tol := []float64{1e-5, 1e-3}[step] // step 2 from AdamW's first update: TestHostLoRAStepMatchesGraph says why wider
					for i, g := range runs[1].grads[step] {
						worst, scale, at := gradGap(g, runs[k].grads[step][i])
						if worst > tol*scale || scale == 0 || bad(scale) {
							t.Errorf("run %d step %d %s: shared and whole gradients differ by %.3g at %d (largest %.3g)",
								k, step+1, p.trainVars()[i].Path(), worst, at, scale)
						}
					}
				}
			}
		})
	}
}
