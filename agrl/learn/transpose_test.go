package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/llm"
)

// TestTransposeBlock: the transposes (the AVX-512 or AVX2 tile kernel where the CPU has one,
// the loop, and the two split over workers) put src[i·lds+j] at dst[j·ldd+i], or add it there
// with one float32 addition, for sides that are and are not multiples of the 16×16 and 8×8
// tiles and rows longer than the matrix; they leave the rest of dst as it was (the padding
// past r columns and the rows past c), and all give the same bits.
func TestTransposeBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	kernels := []struct {
		name string
		f    func(dst []float32, ldd int, src []float32, r, c, lds int, add bool)
	}{
		{"block", transposeBlock},
		{"tiles", llm.TransposeTiles},
		{"workers", func(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
			transposeWorkers(2, dst, ldd, src, r, c, lds, add)
		}},
	}
	for _, sh := range [][2]int{{1, 1}, {1, 40}, {40, 1}, {15, 16}, {16, 16}, {17, 33}, {32, 48},
		{256, 576}, {300, 192}, {576, 256}, {255, 1536}} {
		for _, pad := range []int{0, 3} {
			r, c := sh[0], sh[1]
			lds, ldd := c+pad, r+pad
			src := make([]float32, (r-1)*lds+c)
			for k := range src {
				src[k] = float32(rng.NormFloat64())
			}
			dst0 := make([]float32, (c-1)*ldd+r)
			for k := range dst0 {
				dst0[k] = float32(rng.NormFloat64())
			}
			for _, add := range []bool{false, true} {
				want := append([]float32(nil), dst0...)
				for i := range r {
					for j := range c {
						if add {
							want[j*ldd+i] += src[i*lds+j]
						} else {
							want[j*ldd+i] = src[i*lds+j]
						}
					}
				}
				for _, k := range kernels {
					name := fmt.Sprintf("%s %d×%d pad %d add %v", k.name, r, c, pad, add)
					dst := append([]float32(nil), dst0...)
					k.f(dst, ldd, src, r, c, lds, add)
					for e := range dst {
						if math.Float32bits(dst[e]) != math.Float32bits(want[e]) {
							t.Fatalf("%s: dst[%d] (row %d, column %d) = %v, want %v", name, e, e/ldd, e%ldd, dst[e], want[e])
						}
					}
				}
			}
		}
	}
}

// BenchmarkTranspose: the backward pass's transposes at the SmolLM2-135M shape (256
// positions, widths 576 and 1,536), one thread, in the tiles' kernel and the loop; ns/elem
// is per element moved.
func BenchmarkTranspose(b *testing.B) {
	for _, sh := range [][2]int{{256, 576}, {256, 1536}, {576, 256}} {
		r, c := sh[0], sh[1]
		src, dst := make([]float32, r*c), make([]float32, r*c)
		for _, k := range []struct {
			name string
			f    func(dst []float32, ldd int, src []float32, r, c, lds int, add bool)
		}{{"block", transposeBlock}, {"tiles", llm.TransposeTiles}} {
			for _, add := range []bool{false, true} {
				b.Run(fmt.Sprintf("%dx%d/%s/add=%v", r, c, k.name, add), func(b *testing.B) {
					for b.Loop() {
						k.f(dst, r, src, r, c, c, add)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*r*c), "ns/elem")
				})
			}
		}
	}
}

// TestBackwardTransposeKernel: a backward pass through projections held transposed (Share's
// layout, a GoMLX store's [in, out]), whose input gradients go through transposes, gives the
// same bits with the installed kernel (llm.SetTranspose: the AVX-512 tiles where the CPU has
// them, split over the cores) as with the portable loop: the adapters' gradients and every
// weight's, over 40 positions (two whole 16-row tiles and an edge).
func TestBackwardTransposeKernel(t *testing.T) {
	m := hostKernelModel(t) // without the host kernels the loop is the only transpose
	cfg := m.Config()
	H, D, I := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	q, kv := cfg.NumAttentionHeads*D, cfg.NumKeyValueHeads*D
	shape := map[string][2]int{"q_proj": {q, H}, "k_proj": {kv, H}, "v_proj": {kv, H}, "o_proj": {H, q},
		"gate_proj": {I, H}, "up_proj": {I, H}, "down_proj": {H, I}}
	shared := 0
	for name, w := range m.Weights() {
		for mod, s := range shape {
			if strings.HasSuffix(name, "."+mod+".weight") {
				wt := make([]float32, len(w))
				llm.TransposeTiles(wt, s[0], w, s[0], s[1], s[1], false)
				if err := m.Share(name, wt, true, nil); err != nil {
					t.Fatal(err)
				}
				shared++
			}
		}
	}
	if shared != 7*cfg.NumHiddenLayers {
		t.Fatalf("%d projections held transposed, want %d", shared, 7*cfg.NumHiddenLayers)
	}
	a, err := m.AddLoRA(llm.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: llm.LoRAModules()}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Params() { // lora_B is zero at first: give every adapter a term
		for i := range p.Data {
			if p.Data[i] == 0 {
				p.Data[i] = float32(math.Sin(float64(i))) / 16
			}
		}
	}
	ma, err := m.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, 40)
	for i := range ids {
		ids[i] = int32((i*37 + 5) % cfg.VocabSize)
	}
	dh := make([]float32, len(ids)*H)
	for i := range dh {
		dh[i] = float32(math.Cos(float64(i) / 3))
	}
	grads := func() ([][]float32, map[string][]float32) {
		tr, err := ma.Trace(ids)
		if err != nil {
			t.Fatal(err)
		}
		ga := a.NewGradients()
		if err := tr.Backward(dh, ga); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for _, p := range ga.Params() {
			out = append(out, p.Data)
		}
		tr, _ = ma.Trace(ids)
		gw := m.NewWeightGrads(true)
		if err := tr.BackwardWeights(dh, gw); err != nil {
			t.Fatal(err)
		}
		return out, gw.Tensors()
	}
	kernelA, kernelW := grads()
	llm.SetTranspose(nil)
	defer llm.SetTranspose(hostTranspose)
	loopA, loopW := grads()
	for i := range loopA {
		if !slices.EqualFunc(kernelA[i], loopA[i], func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
			t.Fatalf("adapter gradient %d: the kernel's bits differ from the loop's", i)
		}
	}
	for name, g := range loopW {
		if !slices.EqualFunc(kernelW[name], g, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
			t.Fatalf("%s: the kernel's bits differ from the loop's", name)
		}
	}
}
