//go:build amd64 && goexperiment.simd

package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAVX2MatchesAVX512 runs the AVX2 kernels with the AVX2 element-wise loops (as on a CPU
// without AVX-512) and the AVX-512 kernels with the AVX-512 loops on the same inputs, and
// requires the same bits: products in every layout and tail, expSum, the ReLUs, and whole
// training steps (those also with the plain element-wise loops).
func TestAVX2MatchesAVX512(t *testing.T) {
	if !hasAVX512 || !hasAVX2 {
		t.Skip("needs a CPU with both AVX-512 and AVX2")
	}
	defer func() { useAVX2, vecLanes = false, 16 }()
	both := func(f func() []float32) (avx512, avx2 []float32) {
		useAVX2, vecLanes = false, 16
		avx512 = f()
		useAVX2, vecLanes = true, 8
		avx2 = f()
		useAVX2, vecLanes = false, 16
		return
	}
	same := func(what string, x, y []float32) {
		t.Helper()
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("%s: element %d: AVX-512 %v, AVX2 %v", what, i, x[i], y[i])
			}
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	fill := func(n int) []float32 { return randNormals(rng, n) }
	eachGemmCase(rng, [][3]int{{1, 1, 1}, {5, 37, 3}, {9, 33, 17}, {64, 211, 300}, {7, 8, 2}, {3, 23, 40}},
		func(name string, product func() []float32) {
			x, y := both(product)
			same(name, x, y)
		})
	for _, n := range []int{1, 7, 8, 15, 16, 17, 40, 203} {
		src := fill(n)
		x, y := both(func() []float32 {
			v := append([]float32(nil), src...)
			return append(v, expSum(v, 0.5))
		})
		same("expSum", x, y)
		x, y = both(func() []float32 {
			v := append([]float32(nil), src...)
			reluRows(v)
			g := fill(0)
			g = append(g, src...)
			reluGrad(g, v)
			return append(v, g...)
		})
		same("relu", x, y)
	}
	useAVX2, vecLanes = false, 16
	w512 := twoHostSteps(t, 2)
	for _, lanes := range []int{8, 0} {
		useAVX2, vecLanes = true, lanes
		w2 := twoHostSteps(t, 2)
		if d := maxDiff(w512, w2); d != 0 {
			t.Errorf("weights after two steps: AVX2 with %d-lane loops differs from AVX-512 by %g", lanes, d)
		}
	}
}

// TestVecMatchesScalar runs every element-wise loop of vec.go on each vector path this CPU
// has (AVX-512's 16 lanes, AVX2's pairs of 8) and on the plain one, on the same inputs of
// lengths around the 16-lane width, and requires the same bits.
func TestVecMatchesScalar(t *testing.T) {
	var widths []int
	if hasAVX512 {
		widths = append(widths, 16)
	}
	if hasAVX2 {
		widths = append(widths, 8)
	}
	if len(widths) == 0 {
		t.Skip("needs AVX2 or AVX-512")
	}
	saved := vecLanes
	defer func() { vecLanes = saved }()
	for _, lanes := range widths {
		vecLanes = lanes
		t.Run(fmt.Sprintf("lanes%d", lanes), vecMatchesScalar)
	}
}

func vecMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	fill := func(n int) []float32 {
		x := randNormals(rng, n)
		for i := range x {
			switch rng.IntN(24) {
			case 0:
				x[i] = 0
			case 1:
				x[i] = float32(math.Copysign(0, -1))
			case 2:
				x[i] *= 1e-30
			case 3:
				x[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
			case 4:
				x[i] = float32(math.NaN())
			}
		}
		return x
	}
	pos := func(n int) []float32 {
		x := fill(n)
		for i := range x {
			x[i] = x[i] * x[i]
		}
		return x
	}
	same := func(what string, n int, x, y []float32) {
		t.Helper()
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) && !(x[i] != x[i] && y[i] != y[i]) { // NaNs: any payload
				t.Fatalf("%s, length %d: element %d: vector %v, plain %v", what, n, i, x[i], y[i])
			}
		}
	}
	// run gives vec and plain the same copies of the inputs and compares every input after.
	run := func(what string, n int, ins [][]float32, vec, plain func(x [][]float32)) {
		t.Helper()
		a, b := make([][]float32, len(ins)), make([][]float32, len(ins))
		for i, x := range ins {
			a[i], b[i] = slices.Clone(x), slices.Clone(x)
		}
		vec(a)
		plain(b)
		for i := range a {
			same(fmt.Sprintf("%s, operand %d", what, i), n, a[i], b[i])
		}
	}
	for _, n := range []int{1, 7, 15, 16, 17, 31, 32, 33, 100, 128, 209} {
		s1, s2, s3 := fill(1)[0], fill(1)[0], fill(1)[0]
		for _, inv := range []bool{false, true} {
			run("rope", n, [][]float32{fill(2 * n), fill(n), fill(n)},
				func(x [][]float32) { ropeRotate(x[0], x[1], x[2], n, inv) },
				func(x [][]float32) { ropeScalar(x[0], x[1], x[2], 0, n, inv) })
		}
		run("lnApply", n, [][]float32{fill(n), fill(n), fill(n), fill(n), fill(n)},
			func(x [][]float32) { lnApply(x[0], x[1], x[2], x[3], x[4], s1, s2) },
			func(x [][]float32) { lnApplyScalar(x[0], x[1], x[2], x[3], x[4], s1, s2) })
		run("lnBackApply", n, [][]float32{fill(n), fill(n), fill(n)},
			func(x [][]float32) { lnBackApply(x[0], x[1], x[2], s1, s2, s3) },
			func(x [][]float32) { lnBackApplyScalar(x[0], x[1], x[2], s1, s2, s3) })
		run("mul", n, [][]float32{fill(n), fill(n), fill(n)},
			func(x [][]float32) { mulInto(x[0], x[1], x[2]) },
			func(x [][]float32) { mulScalar(x[0], x[1], x[2]) })
		run("gainAcc", n, [][]float32{fill(n), fill(n), fill(n), fill(n)},
			func(x [][]float32) { gainAcc(x[0], x[1], x[2], x[3]) },
			func(x [][]float32) { gainAccScalar(x[0], x[1], x[2], x[3]) })
		run("scale", n, [][]float32{fill(n)},
			func(x [][]float32) { scaleBy(x[0], s1) },
			func(x [][]float32) { scaleScalar(x[0], s1) })
		var mv, mp float32
		for _, in := range maxCases(rng, n) {
			run("max", n, [][]float32{in},
				func(x [][]float32) { mv = maxOf(x[0]) },
				func(x [][]float32) { mp = maxScalar(x[0]) })
			same(fmt.Sprintf("max of %v", in), n, []float32{mv}, []float32{mp})
		}
		ban := fill(n)
		for i := range ban {
			ban[i] = float32(math.Inf(-1)) * float32(rng.IntN(8)/7)
			if ban[i] != ban[i] {
				ban[i] = 0
			}
		}
		run("logits", n, [][]float32{fill(n), ban},
			func(x [][]float32) { mv = logits(x[0], x[1], s1) },
			func(x [][]float32) { mp = logitsScalar(x[0], x[1], s1) })
		same("logits' max", n, []float32{mv}, []float32{mp})
		run("normalize", n, [][]float32{fill(n), fill(n)},
			func(x [][]float32) { normalize(x[0], x[1], s1, s2) },
			func(x [][]float32) { normalizeScalar(x[0], x[1], s1, s2) })
		run("outputGrad", n, [][]float32{fill(n), fill(n), fill(n)},
			func(x [][]float32) { outputGrad(x[0], x[1], x[2], s1, s2, s3, 0.7) },
			func(x [][]float32) { outputGradScalar(x[0], x[1], x[2], s1, s2, s3, 0.7) })
		for _, wd := range []float32{0, 1e-4} {
			run("adamW", n, [][]float32{fill(n), fill(n), pos(n), fill(n)},
				func(x [][]float32) { adamWUpdate(x[0], x[1], x[2], x[3], 0.3, 0.9, 0.999, 1e-3, 1e-8, wd) },
				func(x [][]float32) { adamWScalar(x[0], x[1], x[2], x[3], 0.3, 0.9, 0.999, 1e-3, 1e-8, wd) })
		}
	}
}

