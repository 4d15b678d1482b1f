//go:build amd64 && goexperiment.simd

package learn

import (
	"simd/archsimd"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The AVX2 (+FMA) kernels, for CPUs without AVX-512 (most laptop Intel cores). They compute
// exactly what the AVX-512 kernels compute, to the bit: the same chain of fused multiply-adds
// per element of a product, and expSum's sum with the AVX-512 kernel's 16 lanes (two 8-lane
// halves) added in the same order, so a run gives the same numbers on both kinds of machine
// (TestAVX2MatchesAVX512).

// hasAVX2 selects these kernels where AVX-512 is missing.
var hasAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()

func load8(p *float32) archsimd.Float32x8 {
	return archsimd.LoadFloat32x8((*[8]float32)(unsafe.Pointer(p)))
}

func loadC8(p *float32, load bool) archsimd.Float32x8 {
	if load {
		return load8(p)
	}
	return archsimd.Float32x8{}
}

// gemmAVX2 is gemmK's body on AVX2: with the assembly kernel, gemmFMA; without it (tests
// compare the two), blocks of 4 rows × 16 columns (kernel4x16AVX2, 8 accumulators), then
// single rows, the columns past the last multiple of 16 going 8 at a time (kernel1x8AVX2).
func gemmAVX2(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, pb panels, c []float32, ldc int, load bool) {
	if useAsm {
		gemmFMA(m, n, kk, a, ai, ak, b, ldb, pb, c, ldc, load)
		return
	}
	i := 0
	for ; i+4 <= m; i += 4 {
		j := 0
		for ; j+16 <= n; j += 16 {
			kernel4x16AVX2(kk, a[i*ai:], ai, ak, b[j:], ldb, c[i*ldc+j:], ldc, load)
		}
		for r := range 4 {
			for jj := j; jj < n; jj += 8 {
				kernel1x8AVX2(kk, a[(i+r)*ai:], ak, b[jj:], ldb, c[(i+r)*ldc+jj:], min(8, n-jj), load)
			}
		}
	}
	for ; i < m; i++ {
		for j := 0; j < n; j += 8 {
			kernel1x8AVX2(kk, a[i*ai:], ak, b[j:], ldb, c[i*ldc+j:], min(8, n-j), load)
		}
	}
	clearUpper8x2() // once per product, for the scalar code after it
}

// gemmFMA is gemmAVX2 with the assembly kernel: every block of C, edges included, is a 6 × 16
// block of kernel6x16FMA (12 accumulators). An edge block (the rows past the last multiple of
// 6, the columns past the last multiple of 16) runs on copies padded with zeros (fmaEdges):
// its rows of A, its columns of B (copied once per product), its part of C through a 6 × 16
// scratch block, and only the real elements are copied back. Each real element is the same
// chain of multiply-adds over the same values as in a full block (the padding only feeds
// elements that are thrown away), so the bits do not depend on where a block falls. Before,
// the edges ran one row at a time in kernel1x8AVX2, one chain of multiply-adds per 8
// columns, bound by the FMA's latency: 4–5 GFLOP/s on a Zen 3 core against 40–80 for full
// blocks, and 5% of a warm-start step's CPU time (attention's products, whose width is the
// sequence's length, and the weight gradients of 128 or 512 rows, 2 past a multiple of 6).
//
// Where A is transposed (ai = 1: the weight gradients, whose B is long), the 16-column panels
// are the outer loop, so that a panel of B stays in the L1 cache while every row block passes
// over it (on the 6×120×256 benchmark shape that took kernel6x16FMA from 46 to 75 GFLOP/s on
// one Zen 3 core), and A's row blocks are packed once per product (packA6).
func gemmFMA(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, pb panels, c []float32, ldc int, load bool) {
	if pb.p != nil {
		panelReads.Add(1)
	}
	pf := 0
	if m < streamRows {
		pf = 32
	}
	m6, n16 := m-m%6, n&^15
	var e *fmaEdges
	var lo, hi, all archsimd.Mask32x8 // the real columns of the last 16, in two halves of 8
	if m6 < m || n16 < n {
		e = fmaEdgePool.Get().(*fmaEdges)
		defer fmaEdgePool.Put(e)
		w := n - n16
		if n16 == n {
			w = 16
		}
		lo = archsimd.LoadInt32x8Slice(firstLanes[8-min(w, 8) : 16-min(w, 8)]).ToMask()
		hi = archsimd.LoadInt32x8Slice(firstLanes[8-max(w-8, 0) : 16-max(w-8, 0)]).ToMask()
		all = archsimd.LoadInt32x8Slice(firstLanes[:8]).ToMask()
		if n16 < n { // B's last columns, zero-padded to 16: [k][16]
			_ = e.b[16*kk-1] // kk <= kBlock (gemmK splits longer contractions)
			pb, pe := unsafe.Pointer(at(b, n16)), unsafe.Pointer(&e.b[0])
			for range kk {
				archsimd.LoadMaskedFloat32x8((*[8]float32)(pb), lo).Store((*[8]float32)(pe))
				if w > 8 {
					archsimd.LoadMaskedFloat32x8((*[8]float32)(unsafe.Add(pb, 32)), hi).Store((*[8]float32)(unsafe.Add(pe, 32)))
				} else {
					archsimd.Float32x8{}.Store((*[8]float32)(unsafe.Add(pe, 32)))
				}
				pb, pe = unsafe.Add(pb, 4*ldb), unsafe.Add(pe, 64)
			}
		}
		// Clean upper halves before the scalar copies below.
		clearUpper8x2()
		if m6 < m { // A's last rows, zero-padded to 6: [i][k]
			for r := range 6 {
				row := e.a[r*kk : r*kk+kk]
				if m6+r >= m {
					clear(row)
					continue
				}
				for k := range row {
					row[k] = a[(m6+r)*ai+k*ak]
				}
			}
		}
	}
	// A transposed (the weight gradients): its row blocks packed as [k][6], so that a block's
	// step reads 24 consecutive bytes, not one scattered line per step (A(i, k) lies ak
	// floats past A(i, k−1)). Packed once, they serve every panel of B.
	var packed []float32
	if ai == 1 && ak >= 8 && m6 >= 12 && n16 >= 64 {
		p := fmaPackPool.Get().(*[]float32)
		defer fmaPackPool.Put(p)
		if len(*p) < m6*kk {
			*p = make([]float32, m6*kk)
		}
		packed = *p
		for i := 0; i < m6; i += 6 {
			packA6(kk, a[i:], ak, packed[i*kk:])
		}
	}
	// block runs the 6 × 16 block at row i, column j of C.
	block := func(i, j int) {
		ap, ai1, ak1 := at(a, i*ai), ai, ak
		switch {
		case i == m6:
			ap, ai1, ak1 = &e.a[0], kk, 1
		case packed != nil:
			ap, ai1, ak1 = &packed[i*kk], 1, 6
		}
		bp, ldb1 := at(b, j), ldb
		if pb.p != nil && j < n16 {
			bp, ldb1 = &pb.p[j/16*pb.stride], 16
		}
		if i < m6 && j < n16 {
			kernel6x16FMA(kk, ap, ai1, ak1, bp, ldb1, at(c, i*ldc+j), ldc, pf, load)
			return
		}
		m0, m1, wide := all, all, true
		if j == n16 {
			bp, ldb1, m0, m1, wide = &e.b[0], 16, lo, hi, n-n16 > 8
		}
		rows := min(6, m-i)
		if load {
			for r := range rows {
				pc := unsafe.Pointer(at(c, (i+r)*ldc+j))
				archsimd.LoadMaskedFloat32x8((*[8]float32)(pc), m0).Store((*[8]float32)(unsafe.Pointer(&e.c[r*16])))
				if wide {
					archsimd.LoadMaskedFloat32x8((*[8]float32)(unsafe.Add(pc, 32)), m1).Store((*[8]float32)(unsafe.Pointer(&e.c[r*16+8])))
				}
			}
		}
		kernel6x16FMA(kk, ap, ai1, ak1, bp, ldb1, &e.c[0], 16, pf, load)
		for r := range rows {
			pc := unsafe.Pointer(at(c, (i+r)*ldc+j))
			load8(&e.c[r*16]).StoreMasked((*[8]float32)(pc), m0)
			if wide {
				load8(&e.c[r*16+8]).StoreMasked((*[8]float32)(unsafe.Add(pc, 32)), m1)
			}
		}
		clearUpper8x2()
	}
	if ai == 1 {
		for j := 0; j < n; j += 16 {
			for i := 0; i < m; i += 6 {
				block(i, j)
			}
		}
	} else {
		for i := 0; i < m; i += 6 {
			for j := 0; j < n; j += 16 {
				block(i, j)
			}
		}
	}
}

// panels is B's full panels of w columns (its first n&^(w−1) columns) copied one after
// another as [k][w]: B[k, wq + j] at p[q·stride + wk + j]; w is the width of the kernel's
// blocks (panelWidth: 16 on the AVX2 path, 32 on the AVX-512 one). From gemmRowsK's
// products, where the row blocks of every piece of C read each panel (packPanels).
type panels struct {
	p      []float32 // nil: the kernels read B where it is
	stride int       // floats from a panel to the next
	w      int       // columns of a panel
}

// from is pb for the contraction's steps from k0 on.
func (pb panels) from(k0 int) panels {
	if pb.p == nil {
		return pb
	}
	return panels{pb.p[pb.w*k0:], pb.stride, pb.w}
}

// panelWidth is the width of the panels packPanels copies for the kernels that run here:
// kernel6x16FMA's 16 columns, kernel8x32AVX512's 32.
func panelWidth() int {
	if useAVX2 {
		return 16
	}
	return 32
}

// packPanels copies B's full 16-column panels for a product of gemmRowsK, where that makes
// the kernels faster: on the AVX2 assembly path, products of at least streamRows rows (the
// training steps'; a decoding step's few rows read their weights once, from memory, and a
// copy would only add a pass), at least four panels, and a copy of at most packMax floats.
// Read in place, B's rows are ldb floats apart, and a row length of 512 floats (2 KB) maps
// every row of a panel onto the same 2 of the 64 sets (of 64-byte lines) of a Zen 3 core's
// 32 KB 8-way L1 cache, 16 lines in all, so that a 6-row block's contraction over 128 rows of B
// misses L1 at every step; a packed panel is 8 KB of consecutive lines. The copy is one
// read and one write of B, which the product reads once per 6-row block of C. The workers
// copy the panels between them; buf goes back with releasePanels.
//
// On the AVX-512 path the panels are 32 columns wide, kernel8x32AVX512's blocks: read in place,
// a 32-column panel's 256 rows (two 64-byte lines each) at a row length of 512 floats fall in
// 4 of the 64 sets of a Zen 5 core's 48 KB 12-way L1 cache, 48 lines for 512; copied, they are
// 32 KB of consecutive lines. On one Zen 5 core the Tiny model's products went from 170–214
// to 207–232 GFLOP/s so, Qwen3-0.6B's projections from 122–127 to 162–198
// (docs/performance.md, "B's panels copied on the AVX-512 path, and bench-llm's PyTorch peer").
func packPanels(workers, m, n, kk int, b []float32, ldb int) (panels, *[]float32) {
	w := panelWidth()
	nw := n &^ (w - 1)
	if !panelCopies(m, n) || kk == 0 || nw*kk > packMax {
		return panels{}, nil
	}
	buf := fmaPanelPool.Get().(*[]float32)
	if cap(*buf) < nw*kk {
		*buf = make([]float32, nw*kk)
	}
	p := (*buf)[:nw*kk]
	_ = b[(kk-1)*ldb+nw-1]
	chunked(workers, nw/w, 1, 2, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			if w == 32 {
				packB32(kk, b[32*q:], ldb, p[q*32*kk:])
			} else {
				packB16(kk, b[16*q:], ldb, p[q*16*kk:])
			}
		}
	})
	return panels{p, w * kk, w}, buf
}

