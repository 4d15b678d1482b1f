//go:build amd64 && goexperiment.simd

package learn

import "agrl.dev/agrl/llm"

// transpose16AVX512 transposes the 16×16 tile at src (row i at src + i·lds) into dst (row j at
// dst + j·ldd), or adds it with add (transpose_avx512_amd64.s). The caller checks the bounds.
//
//go:noescape
func transpose16AVX512(src *float32, lds int, dst *float32, ldd int, add bool)

// transposeBlock writes (add: adds) into dst the transpose of the r×c matrix at src, as
// llm.TransposeTiles says: on AVX-512 CPUs its whole 16×16 tiles go through transpose16AVX512
// (16 row loads, 64 shuffles in registers, 16 row stores), the edges through the loop.
func transposeBlock(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	r16, c16 := r&^15, c&^15
	if !hasAVX512 || r16 == 0 || c16 == 0 {
		llm.TransposeTiles(dst, ldd, src, r, c, lds, add)
		return
	}
	if (r-1)*lds+c > len(src) || (c-1)*ldd+r > len(dst) {
		panic("transpose: operand too short")
	}
	for i0 := 0; i0 < r16; i0 += 16 {
		for j0 := 0; j0 < c16; j0 += 16 {
			transpose16AVX512(&src[i0*lds+j0], lds, &dst[j0*ldd+i0], ldd, add)
		}
	}
	if c16 < c { // the columns past the last whole tile, rows 0 … r16-1
		llm.TransposeTiles(dst[c16*ldd:], ldd, src[c16:], r16, c-c16, lds, add)
	}
	if r16 < r { // the rows past the last whole tile, every column
		llm.TransposeTiles(dst[r16:], ldd, src[r16*lds:], r-r16, c, lds, add)
	}
}