// maxCases are inputs whose maximum the vector loop could get wrong: random values with
// infinities and NaNs, only zeros of both signs (+0 must win wherever it is), negative values
// and a single NaN in each block.
func maxCases(rng *rand.Rand, n int) [][]float32 {
	var cases [][]float32
	x := randNormals(rng, n)
	for i := range x {
		switch rng.IntN(8) {
		case 0:
			x[i] = float32(math.Inf(-1))
		case 1:
			x[i] = float32(math.Inf(1))
		}
	}
	cases = append(cases, x)
	for _, plus := range []int{0, n / 2, n - 1} {
		z := make([]float32, n)
		for i := range z {
			z[i] = float32(math.Copysign(0, -1))
		}
		z[plus] = 0
		cases = append(cases, z)
	}
	neg := randNormals(rng, n)
	for i := range neg {
		neg[i] = -float32(math.Abs(float64(neg[i]))) - 1
	}
	cases = append(cases, neg)
	for at := 0; at < n; at += 16 {
		v := slices.Clone(neg)
		v[at] = float32(math.NaN())
		cases = append(cases, v)
	}
	return cases
}

// TestAsmKernelMatchesAVX2 runs the AVX2 products with kernel6x16FMA (assembly) and without it
// (the simd/archsimd kernels alone) on the same inputs and requires the same bits: every row
// and column tail around the 6×16 and 4×16 blocks, both layouts of A, adding and storing,
// contractions past kBlock, products with and without the kernel's prefetch (streamRows), and
// two whole training steps. On machines with AVX-512 too,
// TestAVX2MatchesAVX512 ties both to the AVX-512 kernels.
func TestAsmKernelMatchesAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("needs a CPU with AVX2 and FMA")
	}
	setAVX2(t, true)
	asmMatchesKernels(t, rand.New(rand.NewPCG(6, 16)), [][3]int{{6, 16, 1}, {6, 16, 5}, {7, 17, 9}, {12, 32, 33}, {13, 40, 2}, {5, 16, 4}, {10, 31, 7}, {18, 48, 300}, {25, 23, 17}, {1, 16, 3}, {8, 16, 3}, {14, 33, 260}, {20, 64, 9}, {streamRows, 33, 9}, {streamRows + 5, 16, 40},
		{25, 70, 40}, {12, 64, 1}, {30, 80, 300}, {streamRows + 13, 96, 7}}) // the last four: transposed A packed (12+ rows, 64+ columns)
}