// panelCopies reports whether packPanels copies B for a product of m rows and n columns (of a
// size up to packMax): on the assembly kernels' paths, at least streamRows rows and 64 columns
// of full panels.
func panelCopies(m, n int) bool {
	return (useAVX2 || hasAVX512) && useAsm && packOn && m >= streamRows && n&^(panelWidth()-1) >= 64
}

// packBlocks returns the blocks in which gemmRowsK copies B where packPanels would copy it
// whole but for its size: kBlock rows by nc columns (a multiple of 16), packMax floats at
// most, or 0, 0 where B is copied whole or not at all. Read in place, the weights of a
// pretrained model have the same conflicts as the Tiny model's (see packPanels), worse: the
// rows of Qwen3-0.6B's gate projection (3,072 floats, 12 KB) all fall in one of the L1
// cache's sets, and in 16 of the 1,024 sets of a Zen 3 core's 512 KB L2, whose 8 ways hold
// 128 of a panel's kBlock (256) lines: not even L2 keeps a panel between row blocks. Copied
// in blocks, the product of a scoring pass's 128 rows by that weight (1,024 × 3,072) ran at
// 112–122 GFLOP/s on two Zen 3 cores, against 77–86 in place, and a training step's 1,024
// rows at 160–167 against 77–87 (docs/performance.md, "Pretrained weights copied in
// blocks").
func packBlocks(m, n, kk int) (kc, nc int) {
	if !panelCopies(m, n) || n&^(panelWidth()-1)*kk <= packMax {
		return 0, 0
	}
	return kBlock, min(n, packMax/kBlock) // packMax/kBlock: a multiple of either width
}

