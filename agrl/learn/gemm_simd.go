//go:build amd64 && goexperiment.simd

package learn

import (
	"simd/archsimd"
	"unsafe"
)

// kBlock is the longest contraction one pass of the kernels takes (see gemm).
const kBlock = 256

// hasAVX512 selects the AVX-512 kernel (GOEXPERIMENT=simd builds on CPUs that have it).
var hasAVX512 = archsimd.X86.AVX512()

// useAVX2 selects the AVX2 kernels (gemm_avx2.go) where AVX-512 is missing; tests set it to
// compare the two.
var useAVX2 = !hasAVX512 && hasAVX2

// hostKernels reports whether the host trainer's vector kernels run here (see onHost).
var hostKernels = hasAVX512 || hasAVX2

// gemmRowBlock is the row block of the kernels gemmK runs here: the pieces gemmRows splits C
// into are multiples of it.
func gemmRowBlock() int {
	switch {
	case !useAsm:
		return 4
	case useAVX2:
		return 6
	}
	return 8
}

// gemmK adds op(A)·B into C, or stores it with load false (see gemm.go).
func gemmK(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	gemmKP(m, n, kk, a, ai, ak, b, ldb, panels{}, c, ldc, load)
}

// gemmKP is gemmK reading B's full 16-column panels from pb where it holds them (packPanels).
func gemmKP(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, pb panels, c []float32, ldc int, load bool) {
	if !(hasAVX512 || useAVX2) || m == 0 || n == 0 || kk == 0 {
		gemmScalar(m, n, kk, a, ai, ak, b, ldb, c, ldc, load)
		return
	}
	// Bounds: every index below is checked once here, so the kernels read through pointers.
	last := (m-1)*ai + (kk-1)*ak
	if last >= len(a) || (kk-1)*ldb+n > len(b) || (m-1)*ldc+n > len(c) {
		panic("gemm: operand too short")
	}
	// Long contractions go in blocks of kBlock, so that the rows of B a block reads stay in
	// the L2 cache while every row block of C passes over them (the weight gradients contract
	// over all the batch's tokens). Each element's chain of multiply-adds keeps its order.
	if kk > kBlock {
		for k0 := 0; k0 < kk; k0 += kBlock {
			gemmKP(m, n, min(kBlock, kk-k0), a[k0*ak:], ai, ak, b[k0*ldb:], ldb, pb.from(k0), c, ldc, load || k0 > 0)
		}
		return
	}
	if useAVX2 {
		gemmAVX2(m, n, kk, a, ai, ak, b, ldb, pb, c, ldc, load)
		return
	}
	// Blocks of 8 rows × 32 columns (kernel8x32AVX512, 16 accumulators), the 8-row blocks'
	// columns past the last multiple of 32 as 4×16 blocks, then the rows left in 4-row blocks
	// and single rows.
	i := 0
	if useAsm {
		m8, n32 := m&^7, n&^31
		if pb.p != nil { // B's 32-column panels, copied (packPanels)
			panelReads.Add(1)
		}
		for i := 0; i < m8; i += 8 {
			for j := 0; j < n32; j += 32 {
				bp, ldb1 := at(b, j), ldb
				if pb.p != nil {
					bp, ldb1 = &pb.p[j/32*pb.stride], 32
				}
				kernel8x32AVX512(kk, at(a, i*ai), ai, ak, bp, ldb1, at(c, i*ldc+j), ldc, load)
			}
		}
		if n32 < n {
			for i := 0; i < m8; i += 4 {
				for j := n32; j < n; j += 16 {
					kernel4x16(kk, a[i*ai:], ai, ak, b[j:], ldb, c[i*ldc+j:], ldc, min(16, n-j), load)
				}
			}
		}
		i = m8
	}
	for ; i+4 <= m; i += 4 {
		j := 0
		for ; j+32 <= n; j += 32 {
			kernel4x32(kk, a[i*ai:], ai, ak, b[j:], ldb, c[i*ldc+j:], ldc, load)
		}
		for ; j < n; j += 16 {
			kernel4x16(kk, a[i*ai:], ai, ak, b[j:], ldb, c[i*ldc+j:], ldc, min(16, n-j), load)
		}
	}
	for ; i < m; i++ {
		j := 0
		for ; j+64 <= n; j += 64 {
			kernel1x64(kk, a[i*ai:], ak, b[j:], ldb, c[i*ldc+j:], load)
		}
		for ; j < n; j += 16 {
			kernel1x16(kk, a[i*ai:], ak, b[j:], ldb, c[i*ldc+j:], min(16, n-j), load)
		}
	}
	clearUpper16() // once per product, for the scalar code after it (kernel8x32AVX512 clears its own)
}