// TestCausalBlockKeepsBitsAVX2 is TestCausalBlockKeepsBits on the AVX2 path (whose block is
// 18) where the CPU has AVX-512 too.
func TestCausalBlockKeepsBitsAVX2(t *testing.T) {
	if !hasAVX2 || !hasAVX512 {
		t.Skip("needs a CPU with AVX-512 and AVX2 (without AVX-512, TestCausalBlockKeepsBits runs the AVX2 path)")
	}
	setAVX2(t, true)
	causalBlockKeepsBits(t)
}

// TestAsmKernelMatchesAVX512 does the same for the AVX-512 products with kernel8x32AVX512:
// the tails around the 8×32, 4×32 and 4×16 blocks (rows past a multiple of 8, columns past a
// multiple of 32, both at once).
func TestAsmKernelMatchesAVX512(t *testing.T) {
	if !hasAVX512 {
		t.Skip("needs a CPU with AVX-512")
	}
	setAVX2(t, false)
	asmMatchesKernels(t, rand.New(rand.NewPCG(6, 17)), [][3]int{{8, 32, 1}, {8, 32, 5}, {9, 33, 9}, {16, 64, 33}, {13, 40, 2}, {5, 16, 4}, {10, 31, 7}, {24, 96, 300}, {25, 23, 17}, {1, 32, 3}, {12, 48, 3}, {17, 65, 260}, {40, 64, 9}, {8, 16, 4}})
}

// asmMatchesKernels runs the products of shapes (eachGemmCase) and two whole training steps
// with the assembly kernel of the current path (useAsm) and without it, and requires the same
// bits.
func asmMatchesKernels(t *testing.T, rng *rand.Rand, shapes [][3]int) {
	t.Helper()
	defer func() { useAsm = true }()
	eachGemmCase(rng, shapes, func(name string, product func() []float32) {
		useAsm = true
		with := product()
		useAsm = false
		without := product()
		useAsm = true
		for i := range with {
			if math.Float32bits(with[i]) != math.Float32bits(without[i]) {
				t.Fatalf("%s: element %d: with the assembly kernel %v, without %v", name, i, with[i], without[i])
			}
		}
	})
	useAsm = true
	withAsm := twoHostSteps(t, 2)
	useAsm = false
	without := twoHostSteps(t, 2)
	useAsm = true
	if d := maxDiff(withAsm, without); d != 0 {
		t.Errorf("weights after two steps: the assembly kernel changes them by %g", d)
	}
}