// releasePanels returns packPanels' buffer (nil: none) to its pool.
func releasePanels(buf *[]float32) {
	if buf != nil {
		fmaPanelPool.Put(buf)
	}
}

// packOn lets tests compare products with and without packPanels' copies; panelReads
// counts gemmFMA's calls that read a copy (tests check that a training step makes some).
var (
	packOn     = true
	panelReads atomic.Int64
)

// packMax bounds packPanels' copies (8 MB): the Tiny model's weight gradients over a batch of
// 4,096 tokens, not a pretrained model's LM head (49,152 × 576 floats), whose input gradient
// is a product of gemmRows as well.
const packMax = 1 << 21

// fmaPanelPool holds packPanels' buffers, each grown to the largest copy it has held. Not
// llm.Floats' size classes: the weight gradients' copies vary with the batch's tokens, so each
// class kept a buffer of its own, and BenchmarkWarmStartStep's process peaked at 277–329 MiB
// against 245–267 with this pool (AMD EPYC, Zen 3, five alternated runs each).
var fmaPanelPool = sync.Pool{New: func() any { return new([]float32) }}

// packB32 copies B's 32 columns from b (B[0, j]) over kk rows ldb floats apart into
// dst[:32·kk] as [k][32].
func packB32(kk int, b []float32, ldb int, dst []float32) {
	_ = b[(kk-1)*ldb+31]
	_ = dst[32*kk-1]
	pb, pd := unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(dst))
	for range kk {
		load16((*float32)(pb)).Store((*[16]float32)(pd))
		load16((*float32)(unsafe.Add(pb, 64))).Store((*[16]float32)(unsafe.Add(pd, 64)))
		pb, pd = unsafe.Add(pb, 4*ldb), unsafe.Add(pd, 128)
	}
	clearUpper16()
}

