package llm

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestTraceAfter: a prompt traced once (TraceOptions.Prefix) and two episodes' rests traced
// after it (TraceAfter) give the hidden states of the two whole sequences' traces bit for bit,
// and, the prefix's backward pass taking its continuations' key and value gradients and the
// sum of its positions' hidden-state gradients, the adapters' gradients of the two whole
// traces' backward passes to rounding: on every variant, whole and checkpointed, with LoRA
// dropout (the same seed throughout, the masks drawn at each row's position in the whole
// sequence), the attention's backward pass in blocks of 4 queries so that blocks of a
// continuation span the prefix's columns and its own.
func TestTraceAfter(t *testing.T) {
	defer func(b int) { attnBlock = b }(attnBlock)
	attnBlock = 4
	for _, name := range tracedVariants {
		for _, o := range []TraceOptions{{}, {Checkpointed: true}, {Dropout: 0.2, Seed: 7}} {
			label := fmt.Sprintf("%s %+v", name, o)
			m, a := adapted(t, name)
			H, V := m.cfg.HiddenSize, m.cfg.VocabSize
			ids := traceIDs(19, V)
			prompt, rests := ids[:7], [][]int32{ids[7:13], ids[13:16]} // continuations of 6 and 3
			// cot is a loss's gradient with respect to n positions' hidden states
			cot := func(n, k int) []float32 {
				r := make([]float32, n*H)
				for i := range r {
					r[i] = float32(math.Sin(float64(7*i + 3*k + 1)))
				}
				return r
			}
			want := a.NewGradients()
			var wholes [][]float32 // each whole sequence's hidden states
			var rs [][]float32
			for k, rest := range rests {
				seq := slices.Concat(prompt, rest)
				tr, err := m.TraceWith(seq, o)
				if err != nil {
					t.Fatal(err)
				}
				wholes = append(wholes, slices.Clone(tr.Hidden()))
				rs = append(rs, cot(len(seq), k))
				if err := tr.Backward(rs[k], want); err != nil {
					t.Fatal(err)
				}
			}
			po := o
			po.Prefix = true
			pre, err := m.TraceWith(prompt, po)
			if err != nil {
				t.Fatal(err)
			}
			P := len(prompt)
			for k := range rests {
				if !sameBits([][]float32{pre.Hidden()}, [][]float32{wholes[k][:P*H]}) {
					t.Errorf("%s: the prefix's hidden states differ from sequence %d's", label, k)
				}
			}
			got := a.NewGradients()
			dpre := make([]float32, P*H) // the prefix's hidden states' gradient: both sequences'
			var after []*Trace
			for k, rest := range rests {
				tr, err := m.TraceAfter(pre, rest, o)
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits([][]float32{tr.Hidden()}, [][]float32{wholes[k][P*H:]}) {
					t.Errorf("%s: continuation %d's hidden states differ from its whole sequence's (max diff %g)", label, k,
						maxDiff32(tr.Hidden(), wholes[k][P*H:]))
				}
				after = append(after, tr)
				for i := range dpre {
					dpre[i] += rs[k][i]
				}
			}
			if err := pre.Backward(dpre, got); err == nil || !strings.Contains(err.Error(), "2 traces that continue this one") {
				t.Errorf("%s: the prefix's backward pass before its continuations': %v", label, err)
			}
			// What the prefix keeps for its continuations, against TraceBytes: its keys and
			// values, then their gradients' sums too (made by the first continuation's backward pass).
			kvBytes := func() float64 {
				n := 0
				for _, kv := range pre.kv {
					n += len(kv.k) + len(kv.v) + len(kv.dk) + len(kv.dv)
				}
				return 4 * float64(n)
			}
			with, _ := m.TraceBytes(P, po)
			without, _ := m.TraceBytes(P, o)
			if got := kvBytes(); 2*got != with-without {
				t.Errorf("%s: the prefix keeps %.0f bytes of keys and values; TraceBytes counts %.0f with their gradients", label, got, with-without)
			}
			for k, tr := range after {
				if err := tr.Backward(rs[k][P*H:], got); err != nil {
					t.Fatal(err)
				}
				if w, _ := m.TraceBytes(P, po); k == 0 && kvBytes() != w-without {
					t.Errorf("%s: with their gradients, the prefix keeps %.0f bytes; TraceBytes counts %.0f", label, kvBytes(), w-without)
				}
			}
			if err := pre.Backward(dpre, got); err != nil {
				t.Fatal(err)
			}
			if _, err := m.TraceAfter(pre, rests[0], o); err == nil || !strings.Contains(err.Error(), "backward pass ran already") {
				t.Errorf("%s: a continuation of a spent prefix: %v", label, err)
			}
			pw, pg := want.Params(), got.Params()
			for k := range pw {
				big := matLargest(pw[k].Data)
				if d := maxDiff32(pw[k].Data, pg[k].Data); !(d <= 1e-5*big) || big == 0 {
					t.Errorf("%s: %s: the shared traces' gradient differs from the whole sequences' by %g (largest %g)",
						label, pw[k].Name, d, big)
				}
			}
		}
	}
}

