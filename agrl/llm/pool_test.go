package llm

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestFloatClass checks the pool's size classes: every length gets the smallest capacity of
// the form j·2^e (j in 9…16) that holds it, less than an eighth spare, and a capacity is its
// own class's, so that what PutFloats takes back is what Floats hands out for that class.
func TestFloatClass(t *testing.T) {
	prevCap := 0
	prevClass := -1
	for n := poolMin; n < 1<<22; n += 1 + n/97 {
		c, capacity := floatClass(n)
		if capacity < n || 8*(capacity-n) >= capacity && capacity != n {
			t.Fatalf("n=%d: capacity %d", n, capacity)
		}
		if c2, cap2 := floatClass(capacity); c2 != c || cap2 != capacity {
			t.Fatalf("n=%d: capacity %d is class %d (capacity %d), not %d", n, capacity, c2, cap2, c)
		}
		if c < prevClass || (c == prevClass) != (capacity == prevCap) {
			t.Fatalf("n=%d: class %d capacity %d after class %d capacity %d", n, c, capacity, prevClass, prevCap)
		}
		prevClass, prevCap = c, capacity
	}
	if _, capacity := floatClass(9 << 20); capacity != 9<<20 {
		t.Fatalf("9·2^20 floats: capacity %d", capacity)
	}
	if c, capacity := floatClass(poolMin); capacity != poolMin || c < 0 || c >= len(floatPools) {
		t.Fatalf("poolMin: class %d capacity %d", c, capacity)
	}
}

// TestFloatsReuse checks that a buffer given back is handed out again for a length of its
// class (the pool may drop it at a collection, which this test does not run), that zeros
// clears it, and that a buffer Floats did not make (a capacity outside the classes) is not
// taken.
func TestFloatsReuse(t *testing.T) {
	b := Floats(10000)
	if len(b) != 10000 || cap(b) != 10240 {
		t.Fatalf("len %d cap %d", len(b), cap(b))
	}
	for i := range b {
		b[i] = 1
	}
	PutFloats(b)
	z := zeros(9999)
	if &z[0] != &b[0] {
		t.Skip("the pool dropped the buffer (a collection ran)")
	}
	for i, v := range z {
		if v != 0 {
			t.Fatalf("zeros[%d] = %v", i, v)
		}
	}
	odd := make([]float32, 10001)
	PutFloats(odd, nil)
	if c := Floats(10001); &c[0] == &odd[0] {
		t.Fatal("a buffer of capacity 10001 came back from the pool")
	}
}