// packB16 copies B's 16 columns from b (B[0, j]) over kk rows ldb floats apart into
// dst[:16·kk] as [k][16].
func packB16(kk int, b []float32, ldb int, dst []float32) {
	_ = b[(kk-1)*ldb+15]
	_ = dst[16*kk-1]
	pb, pd := unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(dst))
	for range kk {
		load8((*float32)(pb)).Store((*[8]float32)(pd))
		load8((*float32)(unsafe.Add(pb, 32))).Store((*[8]float32)(unsafe.Add(pd, 32)))
		pb, pd = unsafe.Add(pb, 4*ldb), unsafe.Add(pd, 64)
	}
	clearUpper8x2()
}

// fmaEdges is gemmFMA's scratch for the edge blocks: A's last rows, B's last columns (each
// zero-padded, for contractions of up to kBlock), a 6 × 16 block of C. It comes from a pool,
// not the stack, where its 22 KB would be cleared at every product, the attention's small ones
// included.
type fmaEdges struct {
	a [6 * kBlock]float32
	b [16 * kBlock]float32
	c [6 * 16]float32
}

var fmaEdgePool = sync.Pool{New: func() any { return new(fmaEdges) }}

// fmaPackPool holds gemmFMA's packed row blocks of a transposed A.
var fmaPackPool = sync.Pool{New: func() any { return new([]float32) }}

