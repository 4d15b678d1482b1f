package learn

import (
	"runtime"

	"agrl.dev/agrl/llm"
)

// The LM head of the pretrained models' host forward pass (llm.SetHead): the logits x·wᵀ for
// the head (or the tied embeddings) w [vocab, hidden], read as it is. The other projections
// run on gemm over a transposed copy of their weight (hostLinear), made once; for the head,
// the largest matrix of a small model (151936 × 1024 floats, 0.62 GB, at the Qwen3-0.6B
// shape), that copy would double its memory, and while sampling its product is asked for a
// few rows (each sequence's last position), where reading w once is the whole cost in either
// layout (Logits and Step ask for every position's; BenchmarkHeadNT measures 64 rows too).
// So each logit is a dot product along the hidden axis instead:
//
//	sixteen partial sums s[l] = Σ x[k]·w[k] over k ≡ l (mod 16), k < hidden&^15, each a chain
//	of fused multiply-adds in increasing k; then t[l] = s[l] + s[l+8] for l < 8; then
//	((t0+t4)+(t2+t6)) + ((t1+t5)+(t3+t7)); then the hidden%16 products past the last block,
//	added one by one in increasing k.
//
// That order is fixed whatever the vector width (the AVX2 kernel keeps the 16 partial sums as
// two 8-lane halves), the other rows or the split over the cores, so a logit has the same bits
// on every machine with the kernels and whether its sequence is decoded alone or in a batch.
// It is not gemm's order (one chain over all of k), so the logits differ from hostLinear's in
// the last bits.

// headNT is llm.SetHead's kernel: x [rows, in] times wᵀ for w [out, in], the outputs split
// over the cores, into a buffer from llm's pool (the sampler gives its logits back there).
func headNT(x []float32, rows, in int, w []float32, out int) []float32 {
	y := llm.Floats(rows * out)
	headNTInto(y, x, rows, in, w, out)
	return y
}

// headNTInto is headNT into y ([rows, out], every element written).
func headNTInto(y, x []float32, rows, in int, w []float32, out int) {
	chunked(runtime.GOMAXPROCS(0), out, 12, 256, func(lo, hi int) { // 12: the AVX2 kernel's 3 rows of w, the AVX-512 ones' 4
		dotRows(x, rows, in, w[lo*in:hi*in], hi-lo, y[lo:], out)
	})
}

// dotFinish is the end of a logit's sum (see above) from u[l] = t[l] + t[l+4] and the
// products past the last 16-wide block.
func dotFinish(u *[4]float32, x, w []float32, k16 int) float32 {
	return dotTail((u[0]+u[2])+(u[1]+u[3]), x, w, k16)
}

// dotTail adds to s the products x[k]·w[k] past the last 16-wide block (k from k16), one by one
// in increasing k: the end of every logit's sum.
func dotTail(s float32, x, w []float32, k16 int) float32 {
	for k := k16; k < len(x); k++ {
		s += float32(x[k] * w[k]) // the conversion keeps the product rounded on its own
	}
	return s
}

// dotRowsScalar is dotRows without vector kernels: the same order of operations, with the
// multiply-adds unfused (so not the same bits as the kernels').
func dotRowsScalar(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	k16 := in &^ 15
	for r := range rows {
		xr := x[r*in : (r+1)*in]
		for j := range n {
			wj := w[j*in : (j+1)*in]
			var s [16]float32
			for k := 0; k < k16; k += 16 {
				for l := range 16 {
					s[l] += float32(xr[k+l] * wj[k+l])
				}
			}
			var t [8]float32
			for l := range 8 {
				t[l] = s[l] + s[l+8]
			}
			u := [4]float32{t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]}
			y[r*ldy+j] = dotFinish(&u, xr, wj, k16)
		}
	}
}
