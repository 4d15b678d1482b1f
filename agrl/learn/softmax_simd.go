//go:build amd64 && goexperiment.simd

package learn

import (
	"math"
	"simd/archsimd"
	"slices"

	"agrl.dev/agrl/llm"
)

// The attention's softmax (llm.Softmax: the host forward pass's, a decoding step's over every
// cached position, and the backward pass's) on AVX-512 or AVX2 vectors; it exists in simd builds only,
// so it installs itself (the other kernels: llmkernel.go).
func init() {
	if hostKernels {
		llm.SetSoftmax(softmaxRow)
	}
}

// softmaxRow is llm.SetSoftmax's kernel: llm.SoftmaxLoop's steps with the scaling, the largest
// value and the divisions 16 lanes at a time, and the exponentials through llm.ExpSum as
// there. The products and divisions are the same IEEE operations one element at a time, and
// the largest value is the same whatever the order it is found in, so the bits are
// llm.SoftmaxLoop's; elements past the last 16 go one at a time. Two cases differ from Go's
// max: VMAXPS returns its second operand on ±0 where max prefers +0 (the shift is subtracted,
// and x − (±0) differ only for x = ±0, whose exponentials are both 1), and it drops a NaN that
// max keeps, so where a value is NaN or infinite (rare: those give NaN weights, or weight 0
// for −∞, as in the loop) the shift is found again one value at a time.
func softmaxRow(x []float32, scale float32) {
	if useAVX2 || !hasAVX512 {
		softmaxRowAVX2(x, scale)
		return
	}
	n := len(x)
	sc := archsimd.BroadcastFloat32x16(scale)
	mv := archsimd.BroadcastFloat32x16(float32(math.Inf(-1)))
	var odd archsimd.Float32x16 // v − v summed: NaN where some value is NaN or infinite
	j := 0
	for ; j+16 <= n; j += 16 {
		v := archsimd.LoadFloat32x16Slice(x[j : j+16]).Mul(sc)
		v.StoreSlice(x[j : j+16])
		mv = mv.Max(v)
		odd = odd.Add(v.Sub(v))
	}
	var lanes, oddLanes [16]float32
	mv.Store(&lanes)
	odd.Store(&oddLanes)
	clearUpper16()
	mx := softmaxShift(x, j, scale, lanes[:], oddLanes[:])
	sum := llm.ExpSum(x, mx) // SetExpSum's kernel, as in the loop
	sv := archsimd.BroadcastFloat32x16(sum)
	for j = 0; j+16 <= n; j += 16 {
		archsimd.LoadFloat32x16Slice(x[j : j+16]).Div(sv).StoreSlice(x[j : j+16])
	}
	clearUpper16()
	for k := j; k < n; k++ {
		x[k] /= sum
	}
}

// softmaxShift is the softmax kernels' scalar middle: the largest of the vector loop's lanes
// (the scaled x[:j]), or, where some of them held a NaN or an infinity (oddLanes, v − v),
// of x[:j] one value at a time, since VMAXPS drops a NaN that Go's max keeps; then x[j:]
// scaled one at a time and taken into the maximum.
func softmaxShift(x []float32, j int, scale float32, lanes, oddLanes []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range lanes {
		mx = max(mx, v)
	}
	if slices.ContainsFunc(oddLanes, func(v float32) bool { return v != v }) {
		mx = float32(math.Inf(-1))
		for _, v := range x[:j] {
			mx = max(mx, v)
		}
	}
	for k := j; k < len(x); k++ {
		x[k] *= scale
		mx = max(mx, x[k])
	}
	return mx
}

// softmaxRowAVX2 is softmaxRow 8 lanes at a time, for CPUs without AVX-512 (the same steps,
// so the same bits: VMAXPS's ±0 and NaN cases as above). Before it these CPUs ran
// llm.SoftmaxLoop, whose scalar scaling, maximum and divisions took 6% of a scoring pass's CPU
// on Zen 3 (docs/performance.md, "The attention's softmax on AVX2").
func softmaxRowAVX2(x []float32, scale float32) {
	n := len(x)
	sc := archsimd.BroadcastFloat32x8(scale)
	mv := archsimd.BroadcastFloat32x8(float32(math.Inf(-1)))
	var odd archsimd.Float32x8 // v − v summed: NaN where some value is NaN or infinite
	j := 0
	for ; j+8 <= n; j += 8 {
		v := archsimd.LoadFloat32x8Slice(x[j : j+8]).Mul(sc)
		v.StoreSlice(x[j : j+8])
		mv = mv.Max(v)
		odd = odd.Add(v.Sub(v))
	}
	var lanes, oddLanes [8]float32
	mv.Store(&lanes)
	odd.Store(&oddLanes)
	clearUpper8x2()
	mx := softmaxShift(x, j, scale, lanes[:], oddLanes[:])
	sum := llm.ExpSum(x, mx)
	sv := archsimd.BroadcastFloat32x8(sum)
	for j = 0; j+8 <= n; j += 8 {
		archsimd.LoadFloat32x8Slice(x[j : j+8]).Div(sv).StoreSlice(x[j : j+8])
	}
	clearUpper8x2()
	for k := j; k < n; k++ {
		x[k] /= sum
	}
}