// packA6 copies A(i..i+6, 0..kk) of a transposed A (a from A(i, 0), ak >= 8 floats between
// consecutive k) into dst[:6·kk] as [k][6], 8 floats at a time: each store's last 2 floats are
// overwritten by the next step's, and the last step copies its 6 floats alone, so neither the
// reads nor the writes leave the block.
func packA6(kk int, a []float32, ak int, dst []float32) {
	_ = a[(kk-1)*ak+5]
	_ = dst[6*kk-1]
	pa, pd := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(dst))
	for range kk - 1 {
		archsimd.LoadFloat32x8((*[8]float32)(pa)).Store((*[8]float32)(pd))
		pa, pd = unsafe.Add(pa, 4*ak), unsafe.Add(pd, 24)
	}
	clearUpper8x2()
	*(*[6]float32)(pd) = *(*[6]float32)(pa)
}

// useAsm selects the assembly kernels: kernel6x16FMA for gemmAVX2's 6-row blocks and
// kernel8x32AVX512 for gemmK's 8-row blocks; tests turn it off to compare them with the
// simd/archsimd kernels.
var useAsm = true

// streamRows: gemmAVX2's products of fewer rows (a decoding step's, whose B is a weight matrix
// read from memory once or a few times) have kernel6x16FMA prefetch B 32 rows ahead; larger
// ones (training's, whose B comes from the caches) do not. On a Zen 3 EPYC (AVX2 only) the
// prefetch made the Tiny warm-start step 1.10–1.18× slower (median, binaries alternated),
// and its absence made decoding steps of 12–24 rows at the SmolLM2-135M shape 1.2–1.3×
// slower (docs/performance.md, "The AVX2 kernel's prefetch, on an AVX2 machine").
const streamRows = 64

// kernel6x16FMA adds (load) or stores A(i..i+6, 0..kk)·B(0..kk, j..j+16) into C(i..i+6,
// j..j+16), with a, b and c pointing at A(i, 0), B[0, j] and C[i, j] and the steps of gemmK
// (ai, ak, ldb, ldc, in elements); the caller guarantees the 6 rows, 16 columns and kk steps
// are in bounds. With pf > 0 it prefetches B's row pf steps ahead at each step (the prefetch
// may reach past B's end: a prefetch never faults); with pf = 0 it does not. Every element is
// one chain of fused multiply-adds over k in increasing order, as in the kernels below, so the
// bits are theirs.
//
// It is written in assembly (gemm_fma_amd64.s) because the Go compiler's code for the same
// loop in simd/archsimd was slow: archsimd's MulAdd (x·y + z) compiles to VFMADD213PS, which
// overwrites a multiplicand, so every accumulator moves register at each step (14 register
// copies per 8 multiply-adds in kernel4x16AVX2), broadcasts are not folded into their loads,
// and a 6×16 block (12 accumulators) spills to the stack. The assembly keeps the 12
// accumulators in place (VFMADD231PS) and broadcasts straight from memory: on one Zen 3 core
// it ran the 1248×384×128 product at 80–85 GFLOP/s against kernel4x16AVX2's 44 (see
// docs/performance.md). The upstream change to propose is for the compiler to pick the 231
// form when the addend is the value that dies, and to fold VBROADCASTSS's load.
//
//go:noescape
func kernel6x16FMA(kk int, a *float32, ai, ak int, b *float32, ldb int, c *float32, ldc int, pf int, load bool)

