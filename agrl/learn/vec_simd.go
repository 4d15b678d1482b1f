//go:build amd64 && goexperiment.simd

package learn

import "simd/archsimd"

// The element-wise loops of vec.go on 16 lanes, where AVX-512 is present (otherwise, and for
// the last len%16 elements, the plain loops run). The same operations in the same order per
// element: the same bits (TestVecMatchesScalar).

type f16 = archsimd.Float32x16

func ld(x []float32) f16    { return archsimd.LoadFloat32x16Slice(x) }
func bc(x float32) f16      { return archsimd.BroadcastFloat32x16(x) }
func st(v f16, x []float32) { v.StoreSlice(x) }

// useVec selects the vector loops (on CPUs with AVX-512); tests turn it off to run the plain
// loops in whole training steps.
var useVec = hasAVX512

// vecOn reports whether n elements go through the vector loops; tail16 is how many of them do.
func vecOn(n int) bool { return useVec && n >= 16 }
func tail16(n int) int { return n &^ 15 }

func ropeRotate(v, cs, sn []float32, half int, inverse bool) {
	if !vecOn(half) {
		ropeScalar(v, cs, sn, 0, half, inverse)
		return
	}
	full := tail16(half)
	for i := 0; i < full; i += 16 {
		x1, x2, c, s := ld(v[i:i+16]), ld(v[i+half:i+half+16]), ld(cs[i:i+16]), ld(sn[i:i+16])
		if inverse {
			st(x1.Mul(c).Add(x2.Mul(s)), v[i:i+16])
			st(x2.Mul(c).Sub(x1.Mul(s)), v[i+half:i+half+16])
		} else {
			st(x1.Mul(c).Sub(x2.Mul(s)), v[i:i+16])
			st(x2.Mul(c).Add(x1.Mul(s)), v[i+half:i+half+16])
		}
	}
	ropeScalar(v, cs, sn, full, half, inverse)
}

func lnApply(x, xh, out, g, b []float32, mean, rstd float32) {
	n := len(x)
	if !vecOn(n) {
		lnApplyScalar(x, xh, out, g, b, mean, rstd)
		return
	}
	mv, rv := bc(mean), bc(rstd)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		h := ld(x[j : j+16]).Sub(mv).Mul(rv)
		st(h, xh[j:j+16])
		st(h.Mul(ld(g[j:j+16])).Add(ld(b[j:j+16])), out[j:j+16])
	}
	lnApplyScalar(x[full:], xh[full:n], out[full:n], g[full:n], b[full:n], mean, rstd)
}

func lnBackApply(out, dxh, xh []float32, m1, m2, rstd float32) {
	n := len(out)
	if !vecOn(n) {
		lnBackApplyScalar(out, dxh, xh, m1, m2, rstd)
		return
	}
	a, b, r := bc(m1), bc(m2), bc(rstd)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		t := ld(dxh[j : j+16]).Sub(a).Sub(ld(xh[j : j+16]).Mul(b))
		st(ld(out[j:j+16]).Add(r.Mul(t)), out[j:j+16])
	}
	lnBackApplyScalar(out[full:], dxh[full:n], xh[full:n], m1, m2, rstd)
}

func mulInto(dst, a, b []float32) {
	n := len(dst)
	if !vecOn(n) {
		mulScalar(dst, a, b)
		return
	}
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		st(ld(a[j:j+16]).Mul(ld(b[j:j+16])), dst[j:j+16])
	}
	mulScalar(dst[full:], a[full:n], b[full:n])
}

func gainAcc(g, b, dy, xh []float32) {
	n := len(g)
	if !vecOn(n) {
		gainAccScalar(g, b, dy, xh)
		return
	}
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		d := ld(dy[j : j+16])
		st(ld(g[j:j+16]).Add(d.Mul(ld(xh[j:j+16]))), g[j:j+16])
		st(ld(b[j:j+16]).Add(d), b[j:j+16])
	}
	gainAccScalar(g[full:], b[full:n], dy[full:n], xh[full:n])
}