// TestTraceAfterWeights: BackwardWeights through a prefix and its continuations gives every
// weight's gradient (the embeddings' rows, norms and projections) that the whole sequences'
// traces give, to rounding.
func TestTraceAfterWeights(t *testing.T) {
	for _, name := range []string{"llama-sharded", "qwen3"} {
		m := loadVariant(t, name)
		H, V := m.cfg.HiddenSize, m.cfg.VocabSize
		ids := traceIDs(17, V)
		prompt, rests := ids[:9], [][]int32{ids[9:14], ids[14:17]}
		rs := make([][]float32, len(rests))
		want, got := m.NewWeightGrads(false), m.NewWeightGrads(false)
		dpre := make([]float32, len(prompt)*H)
		pre, err := m.TraceWith(prompt, TraceOptions{Prefix: true})
		if err != nil {
			t.Fatal(err)
		}
		for k, rest := range rests {
			seq := slices.Concat(prompt, rest)
			rs[k] = make([]float32, len(seq)*H)
			for i := range rs[k] {
				rs[k][i] = float32(math.Cos(float64(5*i + k)))
			}
			tr, err := m.Trace(seq)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.BackwardWeights(rs[k], want); err != nil {
				t.Fatal(err)
			}
			after, err := m.TraceAfter(pre, rest, TraceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := after.BackwardWeights(rs[k][len(prompt)*H:], got); err != nil {
				t.Fatal(err)
			}
			for i := range dpre {
				dpre[i] += rs[k][i]
			}
		}
		if err := pre.BackwardWeights(dpre, got); err != nil {
			t.Fatal(err)
		}
		wt, gt := want.Tensors(), got.Tensors()
		for tensor, w := range wt {
			big := matLargest(w)
			if d := maxDiff32(w, gt[tensor]); !(d <= 1e-5*big) {
				t.Errorf("%s: %s: the shared traces' gradient differs from the whole sequences' by %g (largest %g)", name, tensor, d, big)
			}
		}
	}
}

// TestTraceAfterErrors: continuing what cannot be continued is an error naming why.
func TestTraceAfterErrors(t *testing.T) {
	m, _ := adapted(t, "qwen3")
	other, _ := adapted(t, "qwen3")
	ids := traceIDs(6, m.cfg.VocabSize)
	plain, err := m.Trace(ids)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := m.TraceWith(ids, TraceOptions{Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	long := make([]int32, m.cfg.MaxPositionEmbeddings)
	for _, c := range []struct {
		what string
		m    *Model
		pre  *Trace
		ids  []int32
		o    TraceOptions
		want string
	}{
		{"nil prefix", m, nil, ids, TraceOptions{}, "nil prefix"},
		{"another model's", other, pre, ids, TraceOptions{}, "another model"},
		{"no Prefix option", m, plain, ids, TraceOptions{}, "without TraceOptions.Prefix"},
		{"a prefix after a prefix", m, pre, ids, TraceOptions{Prefix: true}, "cannot be a prefix itself"},
		{"no tokens", m, pre, nil, TraceOptions{}, "no tokens"},
		{"past the positions", m, pre, long, TraceOptions{}, fmt.Sprintf("%d tokens after 6 exceed", len(long))},
		{"a token outside", m, pre, []int32{1, int32(m.cfg.VocabSize)}, TraceOptions{}, "(position 7) is outside the vocabulary"},
		{"dropout 1", m, pre, ids, TraceOptions{Dropout: 1}, "outside [0, 1)"},
	} {
		if _, err := c.m.TraceAfter(c.pre, c.ids, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.what, err, c.want)
		}
	}
	if pre.open != 0 {
		t.Errorf("failed continuations left %d open on the prefix", pre.open)
	}
}