func kernel4x16AVX2(kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	c00, c01 := loadC8(at(c, 0), load), loadC8(at(c, 8), load)
	c10, c11 := loadC8(at(c, ldc), load), loadC8(at(c, ldc+8), load)
	c20, c21 := loadC8(at(c, 2*ldc), load), loadC8(at(c, 2*ldc+8), load)
	c30, c31 := loadC8(at(c, 3*ldc), load), loadC8(at(c, 3*ldc+8), load)
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	sa, sb := uintptr(4*ak), uintptr(4*ldb)
	r1, r2, r3 := uintptr(4*ai), uintptr(8*ai), uintptr(12*ai)
	for range kk {
		b0 := archsimd.LoadFloat32x8((*[8]float32)(pb))
		b1 := archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(pb, 32)))
		a0 := archsimd.BroadcastFloat32x8(*(*float32)(pa))
		c00, c01 = b0.MulAdd(a0, c00), b1.MulAdd(a0, c01)
		a1 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(pa, r1)))
		c10, c11 = b0.MulAdd(a1, c10), b1.MulAdd(a1, c11)
		a2 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(pa, r2)))
		c20, c21 = b0.MulAdd(a2, c20), b1.MulAdd(a2, c21)
		a3 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(pa, r3)))
		c30, c31 = b0.MulAdd(a3, c30), b1.MulAdd(a3, c31)
		pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
	}
	st := func(v archsimd.Float32x8, p *float32) { v.Store((*[8]float32)(unsafe.Pointer(p))) }
	st(c00, at(c, 0))
	st(c01, at(c, 8))
	st(c10, at(c, ldc))
	st(c11, at(c, ldc+8))
	st(c20, at(c, 2*ldc))
	st(c21, at(c, 2*ldc+8))
	st(c30, at(c, 3*ldc))
	st(c31, at(c, 3*ldc+8))
}

// kernel1x8AVX2 computes one row of w <= 8 columns of C.
func kernel1x8AVX2(kk int, a []float32, ak int, b []float32, ldb int, c []float32, w int, load bool) {
	cs := c[:w:w]
	var acc archsimd.Float32x8
	if load {
		acc = archsimd.LoadFloat32x8SlicePart(cs)
	}
	if w == 8 {
		for k := range kk {
			acc = archsimd.LoadFloat32x8Slice(b[k*ldb:k*ldb+8]).MulAdd(archsimd.BroadcastFloat32x8(a[k*ak]), acc)
		}
		acc.StoreSlice(cs)
		return
	}
	// Fewer than 8 columns: one mask for every row of B (SlicePart built it at every step).
	_ = b[(kk-1)*ldb+w-1]
	_ = a[(kk-1)*ak]
	mask := archsimd.LoadInt32x8Slice(firstLanes[8-w : 16-w]).ToMask()
	pb := unsafe.Pointer(unsafe.SliceData(b))
	for k := range kk {
		row := (*[8]float32)(unsafe.Add(pb, 4*k*ldb))
		acc = archsimd.LoadMaskedFloat32x8(row, mask).MulAdd(archsimd.BroadcastFloat32x8(a[k*ak]), acc)
	}
	acc.StoreSlicePart(cs)
}

// firstLanes[8−w : 16−w] is a mask of the first w of 8 lanes (−1: on).
var firstLanes = [16]int32{-1, -1, -1, -1, -1, -1, -1, -1}