// kernel8x32AVX512 adds (load) or stores A(i..i+8, 0..kk)·B(0..kk, j..j+32) into C(i..i+8,
// j..j+32), with a, b and c pointing at A(i, 0), B[0, j] and C[i, j] and the steps of gemmK
// (ai, ak, ldb, ldc, in elements); the caller guarantees the 8 rows, 32 columns and kk steps
// are in bounds. Every element is one chain of fused multiply-adds over k in increasing order,
// as in kernel4x32, so the bits are the same.
//
// It is written in assembly (gemm_avx512_amd64.s) for the reason kernel6x16FMA is
// (gemm_avx2.go): the compiler's code for kernel4x32 overwrites a multiplicand at every
// multiply-add (VFMADD213PS) and spends 13 register copies and stack traffic per 8 of them.
// The assembly keeps 16 accumulators in place (VFMADD231PS) and broadcasts from memory, and
// prefetches B 32 rows ahead (BenchmarkGemmStream: a decoding step's weights, read once from
// memory at a stride of ldb, come 1.5–1.9× faster so on Zen 5).
//
//go:noescape
func kernel8x32AVX512(kk int, a *float32, ai, ak int, b *float32, ldb int, c *float32, ldc int, load bool)

// loadC is C's row block at p, or zeros when the product is stored rather than added.
func loadC(p *float32, load bool) archsimd.Float32x16 {
	if load {
		return load16(p)
	}
	return archsimd.Float32x16{}
}

func at(s []float32, i int) *float32 {
	return (*float32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), 4*i))
}

func load16(p *float32) archsimd.Float32x16 {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Pointer(p)))
}

func store16(v archsimd.Float32x16, p *float32) { v.Store((*[16]float32)(unsafe.Pointer(p))) }

func bcast(p *float32) archsimd.Float32x16 { return archsimd.BroadcastFloat32x16(*p) }

// kernel4x32 computes a 4×32 block of C: 8 accumulators, two loads of B and four broadcasts
// of A per k.
func kernel4x32(kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	c00, c01 := loadC(at(c, 0), load), loadC(at(c, 16), load)
	c10, c11 := loadC(at(c, ldc), load), loadC(at(c, ldc+16), load)
	c20, c21 := loadC(at(c, 2*ldc), load), loadC(at(c, 2*ldc+16), load)
	c30, c31 := loadC(at(c, 3*ldc), load), loadC(at(c, 3*ldc+16), load)
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	sa, sb := uintptr(4*ak), uintptr(4*ldb)
	r1, r2, r3 := uintptr(4*ai), uintptr(8*ai), uintptr(12*ai)
	for range kk {
		b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
		b1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 64)))
		a0 := archsimd.BroadcastFloat32x16(*(*float32)(pa))
		c00, c01 = b0.MulAdd(a0, c00), b1.MulAdd(a0, c01)
		a1 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r1)))
		c10, c11 = b0.MulAdd(a1, c10), b1.MulAdd(a1, c11)
		a2 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r2)))
		c20, c21 = b0.MulAdd(a2, c20), b1.MulAdd(a2, c21)
		a3 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r3)))
		c30, c31 = b0.MulAdd(a3, c30), b1.MulAdd(a3, c31)
		pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
	}
	store16(c00, at(c, 0))
	store16(c01, at(c, 16))
	store16(c10, at(c, ldc))
	store16(c11, at(c, ldc+16))
	store16(c20, at(c, 2*ldc))
	store16(c21, at(c, 2*ldc+16))
	store16(c30, at(c, 3*ldc))
	store16(c31, at(c, 3*ldc+16))
}

