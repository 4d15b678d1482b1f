//go:build amd64 && goexperiment.simd

package learn

// The element-wise loops of vec.go on 16 lanes: the source of two versions, these (one
// AVX-512 vector, f16) and vec8x2_simd_gen.go's (a pair of AVX2 vectors, f8x2), which
// TestVecGenerated writes from this file with -update (go generate) and checks is current.
// vec_simd.go picks one for each call. Each function runs on lengths of 16 or more, its
// last len%16 elements through the plain loop; every element gets the plain loop's operations
// in its order, so all three give the same bits (TestVecMatchesScalar). The element-wise ones
// take their last elements first, so that no scalar is live across the vector loop (the
// compiler reloaded such scalars with SSE instructions at every iteration, see clearUpper8x2),
// and every function clears the vector registers' upper halves (clearUpper16) after its vector
// part.

//go:generate go test -run ^TestVecGenerated$ -update

func ropeRotate16(v, cs, sn []float32, half int, inverse bool) {
	full := tail16(half)
	ropeScalar(v, cs, sn, full, half, inverse)
	for i := 0; i < full; i += 16 {
		x1, x2, c, s := ld16(v[i:i+16]), ld16(v[i+half:i+half+16]), ld16(cs[i:i+16]), ld16(sn[i:i+16])
		if inverse {
			st16(x1.Mul(c).Add(x2.Mul(s)), v[i:i+16])
			st16(x2.Mul(c).Sub(x1.Mul(s)), v[i+half:i+half+16])
		} else {
			st16(x1.Mul(c).Sub(x2.Mul(s)), v[i:i+16])
			st16(x2.Mul(c).Add(x1.Mul(s)), v[i+half:i+half+16])
		}
	}
	clearUpper16()
}

func lnApply16(x, xh, out, g, b []float32, mean, rstd float32) {
	n := len(x)
	full := tail16(n)
	lnApplyScalar(x[full:], xh[full:n], out[full:n], g[full:n], b[full:n], mean, rstd)
	mv, rv := bc16(mean), bc16(rstd)
	for j := 0; j < full; j += 16 {
		h := ld16(x[j : j+16]).Sub(mv).Mul(rv)
		st16(h, xh[j:j+16])
		st16(h.Mul(ld16(g[j:j+16])).Add(ld16(b[j:j+16])), out[j:j+16])
	}
	clearUpper16()
}

func lnBackApply16(out, dxh, xh []float32, m1, m2, rstd float32) {
	n := len(out)
	full := tail16(n)
	lnBackApplyScalar(out[full:], dxh[full:n], xh[full:n], m1, m2, rstd)
	a, b, r := bc16(m1), bc16(m2), bc16(rstd)
	for j := 0; j < full; j += 16 {
		t := ld16(dxh[j : j+16]).Sub(a).Sub(ld16(xh[j : j+16]).Mul(b))
		st16(ld16(out[j:j+16]).Add(r.Mul(t)), out[j:j+16])
	}
	clearUpper16()
}

func mulInto16(dst, a, b []float32) {
	n := len(dst)
	full := tail16(n)
	mulScalar(dst[full:], a[full:n], b[full:n])
	for j := 0; j < full; j += 16 {
		st16(ld16(a[j:j+16]).Mul(ld16(b[j:j+16])), dst[j:j+16])
	}
	clearUpper16()
}

func gainAcc16(g, b, dy, xh []float32) {
	n := len(g)
	full := tail16(n)
	gainAccScalar(g[full:], b[full:n], dy[full:n], xh[full:n])
	for j := 0; j < full; j += 16 {
		d := ld16(dy[j : j+16])
		st16(ld16(g[j:j+16]).Add(d.Mul(ld16(xh[j:j+16]))), g[j:j+16])
		st16(ld16(b[j:j+16]).Add(d), b[j:j+16])
	}
	clearUpper16()
}