// expSumAVX2 is expSum on AVX2, lane for lane the AVX-512 computation: the 16-element blocks'
// exponentials summed in two 8-lane accumulators (lanes 0–7 and 8–15 of the AVX-512 one),
// their lanes added in order, then the elements past the last block one by one. exp8's body is
// written out in the loop: as a call (too large for the inliner) it cost every 8 lanes a call
// and the spilling of every live vector around it (Go's ABI saves no vector register). With
// the clear below, BenchmarkExpSum on one Zen 3 core went from 410 to 74 ns for a row of 22.
func expSumAVX2(x []float32, shift float32) float32 {
	var acc0, acc1 archsimd.Float32x8
	sh := archsimd.BroadcastFloat32x8(shift)
	n16 := len(x) &^ 15
	for j := 0; j < len(x); j += 8 {
		tail := j+8 > len(x)
		var v archsimd.Float32x8
		if tail {
			v = archsimd.LoadFloat32x8SlicePart(x[j:])
		} else {
			v = archsimd.LoadFloat32x8Slice(x[j : j+8])
		}
		// exp8(v − shift), written out.
		v = v.Sub(sh)
		live := v.GreaterEqual(archsimd.BroadcastFloat32x8(-87.3))
		v = v.Max(archsimd.BroadcastFloat32x8(-87.3)).Min(archsimd.BroadcastFloat32x8(88.72))
		n := v.Mul(archsimd.BroadcastFloat32x8(1.44269504088896341)).RoundToEven()
		r := n.MulAdd(archsimd.BroadcastFloat32x8(-0.693359375), v)
		r = n.MulAdd(archsimd.BroadcastFloat32x8(2.12194440e-4), r)
		p := archsimd.BroadcastFloat32x8(1.9875691500e-4)
		p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.3981999507e-3))
		p = p.MulAdd(r, archsimd.BroadcastFloat32x8(8.3334519073e-3))
		p = p.MulAdd(r, archsimd.BroadcastFloat32x8(4.1665795894e-2))
		p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.6666665459e-1))
		p = p.MulAdd(r, archsimd.BroadcastFloat32x8(5.0000001201e-1))
		p = p.MulAdd(r.Mul(r), r.Add(archsimd.BroadcastFloat32x8(1)))
		pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x8(127)).ShiftAllLeft(23).AsFloat32x8()
		e := p.Mul(pow).Masked(live)
		if tail {
			e.StoreSlicePart(x[j:])
			break
		}
		e.StoreSlice(x[j : j+8])
		if j < n16 && j&8 == 0 {
			acc0 = acc0.Add(e)
		} else if j < n16 {
			acc1 = acc1.Add(e)
		}
	}
	// The lanes in order, then the elements past the last 16-block, read back from memory
	// after VZEROUPPER (see clearUpper8x2; a vector still needed after it would be reloaded
	// into a register, dirtying the upper halves again).
	var lanes [16]float32
	acc0.Store((*[8]float32)(lanes[:8]))
	acc1.Store((*[8]float32)(lanes[8:]))
	clearUpper8x2()
	var sum float32
	for _, v := range lanes {
		sum += v
	}
	for _, v := range x[n16:] {
		sum += v
	}
	return sum
}

func reluAVX2(x []float32) {
	var zero archsimd.Float32x8
	j := 0
	for ; j+8 <= len(x); j += 8 {
		archsimd.LoadFloat32x8Slice(x[j : j+8]).Max(zero).StoreSlice(x[j : j+8])
	}
	clearUpper8x2()
	reluScalar(x[j:])
}

func reluGradAVX2(dx, u []float32) {
	var zero archsimd.Float32x8
	j := 0
	for ; j+8 <= len(dx) && j+8 <= len(u); j += 8 {
		live := archsimd.LoadFloat32x8Slice(u[j : j+8]).Greater(zero)
		archsimd.LoadFloat32x8Slice(dx[j : j+8]).Masked(live).StoreSlice(dx[j : j+8])
	}
	clearUpper8x2()
	reluGradScalar(dx[j:], u[j:])
}