// kernel4x16 computes a 4×w block of C, w <= 16 columns (masked loads and stores past w).
func kernel4x16(kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, w int, load bool) {
	if w == 16 {
		c0, c1, c2, c3 := loadC(at(c, 0), load), loadC(at(c, ldc), load), loadC(at(c, 2*ldc), load), loadC(at(c, 3*ldc), load)
		pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
		sa, sb := uintptr(4*ak), uintptr(4*ldb)
		r1, r2, r3 := uintptr(4*ai), uintptr(8*ai), uintptr(12*ai)
		for range kk {
			b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
			c0 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(pa)), c0)
			c1 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r1))), c1)
			c2 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r2))), c2)
			c3 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r3))), c3)
			pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
		}
		store16(c0, at(c, 0))
		store16(c1, at(c, ldc))
		store16(c2, at(c, 2*ldc))
		store16(c3, at(c, 3*ldc))
		return
	}
	kernel4xw(kk, a, ai, ak, b, ldb, c, ldc, w, load)
}

// kernel4xw is kernel4x16 for w < 16 columns: B's rows and C's are read and written under a
// mask of their w lanes, made once (a masked load reads nothing past them, and faults on
// nothing), where a row at a time with slice-bounded loads rebuilt the mask at every k and
// read B once per row: the columns past a product's last multiple of 32 (a sequence of 255
// positions' last 15) took 6% of a LoRA step's samples so. Each element is the same chain of
// multiply-adds as in the full kernels, so the bits are the same
// (TestNarrowColumnsMatchPanelsAVX512).
func kernel4xw(kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, w int, load bool) {
	_, _ = c[3*ldc+w-1], b[(kk-1)*ldb+w-1] // the bounds the masked accesses stay within
	mask := archsimd.Mask32x16FromBits(uint16(1)<<w - 1)
	ld := func(p *float32) archsimd.Float32x16 {
		if !load {
			return archsimd.Float32x16{}
		}
		return archsimd.LoadMaskedFloat32x16((*[16]float32)(unsafe.Pointer(p)), mask)
	}
	c0, c1, c2, c3 := ld(at(c, 0)), ld(at(c, ldc)), ld(at(c, 2*ldc)), ld(at(c, 3*ldc))
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	sa, sb := uintptr(4*ak), uintptr(4*ldb)
	r1, r2, r3 := uintptr(4*ai), uintptr(8*ai), uintptr(12*ai)
	for range kk {
		b0 := archsimd.LoadMaskedFloat32x16((*[16]float32)(pb), mask)
		c0 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(pa)), c0)
		c1 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r1))), c1)
		c2 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r2))), c2)
		c3 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, r3))), c3)
		pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
	}
	c0.StoreMasked((*[16]float32)(unsafe.Pointer(at(c, 0))), mask)
	c1.StoreMasked((*[16]float32)(unsafe.Pointer(at(c, ldc))), mask)
	c2.StoreMasked((*[16]float32)(unsafe.Pointer(at(c, 2*ldc))), mask)
	c3.StoreMasked((*[16]float32)(unsafe.Pointer(at(c, 3*ldc))), mask)
}

// kernel1x64 computes one row of 64 columns of C: four accumulators, so that four chains of
// multiply-adds are in flight where kernel1x16 waits on one (a decoding step's single rows:
// its attention scores over the cached keys, their weighted sum of the values, and batch-1
// projections).
func kernel1x64(kk int, a []float32, ak int, b []float32, ldb int, c []float32, load bool) {
	c0, c1, c2, c3 := loadC(at(c, 0), load), loadC(at(c, 16), load), loadC(at(c, 32), load), loadC(at(c, 48), load)
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	sa, sb := uintptr(4*ak), uintptr(4*ldb)
	for range kk {
		x := archsimd.BroadcastFloat32x16(*(*float32)(pa))
		c0 = archsimd.LoadFloat32x16((*[16]float32)(pb)).MulAdd(x, c0)
		c1 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 64))).MulAdd(x, c1)
		c2 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 128))).MulAdd(x, c2)
		c3 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 192))).MulAdd(x, c3)
		pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
	}
	store16(c0, at(c, 0))
	store16(c1, at(c, 16))
	store16(c2, at(c, 32))
	store16(c3, at(c, 48))
}