func scaleBy16(x []float32, s float32) {
	n := len(x)
	full := tail16(n)
	scaleScalar(x[full:], s)
	sv := bc16(s)
	for j := 0; j < full; j += 16 {
		st16(ld16(x[j:j+16]).Mul(sv), x[j:j+16])
	}
	clearUpper16()
}

func maxOf16(x []float32) float32 {
	n := len(x)
	acc := ld16(x[:16])
	nan := acc.IsNaN()
	full := tail16(n)
	for j := 16; j < full; j += 16 {
		v := ld16(x[j : j+16])
		acc, nan = acc.Max(v), nan.Or(v.IsNaN())
	}
	var lanes [16]float32
	acc.Store(&lanes)
	nanBits := nan.ToBits()
	clearUpper16()
	mx := maxScalar(lanes[:])
	for _, v := range x[full:] {
		mx = max(mx, v)
	}
	// The vector maximum keeps one operand where the plain max propagates a NaN or prefers +0
	// to −0: those rare cases take the plain loop.
	if mx == 0 || nanBits != 0 {
		return maxScalar(x)
	}
	return mx
}

func logits16(z, ban []float32, invT float32) float32 {
	n := len(z)
	full := tail16(n)
	mt := logitsScalar(z[full:], ban[full:n], invT)
	tv := bc16(invT)
	for j := 0; j < full; j += 16 {
		st16(ld16(z[j:j+16]).Mul(tv).Add(ld16(ban[j:j+16])), z[j:j+16])
	}
	clearUpper16()
	return max(maxOf16(z[:full]), mt)
}

func normalize16(z, p []float32, lse, inv float32) {
	n := len(z)
	full := tail16(n)
	normalizeScalar(z[full:], p[full:n], lse, inv)
	lv, iv := bc16(lse), bc16(inv)
	for j := 0; j < full; j += 16 {
		st16(ld16(z[j:j+16]).Sub(lv), z[j:j+16])
		st16(ld16(p[j:j+16]).Mul(iv), p[j:j+16])
	}
	clearUpper16()
}

func outputGrad16(dz, lp, pr []float32, a, e, ent, invT float32) {
	n := len(lp)
	full := tail16(n)
	outputGradScalar(dz[full:n], lp[full:], pr[full:n], a, e, ent, invT)
	na, ev, hv, tv := bc16(-a), bc16(e), bc16(ent), bc16(invT)
	for j := 0; j < full; j += 16 {
		p := ld16(pr[j : j+16])
		t := na.Mul(p).Sub(ev.Mul(p).Mul(ld16(lp[j : j+16]).Add(hv)))
		st16(tv.Mul(t), dz[j:j+16])
	}
	clearUpper16()
}

func adamWUpdate16(w, m, v, g []float32, scale, b1, b2, stepSize, epsHat, wd float32) {
	n := len(w)
	full := tail16(n)
	adamWScalar(w[full:], m[full:n], v[full:n], g[full:n], scale, b1, b2, stepSize, epsHat, wd)
	sc, b1v, b2v, c1, c2 := bc16(scale), bc16(b1), bc16(b2), bc16(1-b1), bc16(1-b2)
	sv, ev, wv := bc16(stepSize), bc16(epsHat), bc16(wd)
	for j := 0; j < full; j += 16 {
		gj := ld16(g[j : j+16]).Mul(sc)
		mj := b1v.Mul(ld16(m[j : j+16])).Add(c1.Mul(gj))
		vj := b2v.Mul(ld16(v[j : j+16])).Add(c2.Mul(gj).Mul(gj))
		wj := ld16(w[j : j+16])
		wj = wj.Sub(sv.Mul(mj.Div(vj.Sqrt().Add(ev))).Add(wv.Mul(wj)))
		st16(mj, m[j:j+16])
		st16(vj, v[j:j+16])
		st16(wj, w[j:j+16])
	}
	clearUpper16()
}
