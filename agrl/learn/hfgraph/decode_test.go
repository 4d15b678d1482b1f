package hfgraph

import (
	"math"
	"testing"

	"agrl.dev/agrl/llm"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// decodeExec builds an executor of m.Decode over b caches: inputs ids, starts, counts, then the
// caches; outputs the logits, then the updated caches.
func decodeExec(t testing.TB, m *Model, b int) *model.Exec {
	t.Helper()
	e, err := model.NewExec(backend(t), m.Store(), func(_ *model.Scope, in []*graph.Node) []*graph.Node {
		logits, caches := m.Decode(in[3:3+b], in[0], in[1], in[2])
		return append([]*graph.Node{logits}, caches...)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// logSoftmax64 is log softmax(z) in float64.
func logSoftmax64(z []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range z {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range z {
		sum += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = float64(v) - mx - math.Log(sum)
	}
	return out
}

// TestDecodeMatchesHost feeds three sequences through Decode in rounds of different sizes per
// row (a prompt, single tokens, an observation), with padding in every round and caches
// holding garbage past their length, and checks each round's logits against agrl/llm's full
// forward pass over the sequence so far: log-softmax within 1e-4, on every family, without
// and with adapters (and Base with them present).
func TestDecodeMatchesHost(t *testing.T) {
	// chunks[b][r]: how many tokens row b feeds in round r.
	chunks := [][]int{{9, 1, 1, 4, 1}, {3, 1, 6, 1, 1}, {1, 1, 1, 1, 2}}
	const width, capacity = 12, 32 // every round pads its ids to width tokens
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			ref := loadLLM(t, fam)
			g, err := FromLLM(model.NewStore(), "", ref)
			if err != nil {
				t.Fatal(err)
			}
			vocab := ref.Config().VocabSize
			lens := make([]int, len(chunks))
			for b, cs := range chunks {
				for _, n := range cs {
					lens[b] += n
				}
			}
			seqs := testSeqs(vocab, 11, lens...)
			run := func(name string, gm *Model, host *llm.Model) {
				e := decodeExec(t, gm, len(chunks))
				caches := make([]*tensors.Tensor, len(chunks))
				for b := range caches {
					// Garbage past each cache's length: Decode must never read it.
					data := make([]float32, gm.CacheShape(capacity).Size())
					for i := range data {
						data[i] = float32(i%7) - 3
					}
					caches[b] = tensors.FromFlatDataAndDimensions(data, gm.CacheShape(capacity).Dimensions...)
				}
				fed := make([]int, len(chunks))
				worst := 0.0
				for r := range chunks[0] {
					ids := make([]int32, len(chunks)*width)
					starts, counts := make([]int32, len(chunks)), make([]int32, len(chunks))
					for b, cs := range chunks {
						copy(ids[b*width:], seqs[b][fed[b]:fed[b]+cs[r]])
						for i := cs[r]; i < width; i++ {
							ids[b*width+i] = int32((b + i) % vocab) // padding: any ids
						}
						starts[b], counts[b] = int32(fed[b]), int32(cs[r])
					}
					args := []any{tensors.FromFlatDataAndDimensions(ids, len(chunks), width), starts, counts}
					for _, c := range caches {
						args = append(args, c)
					}
					out, err := e.Exec(args...)
					if err != nil {
						t.Fatal(err)
					}
					logits := tensors.MustCopyFlatData[float32](out[0])
					copy(caches, out[1:])
					for b, cs := range chunks {
						fed[b] += cs[r]
						want, err := host.Logits(seqs[b][:fed[b]])
						if err != nil {
							t.Fatal(err)
						}
						got := logSoftmax64(logits[b*vocab : (b+1)*vocab])
						for v, w := range logSoftmax64(want[fed[b]-1]) {
							worst = max(worst, math.Abs(got[v]-w))
						}
					}
				}
				t.Logf("%s: max |Δ log-softmax| %.2g over %d rounds", name, worst, len(chunks[0]))
				if worst > 1e-4 {
					t.Errorf("%s: max |Δ log-softmax| %g, want <= 1e-4", name, worst)
				}
			}
			run("base", g, ref)
			a := randomAdapters(t, ref, 3)
			if err := g.SetAdapters(a); err != nil {
				t.Fatal(err)
			}
			adapted, err := ref.WithAdapters(a)
			if err != nil {
				t.Fatal(err)
			}
			run("LoRA", g, adapted)
			run("Base with adapters", g.Base(), ref)
		})
	}
}