// kernel1x16 computes one row of w <= 16 columns of C.
func kernel1x16(kk int, a []float32, ak int, b []float32, ldb int, c []float32, w int, load bool) {
	if w < 16 { // as kernel4xw: one mask for every k
		_, _, _ = c[w-1], b[(kk-1)*ldb+w-1], a[(kk-1)*ak]
		mask := archsimd.Mask32x16FromBits(uint16(1)<<w - 1)
		var acc archsimd.Float32x16
		if load {
			acc = archsimd.LoadMaskedFloat32x16((*[16]float32)(unsafe.Pointer(at(c, 0))), mask)
		}
		pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
		sa, sb := uintptr(4*ak), uintptr(4*ldb)
		for range kk {
			acc = archsimd.LoadMaskedFloat32x16((*[16]float32)(pb), mask).MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(pa)), acc)
			pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
		}
		acc.StoreMasked((*[16]float32)(unsafe.Pointer(at(c, 0))), mask)
		return
	}
	acc := loadC(at(c, 0), load)
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	sa, sb := uintptr(4*ak), uintptr(4*ldb)
	for range kk {
		acc = archsimd.LoadFloat32x16((*[16]float32)(pb)).MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(pa)), acc)
		pa, pb = unsafe.Add(pa, sa), unsafe.Add(pb, sb)
	}
	store16(acc, at(c, 0))
}

// expSum replaces every x[j] by e^(x[j]−shift) and returns their sum (the softmaxes' inner
// loop): exp32's method, 16 lanes at a time.
func expSum(x []float32, shift float32) float32 {
	if useAVX2 {
		return expSumAVX2(x, shift)
	}
	if !hasAVX512 {
		return expSumScalar(x, shift)
	}
	var acc archsimd.Float32x16
	j := 0
	for ; j+16 <= len(x); j += 16 {
		e := exp16(archsimd.LoadFloat32x16Slice(x[j : j+16]).Sub(archsimd.BroadcastFloat32x16(shift)))
		e.StoreSlice(x[j : j+16])
		acc = acc.Add(e)
	}
	var lanes [16]float32
	acc.Store(&lanes)
	rest := x[j:]
	if len(rest) > 0 {
		e := exp16(archsimd.LoadFloat32x16SlicePart(rest).Sub(archsimd.BroadcastFloat32x16(shift)))
		e.StoreSlicePart(rest)
	}
	clearUpper16() // the sums below are scalar: the lanes in order, then the rest
	var sum float32
	for _, v := range lanes {
		sum += v
	}
	for _, v := range rest {
		sum += v
	}
	return sum
}

// exp16 is exp32 on 16 lanes (rounding x/ln2 to even rather than away from zero).
func exp16(x archsimd.Float32x16) archsimd.Float32x16 {
	live := x.GreaterEqual(archsimd.BroadcastFloat32x16(-87.3))
	x = x.Max(archsimd.BroadcastFloat32x16(-87.3)).Min(archsimd.BroadcastFloat32x16(88.72))
	n := x.Mul(archsimd.BroadcastFloat32x16(1.44269504088896341)).RoundToEvenScaled(0)
	r := n.MulAdd(archsimd.BroadcastFloat32x16(-0.693359375), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x16(2.12194440e-4), r)
	p := archsimd.BroadcastFloat32x16(1.9875691500e-4)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(1.3981999507e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(8.3334519073e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(4.1665795894e-2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(1.6666665459e-1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r.Add(archsimd.BroadcastFloat32x16(1)))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
	return p.Mul(pow).Masked(live)
}

// reluRows replaces x by max(x, 0); reluGrad zeroes dx where the ReLU output u is not positive.
func reluRows(x []float32) {
	if useAVX2 {
		reluAVX2(x)
		return
	}
	if !hasAVX512 {
		reluScalar(x)
		return
	}
	zero := archsimd.Float32x16{}
	j := 0
	for ; j+16 <= len(x); j += 16 {
		archsimd.LoadFloat32x16Slice(x[j : j+16]).Max(zero).StoreSlice(x[j : j+16])
	}
	clearUpper16()
	reluScalar(x[j:])
}

func reluGrad(dx, u []float32) {
	if useAVX2 {
		reluGradAVX2(dx, u)
		return
	}
	if !hasAVX512 {
		reluGradScalar(dx, u)
		return
	}
	zero := archsimd.Float32x16{}
	j := 0
	for ; j+16 <= len(dx) && j+16 <= len(u); j += 16 {
		live := archsimd.LoadFloat32x16Slice(u[j : j+16]).Greater(zero)
		archsimd.LoadFloat32x16Slice(dx[j : j+16]).Masked(live).StoreSlice(dx[j : j+16])
	}
	clearUpper16()
	reluGradScalar(dx[j:], u[j:])
}

// kernelSet names the vector kernels of this build on this CPU (see Kernels).
func kernelSet() string {
	switch {
	case useAVX2:
		return "avx2"
	case hasAVX512:
		return "avx512"
	}
	return "portable"
}
