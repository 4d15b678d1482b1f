package learn

// The host trainer's matrix products (see host.go). Every product adds op(A)·B into C:
//
//	C[i, j] += Σ_k A(i, k)·B[k, j]   for i < m, j < n, k < kk
//
// with A(i, k) = a[i·ai + k·ak] (so a row-major A has ai = its row length and ak = 1, and a
// transposed one ai = 1, ak = its row length), B[k, j] = b[k·ldb + j] and C[i, j] = c[i·ldc + j].
// Each element of C is one chain of fused multiply-adds over k in increasing order, starting
// from its value in C. That order is fixed whatever the vector width or the number of workers
// (workers split the rows or the columns of C, never k), so the simd kernels give the same bits
// on every AVX-512 machine, and a product split over two cores equals the product on one.

// gemmRows splits the m rows of C += op(A)·B over workers and runs gemm on each part.
func gemmRows(workers, m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int) {
	gemmRowsK(workers, m, n, kk, a, ai, ak, b, ldb, c, ldc, true)
}

// gemmRowsSet is gemmRows for C = op(A)·B: C's previous values are never read (each chain of
// multiply-adds starts from 0), so C needs no clearing.
func gemmRowsSet(workers, m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int) {
	gemmRowsK(workers, m, n, kk, a, ai, ak, b, ldb, c, ldc, false)
}

func gemmRowsK(workers, m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	if m == 0 || n == 0 {
		return
	}
	// A transposed (the weight gradients, whose B is the batch's long activations): on the
	// AVX2 path, pieces of at least 64 rows, so that a panel of B, once read, serves 11 row
	// blocks of 6 rather than 3, and fewer rows where that would leave a worker without a piece
	// (128 rows on two cores: two pieces). With gemmFMA's packed A, the weight gradients in a
	// warm-start step on a 2-core Zen 3 went from 0.66 to 0.79–0.82 of the forward products'
	// GFLOP/s (docs/performance.md, "The AVX2 path's edge blocks and weight gradients").
	least := 8
	if ai == 1 && gemmRowBlock() == 6 {
		least = max(least, min(64, (m+workers-1)/max(workers, 1)))
	}
	// B too large to copy whole (packBlocks: a pretrained model's projections): copied, and
	// multiplied, a block of its rows and columns at a time, every piece reading the same copy
	// of each. An element's chain of multiply-adds still runs over k in increasing order: a
	// column block's row blocks go in k's order, each adding onto the last.
	if kc, nc := packBlocks(m, n, kk); kc > 0 {
		for j0 := 0; j0 < n; j0 += nc {
			w := min(nc, n-j0)
			for k0 := 0; k0 < kk; k0 += kc {
				kb, bk := min(kc, kk-k0), b[k0*ldb+j0:]
				pb, buf := packPanels(workers, m, w, kb, bk, ldb)
				chunked(workers, m, gemmRowBlock(), least, func(lo, hi int) {
					gemmKP(hi-lo, w, kb, a[lo*ai+k0*ak:], ai, ak, bk, ldb, pb, c[lo*ldc+j0:], ldc, load || k0 > 0)
				})
				releasePanels(buf)
			}
		}
		return
	}
	// B's columns copied once as 16-wide panels, where the kernels read them faster so
	// (packPanels); every piece reads the same copy.
	pb, buf := packPanels(workers, m, n, kk, b, ldb)
	chunked(workers, m, gemmRowBlock(), least, func(lo, hi int) {
		gemmKP(hi-lo, n, kk, a[lo*ai:], ai, ak, b, ldb, pb, c[lo*ldc:], ldc, load)
	})
	releasePanels(buf)
}

// gemm adds op(A)·B into C; gemmSet stores it (C's previous values are never read).
func gemm(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int) {
	gemmK(m, n, kk, a, ai, ak, b, ldb, c, ldc, true)
}

func gemmSet(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int) {
	gemmK(m, n, kk, a, ai, ak, b, ldb, c, ldc, false)
}

// rowsDo runs f over the rows [lo, hi) of n rows split over workers.
func rowsDo(workers, n int, f func(lo, hi int)) {
	chunked(workers, n, 1, 8, f)
}

// gemmScalar is the portable kernel: the same products, one element at a time.
func gemmScalar(m, n, kk int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, load bool) {
	for i := range m {
		crow := c[i*ldc : i*ldc+n]
		if !load {
			clear(crow)
		}
		for k := range kk {
			av := a[i*ai+k*ak]
			brow := b[k*ldb : k*ldb+n]
			for j, bv := range brow {
				crow[j] += av * bv
			}
		}
	}
}

// expSumScalar is expSum one element at a time.
func expSumScalar(x []float32, shift float32) float32 {
	var sum float32
	for j, v := range x {
		x[j] = exp32(v - shift)
		sum += x[j]
	}
	return sum
}

func reluScalar(x []float32) {
	for j, v := range x {
		x[j] = max(v, 0)
	}
}

func reluGradScalar(dx, u []float32) {
	for j := range dx {
		if u[j] <= 0 {
			dx[j] = 0
		}
	}
}