// TestTracesFromThePool runs traces and backward passes interleaved, as a host training step
// does (every trace of a micro-batch, then their backward passes; whole and checkpointed;
// adapters with and without dropout, and every weight's gradients of a model holding its
// projections transposed), with every buffer pooled and poisoned (NaN) when given back, and
// checks each sequence's gradients against a pass of its own on fresh memory, bit for bit: a
// buffer read before it is written, or given back while in use, would change them.
func TestTracesFromThePool(t *testing.T) {
	defer func(n int) { poolMin, poolPoison = n, false }(poolMin)
	lengths := []int{11, 7, 16, 11}
	for _, c := range []struct {
		variant string
		dropout float64
		full    bool
	}{{"llama", 0, false}, {"qwen2", 0, true}, {"qwen3", 0, false}, {"qwen3", 0.2, false}, {"qwen3", 0, true}} {
		name := fmt.Sprintf("%s, dropout %v, full %v", c.variant, c.dropout, c.full)
		m, a := adapted(t, c.variant)
		if c.full { // the projections held [in, out], as a shared store holds them: linearT, the transposes' scratch
			mt, err := FromWeightsTransposed(m.cfg, "", storeLayout(m))
			if err != nil {
				t.Fatal(err)
			}
			m = mt
		}
		seqs := make([][]int32, len(lengths))
		dhs := make([][]float32, len(lengths))
		for i, n := range lengths {
			seqs[i] = traceIDs(n+i, m.cfg.VocabSize)[i:]
			dhs[i] = make([]float32, n*m.cfg.HiddenSize)
			for j := range dhs[i] {
				dhs[i][j] = float32(math.Cos(float64(3*j + i)))
			}
		}
		opts := func(i int) TraceOptions {
			return TraceOptions{Checkpointed: i%2 == 1, Dropout: c.dropout, Seed: uint64(7 + i)}
		}
		trace := func(i int) *Trace {
			tr, err := m.TraceWith(seqs[i], opts(i))
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}
		backward := func(i int, tr *Trace) [][]float32 {
			var out [][]float32
			if c.full {
				g := m.NewWeightGrads(true)
				if err := tr.BackwardWeights(dhs[i], g); err != nil {
					t.Fatal(err)
				}
				sums := g.Tensors()
				for _, spec := range m.cfg.Tensors() {
					if v, ok := sums[spec.Name]; ok {
						out = append(out, slices.Clone(v))
					}
				}
				g.Release()
				return out
			}
			g := a.NewGradients()
			if err := tr.Backward(dhs[i], g); err != nil {
				t.Fatal(err)
			}
			for _, p := range g.Params() {
				out = append(out, p.Data)
			}
			return out
		}
		// Each alone, on fresh memory (nothing pooled: every length is under poolMin).
		poolMin = 1 << 40
		want := make([][][]float32, len(seqs))
		for i := range seqs {
			want[i] = backward(i, trace(i))
		}
		// Interleaved, everything pooled and poisoned when given back.
		poolMin, poolPoison = 16, true
		got := make([][][]float32, len(seqs))
		for round := range 2 { // the second round takes what the first gave back
			t0, t1 := trace(0), trace(1)
			got[0] = backward(0, t0)
			t2 := trace(2)
			got[1] = backward(1, t1)
			t3 := trace(3)
			got[3] = backward(3, t3)
			got[2] = backward(2, t2)
			for i := range seqs {
				if len(got[i]) != len(want[i]) || len(got[i]) == 0 {
					t.Fatalf("%s: %d gradients, want %d", name, len(got[i]), len(want[i]))
				}
				if !sameBits(got[i], want[i]) {
					t.Errorf("%s, round %d: sequence %d's gradients differ from a pass on fresh memory", name, round, i)
				}
			}
		}
		poolPoison = false
	}
}

// TestForwardFromThePool runs the KV-cache forward pass as a sampler does (a batched prefill
// of every position, batched decode steps, one sequence stepping alone) with every buffer
// pooled and poisoned (NaN) when given back, and checks every logit against the same calls
// on fresh memory, bit for bit: a product's result given back while still read, or a buffer
// read before it is written, would change them. It runs the portable loops (agrl/learn's
// kernels are tied to the loops' and to a lone sequence's bits by agrl/learn's
// TestNextBatchHostKernels, without poisoning).
func TestForwardFromThePool(t *testing.T) {
	defer func(n int) { poolMin, poolPoison = n, false }(poolMin)
	for _, c := range []struct {
		variant string
		full    bool // projections held transposed (linearT's pooled results), no adapters
	}{{"llama", false}, {"qwen2", true}, {"qwen3", false}} {
		m, _ := adapted(t, c.variant)
		if c.full {
			mt, err := FromWeightsTransposed(m.cfg, "", storeLayout(loadVariant(t, c.variant)))
			if err != nil {
				t.Fatal(err)
			}
			m = mt
		}
		V := m.cfg.VocabSize
		run := func() [][]float32 {
			var out [][]float32
			a, b := m.NewCache(), m.NewCache()
			rows, err := m.StepBatch([]*Cache{a, b}, [][]int32{traceIDs(9, V), traceIDs(14, V)[3:]})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				out = append(out, r...)
			}
			for s := range 4 {
				next, err := m.NextBatch([]*Cache{b, a}, [][]int32{{int32(s + 1)}, {int32(2*s + 3)}})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, next...)
			}
			alone, err := m.StepBatch([]*Cache{a}, [][]int32{traceIDs(5, V)})
			if err != nil {
				t.Fatal(err)
			}
			return append(out, alone[0]...)
		}
		poolMin = 1 << 40 // nothing pooled
		want := run()
		poolMin, poolPoison = 16, true
		for round := range 2 { // the second round takes what the first gave back
			if got := run(); !sameBits(got, want) {
				t.Errorf("%s (transposed %v), round %d: logits differ from the passes on fresh memory", c.variant, c.full, round)
			}
		}
		poolPoison = false
	}
}
