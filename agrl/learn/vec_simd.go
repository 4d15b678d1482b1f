//go:build amd64 && goexperiment.simd

package learn

import "simd/archsimd"

// The element-wise loops of vec.go on vectors: each call takes the 16-lane loop of
// vec16_simd.go on one AVX-512 vector where AVX-512 is present, the same loop on a pair of
// AVX2 vectors (vec8x2_simd_gen.go, generated from it) where only AVX2 is, and the plain loop
// for lengths under 16 or without either. All three give the same bits (TestVecMatchesScalar).

// vecLanes selects the vector loops: 16 (AVX-512), 8 (pairs of AVX2 vectors) or 0 (the plain
// loops); tests set it to compare them in whole training steps.
var vecLanes = func() int {
	switch {
	case hasAVX512:
		return 16
	case hasAVX2:
		return 8
	}
	return 0
}()

// lanesFor is the vector loop n elements take: 16, 8 or 0 (the plain one).
func lanesFor(n int) int {
	if n < 16 {
		return 0
	}
	return vecLanes
}

func tail16(n int) int { return n &^ 15 }

// f16 is the AVX-512 loops' vector.
type f16 = archsimd.Float32x16

func ld16(x []float32) f16    { return archsimd.LoadFloat32x16Slice(x) }
func bc16(x float32) f16      { return archsimd.BroadcastFloat32x16(x) }
func st16(v f16, x []float32) { v.StoreSlice(x) }

// clearUpper8x2 ends the AVX2 loops' vector part with VZEROUPPER before their plain part. The
// Go compiler issues none, and on the Zen 3 kind (AMD EPYC, family 25 model 1) the first
// scalar floating-point (SSE) instruction run while the upper halves of the vector registers
// are dirty cost about 130–210 ns, once per transition: a plain loop of 8 multiply-adds took
// 140 ns after a 256-bit add and 10 ns after the add and VZEROUPPER (a micro-benchmark,
// docs/performance.md). The loops run per row, so a step paid it thousands of times.
//
// It is a call the compiler cannot inline, so that no computation moves across it: the
// intrinsic alone let the compiler sink pure vector operations after the VZEROUPPER (reloading
// a spilled vector into a register and dirtying the upper halves again). Callers leave no
// vector value live across it.
//
//go:noinline
func clearUpper8x2() { archsimd.ClearAVXUpperBits() }

// clearUpper16 is clearUpper8x2 for the AVX-512 loops (VZEROUPPER also clears bits 256–511
// of the registers the loops use). Intel documents a cost for SSE instructions run after
// 256/512-bit ones while the upper bits are dirty (a false dependency on them); on the Zen 5
// kind the transition costs about 5 ns (BenchmarkUpperHalves; docs/performance.md).
//
//go:noinline
func clearUpper16() { archsimd.ClearAVXUpperBits() }

// f8x2 is the AVX2 loops' vector: lanes 0–7 and 8–15 of an f16, with the methods the loops
// use, lane by lane the same operations.
type f8x2 struct{ lo, hi archsimd.Float32x8 }

// m8x2 is a comparison's result on an f8x2.
type m8x2 struct{ lo, hi archsimd.Mask32x8 }

func ld8x2(x []float32) f8x2 {
	return f8x2{archsimd.LoadFloat32x8Slice(x[:8]), archsimd.LoadFloat32x8Slice(x[8:16])}
}
func bc8x2(x float32) f8x2 {
	v := archsimd.BroadcastFloat32x8(x)
	return f8x2{v, v}
}
func st8x2(v f8x2, x []float32) { v.lo.StoreSlice(x[:8]); v.hi.StoreSlice(x[8:16]) }

func (v f8x2) Add(w f8x2) f8x2 { return f8x2{v.lo.Add(w.lo), v.hi.Add(w.hi)} }
func (v f8x2) Sub(w f8x2) f8x2 { return f8x2{v.lo.Sub(w.lo), v.hi.Sub(w.hi)} }
func (v f8x2) Mul(w f8x2) f8x2 { return f8x2{v.lo.Mul(w.lo), v.hi.Mul(w.hi)} }
func (v f8x2) Div(w f8x2) f8x2 { return f8x2{v.lo.Div(w.lo), v.hi.Div(w.hi)} }
func (v f8x2) Max(w f8x2) f8x2 { return f8x2{v.lo.Max(w.lo), v.hi.Max(w.hi)} }
func (v f8x2) Sqrt() f8x2      { return f8x2{v.lo.Sqrt(), v.hi.Sqrt()} }
func (v f8x2) IsNaN() m8x2     { return m8x2{v.lo.IsNaN(), v.hi.IsNaN()} }
func (v f8x2) Store(x *[16]float32) {
	v.lo.Store((*[8]float32)(x[:8]))
	v.hi.Store((*[8]float32)(x[8:]))
}

