//go:build amd64 && goexperiment.simd

package learn

import "simd/archsimd"

// dotRows sets y[r·ldy + j] to the dot product of row r of x [rows, in] and row j of w [n, in],
// in headkernel.go's order. Each row of w is read from memory once, and its products with
// the rows of x accumulate in registers, one accumulator per logit (on AVX2, two 8-lane
// halves).
func dotRows(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	if rows == 0 || n == 0 {
		return
	}
	if len(x) < rows*in || len(w) < n*in || len(y) < (rows-1)*ldy+n {
		panic("dotRows: operand too short")
	}
	switch {
	case useAVX2:
		dotRowsAVX2(x, rows, in, w, n, y, ldy)
	case hasAVX512:
		dotRowsAVX512(x, rows, in, w, n, y, ldy)
	default:
		dotRowsScalar(x, rows, in, w, n, y, ldy)
	}
}

//go:noescape
func dot8x2AVX512(n16 int, x *float32, ldx int, w *float32, ldw int, u *[16][4]float32)

//go:noescape
func dot1x4AVX512(n16 int, x *float32, w *float32, ldw int, u *[4][4]float32)

//go:noescape
func dot1x2AVX512(n16 int, x *float32, w *float32, ldw int, u *[2][4]float32)

// dotRowsAVX512 runs the assembly kernels (headkernel_avx512_amd64.s; in Go, the compiler's
// register allocation spilled the 16 accumulators of the 8×2 block and ran at half the speed
// of the transposed product). For fewer than 8 rows of x (decoding a few sequences), each block
// of 4 rows of w is read from memory once and stays in the L1 cache while the rows of x pass
// over it; for 8 or more, blocks of 2 rows of w meet 8 rows of x at a time.
func dotRowsAVX512(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	n16 := in / 16
	k16 := n16 * 16
	row := func(s []float32, i int) []float32 { return s[i*in : (i+1)*in] }
	pair := func(j, ldw, cols, r0 int) { // rows r0… of x with rows j, j+ldw/in of w, one at a time
		var u [2][4]float32
		for r := r0; r < rows; r++ {
			xr := row(x, r)
			dot1x2AVX512(n16, at(xr, 0), at(w, j*in), ldw, &u)
			for c := range cols {
				y[r*ldy+j+c] = dotFinish(&u[c], xr, row(w, j+c), k16)
			}
		}
	}
	j := 0
	if rows < 8 {
		var u [4][4]float32
		for ; j+4 <= n; j += 4 {
			for r := range rows {
				xr := row(x, r)
				dot1x4AVX512(n16, at(xr, 0), at(w, j*in), in, &u)
				for c := range 4 {
					y[r*ldy+j+c] = dotFinish(&u[c], xr, row(w, j+c), k16)
				}
			}
		}
	} else {
		var u [16][4]float32
		for ; j+2 <= n; j += 2 {
			r := 0
			for ; r+8 <= rows; r += 8 {
				dot8x2AVX512(n16, at(x, r*in), in, at(w, j*in), in, &u)
				for i := range 16 {
					ri, c := r+i/2, i%2
					y[ri*ldy+j+c] = dotFinish(&u[i], row(x, ri), row(w, j+c), k16)
				}
			}
			pair(j, in, 2, r)
		}
	}
	if j+2 <= n {
		pair(j, in, 2, 0)
		j += 2
	}
	if j < n {
		pair(j, 0, 1, 0) // the last row of w twice, the copy dropped
	}
}

// dotCols is how many rows of w dotRowsAVX2Go takes at a time.
const dotCols = 8

// reduce8x2 folds a logit's 16 partial sums, held as two 8-lane halves, to headkernel.go's
// u[l] = t[l] + t[l+4] (t[l] = s[l] + s[l+8]), as the AVX-512 kernels store them.
func reduce8x2(lo, hi archsimd.Float32x8, u *[4]float32) {
	t := lo.Add(hi)
	t.GetLo().Add(t.GetHi()).Store(u)
}

//go:noescape
func dot4x3AVX2(n16 int, x *float32, ldx int, w *float32, ldw int, y *float32, ldy int, lo *[12][8]float32)

// headBlockCols is how many rows of w dotRowsAVX2 takes at a time for 4 or more rows of x:
// 110 KB at a hidden size of 576, held in the L2 cache while every row of x passes over
// them, so that w is read from memory once per call; a multiple of 3.
const headBlockCols = 48