// eachGemmCase calls f on every shape {m, n, kk} of shapes, with A in both layouts (row-major
// and transposed) and C both added to and stored: name says which, and product runs gemmK on
// a fresh copy of C's starting values and returns the result. The operands are drawn from rng.
func eachGemmCase(rng *rand.Rand, shapes [][3]int, f func(name string, product func() []float32)) {
	for _, sh := range shapes {
		m, n, kk := sh[0], sh[1], sh[2]
		a, b, c := randNormals(rng, m*kk), randNormals(rng, kk*n), randNormals(rng, m*n)
		for _, load := range []bool{true, false} {
			for _, trans := range []bool{false, true} {
				ai, ak := kk, 1
				if trans {
					ai, ak = 1, m
				}
				f(fmt.Sprintf("gemm %dx%dx%d load %v transposed %v", m, n, kk, load, trans), func() []float32 {
					out := slices.Clone(c)
					gemmK(m, n, kk, a, ai, ak, b, n, out, n, load)
					return out
				})
			}
		}
	}
}

// TestNarrowColumnsMatchPanels checks the AVX2 path's narrow columns (kernel1x8AVX2: widths
// 1–8, its mask built once per call) bit for bit against the same columns computed in a
// 16-wide block by the assembly kernel (B padded with zeros), A in both layouts, C added to
// and stored, contractions past kBlock.
func TestNarrowColumnsMatchPanels(t *testing.T) {
	if !hasAVX2 {
		t.Skip("needs a CPU with AVX2 and FMA")
	}
	setAVX2(t, true)
	narrowMatchPadded(t, rand.New(rand.NewPCG(6, 18)), 6, []int{0}, 8, 16)
}

// TestNarrowColumnsMatchPanelsAVX512 checks the AVX-512 path's narrow columns (kernel4xw and
// kernel1x16's masked rows: widths 1–15, alone and past a 32-wide block) the same way, on
// nine rows (two 4-row blocks and a single row), with and without the assembly kernel; and
// widths 1–31 against their padding to a whole 32-wide block, which agrl/llm's backward pass
// relies on (paddedWidth).
func TestNarrowColumnsMatchPanelsAVX512(t *testing.T) {
	if !hasAVX512 {
		t.Skip("needs a CPU with AVX-512")
	}
	saved := useAVX2
	defer func() { useAVX2, useAsm = saved, true }()
	useAVX2 = false
	rng := rand.New(rand.NewPCG(6, 19))
	for _, asm := range []bool{true, false} {
		useAsm = asm
		narrowMatchPadded(t, rng, 9, []int{0, 32}, 15, 16)
		narrowMatchPadded(t, rng, 9, []int{0, 32}, 31, 32) // llm's paddedWidth: zero columns up to a 32-wide block
	}
}

