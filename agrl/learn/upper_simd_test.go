//go:build amd64 && goexperiment.simd

package learn

import (
	"simd/archsimd"
	"testing"
)

var upperSink float32
var upperVec [8]float32
var upperVec16 [16]float32

//go:noinline
func upperDirty() {
	v := archsimd.LoadFloat32x8(&upperVec)
	v.Add(v).Store(&upperVec)
}

//go:noinline
func upperClean() {
	upperDirty()
	clearUpper8x2()
}

//go:noinline
func upperDirty16() {
	v := archsimd.LoadFloat32x16(&upperVec16)
	v.Add(v).Store(&upperVec16)
}

//go:noinline
func upperClean16() {
	upperDirty16()
	clearUpper16()
}

//go:noinline
func upperScalar(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v * 1.5
	}
	return s
}

// BenchmarkUpperHalves times a plain (SSE) loop of 8 multiply-adds after a 256-bit vector add,
// with the vector registers' upper halves left dirty and cleared (clearUpper8x2): the cost of
// the transition that clearUpper8x2 avoids; and, on AVX-512 machines, the same after a 512-bit
// add (clearUpper16).
func BenchmarkUpperHalves(b *testing.B) {
	if !hasAVX2 {
		b.Skip("needs AVX2")
	}
	x := make([]float32, 8)
	for i := range x {
		x[i] = float32(i)
	}
	cases := []struct {
		name   string
		before func()
		ok     bool
	}{
		{"dirty", upperDirty, true},
		{"cleared", upperClean, true},
		{"dirty512", upperDirty16, hasAVX512},
		{"cleared512", upperClean16, hasAVX512},
	}
	for _, c := range cases {
		if !c.ok {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				c.before()
				upperSink += upperScalar(x)
			}
		})
	}
}
