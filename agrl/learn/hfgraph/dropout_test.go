package hfgraph

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// TestDropoutMask checks the mask itself: each entry zeroed with probability p, the others
// divided by 1−p exactly, the same mask for the same RNG state and a new one from the state
// it returns.
func TestDropoutMask(t *testing.T) {
	const p, rows, cols = 0.25, 200, 50
	e, err := model.NewExec(backend(t), model.NewStore(), func(_ *model.Scope, rng, x *graph.Node) (*graph.Node, *graph.Node, *graph.Node) {
		next, a := dropout(rng, x, p)
		_, b := dropout(next, x, p)
		_, again := dropout(rng, x, p)
		return a, b, again
	})
	if err != nil {
		t.Fatal(err)
	}
	state, err := graph.RNGStateFromSeed(7)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%7) + 0.5
	}
	out, err := e.Call(state, tensors.FromFlatDataAndDimensions(x, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	a, b, again := tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1]), tensors.MustCopyFlatData[float32](out[2])
	if !slices.Equal(a, again) {
		t.Error("the same RNG state gave two different masks")
	}
	zeros, same := 0, 0
	for i, v := range a {
		switch v {
		case 0:
			zeros++
		case x[i] * float32(1/(1-p)):
		default:
			t.Fatalf("entry %d: %v from %v, want 0 or %v", i, v, x[i], x[i]*float32(1/(1-p)))
		}
		if (v == 0) == (b[i] == 0) {
			same++
		}
	}
	// 10,000 entries: the zeroed share's standard deviation is 0.0043.
	if share := float64(zeros) / float64(len(a)); math.Abs(share-p) > 0.02 {
		t.Errorf("zeroed share %.4f, want %v ± 0.02", share, p)
	}
	// Two independent masks agree on p² + (1−p)² = 0.625 of the entries.
	if share := float64(same) / float64(len(a)); math.Abs(share-0.625) > 0.03 {
		t.Errorf("the advanced state's mask agrees with the first on %.4f of the entries, want about 0.625", share)
	}
}

// dropoutStatsExec builds an executor of m.Dropout(rng).TokenStats; rng is its fourth input.
func dropoutStatsExec(t testing.TB, m *Model) *model.Exec {
	t.Helper()
	e, err := model.NewExec(backend(t), m.Store(), func(_ *model.Scope, tokens, lengths, invT, rng *graph.Node) (*graph.Node, *graph.Node, *graph.Node) {
		return m.Dropout(rng).TokenStats(tokens, lengths, invT)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func dropoutStats(t *testing.T, e *model.Exec, seqs [][]int32, seed int64) [][]float32 {
	t.Helper()
	tok, lens, err := Pad(seqs, 12)
	if err != nil {
		t.Fatal(err)
	}
	state, err := graph.RNGStateFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Call(tok, lens, float32(1), state)
	if err != nil {
		t.Fatal(err)
	}
	flat := tensors.MustCopyFlatData[float32](out[0])
	return [][]float32{flat}
}

// TestDropoutView checks where LoRA dropout acts: only on the adapter term (zero adapters keep
// the base's values bit for bit under dropout), masks that follow from the seed, and nothing at
// all with a dropout of 0 or on the Base view.
func TestDropoutView(t *testing.T) {
	ref := loadLLM(t, "qwen3")
	seqs := testSeqs(ref.Config().VocabSize, 5, 12, 9, 4)
	cfg := allLinear(4, 8)
	cfg.Dropout = 0.3

	fresh := loadGraph(t, "qwen3")
	if err := fresh.AddLoRA(cfg, 3); err != nil {
		t.Fatal(err)
	}
	base := runStats(t, statsExec(t, fresh.Base()), seqs, 12, 1)
	flat := func(s tokenStats) []float32 { return slices.Concat(s.logp...) }
	if got := dropoutStats(t, dropoutStatsExec(t, fresh), seqs, 1); !slices.Equal(got[0], flat(base)) {
		t.Error("zero adapters under dropout: the values differ from the base's (dropout must touch the adapter term only)")
	}

	// withAdapters is the qwen3 graph with adapters of cfg (dropout d), B random.
	withAdapters := func(d float64) *Model {
		g := loadGraph(t, "qwen3")
		c := cfg
		c.Dropout = d
		a, err := ref.AddLoRA(c, 3)
		if err != nil {
			t.Fatal(err)
		}
		randomizeB(a, 4, 0.1)
		if err := g.SetAdapters(a); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := withAdapters(0.3)
	plain := flat(runStats(t, statsExec(t, g), seqs, 12, 1))
	e := dropoutStatsExec(t, g)
	d1, d1again, d2 := dropoutStats(t, e, seqs, 1)[0], dropoutStats(t, e, seqs, 1)[0], dropoutStats(t, e, seqs, 2)[0]
	if !slices.Equal(d1, d1again) {
		t.Error("the same seed gave different values")
	}
	if slices.Equal(d1, d2) || slices.Equal(d1, plain) {
		t.Error("dropout 0.3 on random adapters changes nothing")
	}
	if got := dropoutStats(t, dropoutStatsExec(t, g.Base()), seqs, 1)[0]; !slices.Equal(got, flat(runStats(t, statsExec(t, g.Base()), seqs, 12, 1))) {
		t.Error("the Base view under dropout differs from the Base view")
	}

	if got := dropoutStats(t, dropoutStatsExec(t, withAdapters(0)), seqs, 1)[0]; !slices.Equal(got, plain) {
		t.Error("dropout 0: the view's values differ from the model's")
	}
}