// narrowMatchPadded runs gemmK on m rows and wide+w columns, for every w in 1…maxW and wide
// in wides, against the same product with its last block padded with zeros to block columns,
// and requires the same bits: A in both layouts, C added to and stored, contractions of 1, 7
// and 300 (past kBlock).
func narrowMatchPadded(t *testing.T, rng *rand.Rand, m int, wides []int, maxW, block int) {
	t.Helper()
	for _, kk := range []int{1, 7, 300} {
		for _, wide := range wides {
			for w := 1; w <= maxW; w++ {
				n, np := wide+w, wide+block
				a, b, c := randNormals(rng, m*kk), randNormals(rng, kk*n), randNormals(rng, m*n)
				bp, cp := make([]float32, kk*np), make([]float32, m*np)
				for k := range kk {
					copy(bp[k*np:], b[k*n:(k+1)*n])
				}
				for _, load := range []bool{true, false} {
					for _, trans := range []bool{false, true} {
						ai, ak := kk, 1
						if trans {
							ai, ak = 1, m
						}
						got := slices.Clone(c)
						clear(cp)
						for i := range m {
							copy(cp[i*np:], c[i*n:(i+1)*n])
						}
						gemmK(m, n, kk, a, ai, ak, b, n, got, n, load)
						gemmK(m, np, kk, a, ai, ak, bp, np, cp, np, load)
						for i := range m {
							for j := range n {
								if g, want := got[i*n+j], cp[i*np+j]; math.Float32bits(g) != math.Float32bits(want) {
									t.Fatalf("useAsm %v kk %d width %d load %v transposed %v: C[%d,%d] = %v, the padded product's %v", useAsm, kk, n, load, trans, i, j, g, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// setAVX2 sets useAVX2 (the AVX2 path on a CPU that has AVX-512 too, or not) until the test
// ends.
func setAVX2(t *testing.T, on bool) {
	saved := useAVX2
	t.Cleanup(func() { useAVX2 = saved })
	useAVX2 = on
}

// TestTransposeBlockAVX2: TestTransposeBlock's checks on the AVX2 kernel's 8×8 tiles, which
// transposeBlock takes on a CPU without AVX-512 (and here on one with it as well).
func TestTransposeBlockAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	setAVX2(t, true)
	TestTransposeBlock(t)
}

// TestPackedPanelsKeepBits runs gemmRowsK's products on the AVX2 path with B's 16-column
// panels copied first (packPanels) and read in place, and requires the same bits: row counts
// around the 6-row block and streamRows, columns past the last panel, contractions past
// kBlock, both layouts of A, a strided B and C, adding and storing, one worker and two. It
// also requires that the shapes meant to be packed were (a packPanels that never copied
// would pass the comparison alone), that B too large to copy whole went in blocks read from
// copies (packBlocks), and two whole training steps with and without the copies,
// the first of which must read some (panelReads: a gemmRowsK that stopped handing its copy to
// the kernels would pass the rest).
//
// It runs on both assembly paths the CPU has: the AVX2 one (16-column panels for
// kernel6x16FMA) and the AVX-512 one (32-column panels for kernel8x32AVX512).
func TestPackedPanelsKeepBits(t *testing.T) {
	if !hasAVX2 {
		t.Skip("needs a CPU with AVX2 and FMA")
	}
	for _, avx2 := range []bool{true, false} {
		if !avx2 && !hasAVX512 {
			continue
		}
		t.Run(map[bool]string{true: "avx2", false: "avx512"}[avx2], func(t *testing.T) {
			setAVX2(t, avx2)
			if w := panelWidth(); w != map[bool]int{true: 16, false: 32}[avx2] {
				t.Fatalf("panel width %d", w)
			}
			packedPanelsKeepBits(t)
		})
	}
}

func packedPanelsKeepBits(t *testing.T) {
	defer func() { packOn = true }()
	w := panelWidth()
	rng := rand.New(rand.NewPCG(16, 64))
	for _, sh := range [][3]int{{streamRows, 64, 1}, {streamRows, 64, 9}, {70, 79, 40}, {131, 512, 128}, {97, 209, 300},
		{160, 128, 600}, {streamRows - 1, 128, 16}, {200, 48, 16}, {streamRows, 64, packMax/64 + 1}, {streamRows, 64, 0},
		// too large to copy whole (packBlocks): kBlock rows at a time, the last block short;
		// and two column blocks, the second too narrow for a copy
		{streamRows + 9, 1030, packMax/1024 + 300}, {streamRows, packMax/kBlock + 40, 300}} {
		m, n, kk := sh[0], sh[1], sh[2]
		ldb, ldc := n+3, n+5
		a, b, c := randNormals(rng, max(m*kk, m)), randNormals(rng, kk*ldb), randNormals(rng, m*ldc) // kk = 0: A transposed still has its m rows
		packOn = true
		pb, buf := packPanels(2, m, n, kk, b, ldb)
		releasePanels(buf)
		if want := m >= streamRows && n&^(w-1) >= 64 && kk > 0 && n&^(w-1)*kk <= packMax; (pb.p != nil) != want {
			t.Fatalf("%v: packPanels copied B: %v, want %v", sh, pb.p != nil, want)
		}
		blocks := m >= streamRows && n&^(w-1) >= 64 && n&^(w-1)*kk > packMax
		if kc, _ := packBlocks(m, n, kk); (kc > 0) != blocks {
			t.Fatalf("%v: packBlocks %d, want blocks: %v", sh, kc, blocks)
		}
		for _, trans := range []bool{false, true} {
			ai, ak := kk, 1
			if trans {
				ai, ak = 1, m
			}
			for _, load := range []bool{true, false} {
				for _, workers := range []int{1, 2} {
					var got [2][]float32
					for i, on := range []bool{true, false} {
						packOn = on
						got[i] = slices.Clone(c)
						reads := panelReads.Load()
						gemmRowsK(workers, m, n, kk, a, ai, ak, b, ldb, got[i], ldc, load)
						if on && (blocks || pb.p != nil) && panelReads.Load() == reads {
							t.Fatalf("%v: no panel of B was read from a copy", sh)
						}
					}
					packOn = true
					for i := range got[0] {
						if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
							t.Fatalf("%v transposed %v load %v workers %d: element %d: packed %v, in place %v",
								sh, trans, load, workers, i, got[0][i], got[1][i])
						}
					}
				}
			}
		}
	}
	packOn = true
	reads := panelReads.Load()
	with := twoHostSteps(t, 2)
	if panelReads.Load() == reads {
		t.Fatal("two training steps read no copy of B's panels")
	}
	packOn = false
	without := twoHostSteps(t, 2)
	packOn = true
	if d := maxDiff(with, without); d != 0 {
		t.Errorf("weights after two steps: packing B's panels changes them by %g", d)
	}
}
