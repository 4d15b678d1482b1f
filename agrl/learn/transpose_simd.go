//go:build amd64 && goexperiment.simd

package learn

import "agrl.dev/agrl/llm"

// transpose16AVX512 transposes the 16×16 tile at src (row i at src + i·lds) into dst (row j at
// dst + j·ldd), or adds it with add (transpose_avx512_amd64.s). The caller checks the bounds.
//
//go:noescape
func transpose16AVX512(src *float32, lds int, dst *float32, ldd int, add bool)

// transpose8AVX2 is transpose16AVX512 on 8×8 tiles and AVX2 registers
// (transpose_avx2_amd64.s).
//
//go:noescape
func transpose8AVX2(src *float32, lds int, dst *float32, ldd int, add bool)

// transposeBlock writes (add: adds) into dst the transpose of the r×c matrix at src, as
// llm.TransposeTiles says: its whole tiles go through transpose16AVX512 on AVX-512 CPUs (16
// row loads, 64 shuffles in registers, 16 row stores) or transpose8AVX2 on AVX2 ones (8 loads,
// 24 shuffles, 8 stores), the edges through the loop.
func transposeBlock(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	tile, kernel := 16, transpose16AVX512
	if useAVX2 || !hasAVX512 {
		tile, kernel = 8, transpose8AVX2
	}
	rt, ct := r-r%tile, c-c%tile
	if !(hasAVX512 || hasAVX2) || rt == 0 || ct == 0 {
		llm.TransposeTiles(dst, ldd, src, r, c, lds, add)
		return
	}
	if (r-1)*lds+c > len(src) || (c-1)*ldd+r > len(dst) {
		panic("transpose: operand too short")
	}
	for i0 := 0; i0 < rt; i0 += tile {
		for j0 := 0; j0 < ct; j0 += tile {
			kernel(&src[i0*lds+j0], lds, &dst[j0*ldd+i0], ldd, add)
		}
	}
	if ct < c { // the columns past the last whole tile, rows 0 … rt-1
		llm.TransposeTiles(dst[ct*ldd:], ldd, src[ct:], rt, c-ct, lds, add)
	}
	if rt < r { // the rows past the last whole tile, every column
		llm.TransposeTiles(dst[rt:], ldd, src[rt*lds:], r-rt, c, lds, add)
	}
}
