//go:build !(amd64 && goexperiment.simd)

package learn

import "agrl.dev/agrl/llm"

// transposeBlock writes (add: adds) into dst the transpose of the r×c matrix at src, as
// llm.TransposeTiles says; builds without GOEXPERIMENT=simd use the portable loop.
func transposeBlock(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	llm.TransposeTiles(dst, ldd, src, r, c, lds, add)
}
