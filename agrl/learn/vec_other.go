//go:build !(amd64 && goexperiment.simd)

package learn

// Builds without GOEXPERIMENT=simd run the element-wise loops of vec.go as they are.

func ropeRotate(v, cs, sn []float32, half int, inverse bool) {
	ropeScalar(v, cs, sn, 0, half, inverse)
}
func lnApply(x, xh, out, g, b []float32, mean, rstd float32) {
	lnApplyScalar(x, xh, out, g, b, mean, rstd)
}
func lnBackApply(out, dxh, xh []float32, m1, m2, rstd float32) {
	lnBackApplyScalar(out, dxh, xh, m1, m2, rstd)
}
func mulInto(dst, a, b []float32)                   { mulScalar(dst, a, b) }
func gainAcc(g, b, dy, xh []float32)                { gainAccScalar(g, b, dy, xh) }
func scaleBy(x []float32, s float32)                { scaleScalar(x, s) }
func maxOf(x []float32) float32                     { return maxScalar(x) }
func logits(z, ban []float32, invT float32) float32 { return logitsScalar(z, ban, invT) }
func normalize(z, p []float32, lse, inv float32)    { normalizeScalar(z, p, lse, inv) }
func outputGrad(dz, lp, pr []float32, a, e, ent, invT float32) {
	outputGradScalar(dz, lp, pr, a, e, ent, invT)
}
func adamWUpdate(w, m, v, g []float32, scale, b1, b2, stepSize, epsHat, wd float32) {
	adamWScalar(w, m, v, g, scale, b1, b2, stepSize, epsHat, wd)
}