func scaleBy(x []float32, s float32) {
	n := len(x)
	if !vecOn(n) {
		scaleScalar(x, s)
		return
	}
	sv := bc(s)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		st(ld(x[j:j+16]).Mul(sv), x[j:j+16])
	}
	scaleScalar(x[full:], s)
}

func maxOf(x []float32) float32 {
	n := len(x)
	if !vecOn(n) {
		return maxScalar(x)
	}
	acc := ld(x[:16])
	nan := acc.IsNaN()
	full := tail16(n)
	for j := 16; j < full; j += 16 {
		v := ld(x[j : j+16])
		acc, nan = acc.Max(v), nan.Or(v.IsNaN())
	}
	var lanes [16]float32
	acc.Store(&lanes)
	mx := maxScalar(lanes[:])
	for _, v := range x[full:] {
		mx = max(mx, v)
	}
	// The vector maximum keeps one operand where the plain max propagates a NaN or prefers +0
	// to −0: those rare cases take the plain loop.
	if mx == 0 || nan.ToBits() != 0 {
		return maxScalar(x)
	}
	return mx
}

func logits(z, ban []float32, invT float32) float32 {
	n := len(z)
	if !vecOn(n) {
		return logitsScalar(z, ban, invT)
	}
	tv := bc(invT)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		st(ld(z[j:j+16]).Mul(tv).Add(ld(ban[j:j+16])), z[j:j+16])
	}
	return max(maxOf(z[:full]), logitsScalar(z[full:], ban[full:n], invT))
}

func normalize(z, p []float32, lse, inv float32) {
	n := len(z)
	if !vecOn(n) {
		normalizeScalar(z, p, lse, inv)
		return
	}
	lv, iv := bc(lse), bc(inv)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		st(ld(z[j:j+16]).Sub(lv), z[j:j+16])
		st(ld(p[j:j+16]).Mul(iv), p[j:j+16])
	}
	normalizeScalar(z[full:], p[full:n], lse, inv)
}

func outputGrad(dz, lp, pr []float32, a, e, ent, invT float32) {
	n := len(lp)
	if !vecOn(n) {
		outputGradScalar(dz, lp, pr, a, e, ent, invT)
		return
	}
	na, ev, hv, tv := bc(-a), bc(e), bc(ent), bc(invT)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		p := ld(pr[j : j+16])
		t := na.Mul(p).Sub(ev.Mul(p).Mul(ld(lp[j : j+16]).Add(hv)))
		st(tv.Mul(t), dz[j:j+16])
	}
	outputGradScalar(dz[full:n], lp[full:], pr[full:n], a, e, ent, invT)
}

func adamWUpdate(w, m, v, g []float32, scale, b1, b2, stepSize, epsHat, wd float32) {
	n := len(w)
	if !vecOn(n) {
		adamWScalar(w, m, v, g, scale, b1, b2, stepSize, epsHat, wd)
		return
	}
	sc, b1v, b2v, c1, c2 := bc(scale), bc(b1), bc(b2), bc(1-b1), bc(1-b2)
	sv, ev, wv := bc(stepSize), bc(epsHat), bc(wd)
	full := tail16(n)
	for j := 0; j < full; j += 16 {
		gj := ld(g[j : j+16]).Mul(sc)
		mj := b1v.Mul(ld(m[j : j+16])).Add(c1.Mul(gj))
		vj := b2v.Mul(ld(v[j : j+16])).Add(c2.Mul(gj).Mul(gj))
		wj := ld(w[j : j+16])
		wj = wj.Sub(sv.Mul(mj.Div(vj.Sqrt().Add(ev))).Add(wv.Mul(wj)))
		st(mj, m[j:j+16])
		st(vj, v[j:j+16])
		st(wj, w[j:j+16])
	}
	adamWScalar(w[full:], m[full:n], v[full:n], g[full:n], scale, b1, b2, stepSize, epsHat, wd)
}