func (m m8x2) Or(o m8x2) m8x2 { return m8x2{m.lo.Or(o.lo), m.hi.Or(o.hi)} }
func (m m8x2) ToBits() uint16 { return uint16(m.lo.ToBits()) | uint16(m.hi.ToBits())<<8 }

func ropeRotate(v, cs, sn []float32, half int, inverse bool) {
	switch lanesFor(half) {
	case 16:
		ropeRotate16(v, cs, sn, half, inverse)
	case 8:
		ropeRotate8x2(v, cs, sn, half, inverse)
	default:
		ropeScalar(v, cs, sn, 0, half, inverse)
	}
}

func lnApply(x, xh, out, g, b []float32, mean, rstd float32) {
	switch lanesFor(len(x)) {
	case 16:
		lnApply16(x, xh, out, g, b, mean, rstd)
	case 8:
		lnApply8x2(x, xh, out, g, b, mean, rstd)
	default:
		lnApplyScalar(x, xh, out, g, b, mean, rstd)
	}
}

func lnBackApply(out, dxh, xh []float32, m1, m2, rstd float32) {
	switch lanesFor(len(out)) {
	case 16:
		lnBackApply16(out, dxh, xh, m1, m2, rstd)
	case 8:
		lnBackApply8x2(out, dxh, xh, m1, m2, rstd)
	default:
		lnBackApplyScalar(out, dxh, xh, m1, m2, rstd)
	}
}

func mulInto(dst, a, b []float32) {
	switch lanesFor(len(dst)) {
	case 16:
		mulInto16(dst, a, b)
	case 8:
		mulInto8x2(dst, a, b)
	default:
		mulScalar(dst, a, b)
	}
}

func gainAcc(g, b, dy, xh []float32) {
	switch lanesFor(len(g)) {
	case 16:
		gainAcc16(g, b, dy, xh)
	case 8:
		gainAcc8x2(g, b, dy, xh)
	default:
		gainAccScalar(g, b, dy, xh)
	}
}

func scaleBy(x []float32, s float32) {
	switch lanesFor(len(x)) {
	case 16:
		scaleBy16(x, s)
	case 8:
		scaleBy8x2(x, s)
	default:
		scaleScalar(x, s)
	}
}

func maxOf(x []float32) float32 {
	switch lanesFor(len(x)) {
	case 16:
		return maxOf16(x)
	case 8:
		return maxOf8x2(x)
	}
	return maxScalar(x)
}

func logits(z, ban []float32, invT float32) float32 {
	switch lanesFor(len(z)) {
	case 16:
		return logits16(z, ban, invT)
	case 8:
		return logits8x2(z, ban, invT)
	}
	return logitsScalar(z, ban, invT)
}

func normalize(z, p []float32, lse, inv float32) {
	switch lanesFor(len(z)) {
	case 16:
		normalize16(z, p, lse, inv)
	case 8:
		normalize8x2(z, p, lse, inv)
	default:
		normalizeScalar(z, p, lse, inv)
	}
}

func outputGrad(dz, lp, pr []float32, a, e, ent, invT float32) {
	switch lanesFor(len(lp)) {
	case 16:
		outputGrad16(dz, lp, pr, a, e, ent, invT)
	case 8:
		outputGrad8x2(dz, lp, pr, a, e, ent, invT)
	default:
		outputGradScalar(dz, lp, pr, a, e, ent, invT)
	}
}

func adamWUpdate(w, m, v, g []float32, scale, b1, b2, stepSize, epsHat, wd float32) {
	switch lanesFor(len(w)) {
	case 16:
		adamWUpdate16(w, m, v, g, scale, b1, b2, stepSize, epsHat, wd)
	case 8:
		adamWUpdate8x2(w, m, v, g, scale, b1, b2, stepSize, epsHat, wd)
	default:
		adamWScalar(w, m, v, g, scale, b1, b2, stepSize, epsHat, wd)
	}
}
