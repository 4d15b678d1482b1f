package learn

import "math"

// The host trainer's element-wise loops (host.go, hostsample.go), written once as plain loops
// (here) and once on 16-lane vectors (vec16_simd.go, also generated as pairs of AVX2 vectors;
// vec_simd.go picks one per call). Each output element is computed by the
// same float32 operations in the same order in both, never a fused multiply-add (the plain
// loops convert their products explicitly, which forbids the compiler to fuse them even
// where GOAMD64=v3 would allow it), so the two give the same bits (TestVecMatchesScalar) and a
// step's results do not depend on which one ran. Sums over a row
// (LayerNorm's mean and variance, the entropy, the softmax backward's dot products) stay
// sequential loops in their callers: vectorising them would change their order.

// ropeScalar rotates the pairs (v[i], v[i+half]) by the angles whose cosines and sines are
// cs[i] and sn[i], lo <= i < half (by minus the angles if inverse).
func ropeScalar(v, cs, sn []float32, lo, half int, inverse bool) {
	for i := lo; i < half; i++ {
		x1, x2, c, s := v[i], v[i+half], cs[i], sn[i]
		if inverse {
			v[i], v[i+half] = float32(x1*c)+float32(x2*s), float32(x2*c)-float32(x1*s)
		} else {
			v[i], v[i+half] = float32(x1*c)-float32(x2*s), float32(x2*c)+float32(x1*s)
		}
	}
}

// lnApplyScalar writes x̂ = (x − mean)·rstd into xh and x̂·g + b into out.
func lnApplyScalar(x, xh, out, g, b []float32, mean, rstd float32) {
	for j, v := range x {
		xh[j] = (v - mean) * rstd
		out[j] = float32(xh[j]*g[j]) + b[j]
	}
}

// lnBackApplyScalar adds rstd·(dx̂ − m1 − x̂·m2) to out.
func lnBackApplyScalar(out, dxh, xh []float32, m1, m2, rstd float32) {
	for j := range out {
		out[j] += float32(rstd * (dxh[j] - m1 - float32(xh[j]*m2)))
	}
}

// mulScalar writes a·b into dst.
func mulScalar(dst, a, b []float32) {
	for j := range dst {
		dst[j] = a[j] * b[j]
	}
}

// gainAccScalar adds dy·x̂ to g and dy to b.
func gainAccScalar(g, b, dy, xh []float32) {
	for j := range g {
		g[j] += float32(dy[j] * xh[j])
		b[j] += dy[j]
	}
}

// scaleScalar multiplies x by s.
func scaleScalar(x []float32, s float32) {
	for j := range x {
		x[j] *= s
	}
}

// maxScalar is the largest element of a non-empty x.
func maxScalar(x []float32) float32 {
	mx := x[0]
	for _, v := range x[1:] {
		mx = max(mx, v)
	}
	return mx
}

// logitsScalar replaces z by z·invT + ban and returns the largest result (−Inf for an empty z).
func logitsScalar(z, ban []float32, invT float32) float32 {
	mx := float32(math.Inf(-1))
	for j := range z {
		z[j] = float32(z[j]*invT) + ban[j]
		mx = max(mx, z[j])
	}
	return mx
}

// normalizeScalar subtracts lse from z and multiplies p by inv.
func normalizeScalar(z, p []float32, lse, inv float32) {
	for j := range z {
		z[j] -= lse
		p[j] *= inv
	}
}

// outputGradScalar writes the gradient of a·log p_target + e·H with respect to the logits z
// (lp the log-probabilities, pr the probabilities, ent the entropy H, all at inverse
// temperature invT), except for the target's own +invT·a: invT·(−a·p − e·p·(lp + H)).
func outputGradScalar(dz, lp, pr []float32, a, e, ent, invT float32) {
	for j, l := range lp {
		dz[j] = invT * (float32(-a*pr[j]) - float32(e*pr[j]*(l+ent)))
	}
}

// adamWScalar is AdamW's update of w with moments m and v, for the gradient g·scale (see
// hostUpdate for the constants).
func adamWScalar(w, m, v, g []float32, scale, b1, b2, stepSize, epsHat, wd float32) {
	for j := range w {
		gj := g[j] * scale
		m[j] = float32(b1*m[j]) + float32((1-b1)*gj)
		v[j] = float32(b2*v[j]) + float32((1-b2)*gj*gj)
		w[j] -= float32(stepSize*(m[j]/(float32(math.Sqrt(float64(v[j])))+epsHat))) + float32(wd*w[j])
	}
}