// dotRowsAVX2 runs dot4x3AVX2 (headkernel_avx2_amd64.s) on blocks of 4 rows of x and 3 rows
// of w, and dotRowsAVX2Go on what is left (fewer than 4 rows, the last 1 or 2 rows of w of
// a block). In Go, 8 accumulators (4 rows of x, two halves each) and the two halves of a row
// of w left x to be loaded at every multiply-add pair (10 loads per 8 multiply-adds,
// docs/performance.md, "The LM head on AVX2"); the kernel runs the low and the high halves of
// its twelve logits in turn, 7 loads per 12, and finishes each logit itself but for the
// products past the last 16-wide block of the hidden size, added here after it. The
// operations are those of dotRowsAVX2Go, so the bits are.
func dotRowsAVX2(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	if rows < 4 {
		dotRowsAVX2Go(x, rows, in, w, n, y, ldy)
		return
	}
	n16 := in / 16
	k16 := n16 * 16
	r4 := rows &^ 3
	var lo [12][8]float32
	for j0 := 0; j0 < n; j0 += headBlockCols {
		cols := min(headBlockCols, n-j0)
		c3 := cols - cols%3
		for r := 0; r < r4; r += 4 {
			for c := j0; c < j0+c3; c += 3 {
				dot4x3AVX2(n16, at(x, r*in), in, at(w, c*in), in, at(y, r*ldy+c), ldy, &lo)
			}
		}
		if k16 < in { // the products past the last 16-wide block
			for r := range r4 {
				for c := j0; c < j0+c3; c++ {
					y[r*ldy+c] = dotTail(y[r*ldy+c], x[r*in:(r+1)*in], w[c*in:(c+1)*in], k16)
				}
			}
		}
		if c3 < cols {
			dotRowsAVX2Go(x, r4, in, w[(j0+c3)*in:], cols-c3, y[j0+c3:], ldy)
		}
		if r4 < rows {
			dotRowsAVX2Go(x[r4*in:], rows-r4, in, w[j0*in:], cols, y[r4*ldy+j0:], ldy)
		}
	}
}

// dotRowsAVX2Go takes w dotCols rows at a time (18 KB at a hidden size of 576, so they stay in
// the L1 cache while the rows of x pass over them, four at a time, then one by one) and
// finishes the logits (dotFinish, scalar) only after the vector loops of a block, behind one
// clearUpper8x2: a scalar addition run while the vector registers' upper halves are dirty
// costs 130–210 ns on Zen 3 ("Dirty upper halves" in docs/performance.md), and finishing
// each logit straight after its vector loop paid it once a logit, half the LM head's time
// (docs/performance.md, "The LM head on AVX2"). The operations, and so the bits, are those of
// the AVX-512 kernels.
func dotRowsAVX2Go(x []float32, rows, in int, w []float32, n int, y []float32, ldy int) {
	k16 := in &^ 15
	row := func(s []float32, i int) []float32 { return s[i*in : (i+1)*in] }
	var u [4 * dotCols][4]float32
	for j0 := 0; j0 < n; j0 += dotCols {
		cols := min(dotCols, n-j0)
		r := 0
		for ; r+4 <= rows; r += 4 {
			x0, x1, x2, x3 := row(x, r), row(x, r+1), row(x, r+2), row(x, r+3)
			for c := range cols {
				wj := row(w, j0+c)
				var l0, h0, l1, h1, l2, h2, l3, h3 archsimd.Float32x8
				for k := 0; k < k16; k += 16 {
					bl, bh := load8(at(wj, k)), load8(at(wj, k+8))
					l0, h0 = load8(at(x0, k)).MulAdd(bl, l0), load8(at(x0, k+8)).MulAdd(bh, h0)
					l1, h1 = load8(at(x1, k)).MulAdd(bl, l1), load8(at(x1, k+8)).MulAdd(bh, h1)
					l2, h2 = load8(at(x2, k)).MulAdd(bl, l2), load8(at(x2, k+8)).MulAdd(bh, h2)
					l3, h3 = load8(at(x3, k)).MulAdd(bl, l3), load8(at(x3, k+8)).MulAdd(bh, h3)
				}
				reduce8x2(l0, h0, &u[4*c])
				reduce8x2(l1, h1, &u[4*c+1])
				reduce8x2(l2, h2, &u[4*c+2])
				reduce8x2(l3, h3, &u[4*c+3])
			}
			clearUpper8x2()
			for c := range cols {
				wj := row(w, j0+c)
				for i := range 4 {
					y[(r+i)*ldy+j0+c] = dotFinish(&u[4*c+i], row(x, r+i), wj, k16)
				}
			}
		}
		for ; r < rows; r++ {
			xr := row(x, r)
			for c := range cols {
				wj := row(w, j0+c)
				var lo, hi archsimd.Float32x8
				for k := 0; k < k16; k += 16 {
					lo, hi = load8(at(xr, k)).MulAdd(load8(at(wj, k)), lo), load8(at(xr, k+8)).MulAdd(load8(at(wj, k+8)), hi)
				}
				reduce8x2(lo, hi, &u[c])
			}
			clearUpper8x2()
			for c := range cols {
				y[r*ldy+j0+c] = dotFinish(&u[c], xr, row(w, j0+c), k16)
			}
		}
	}
}
