//go:build amd64 && goexperiment.simd

package learn

import (
	"simd/archsimd"

	"agrl.dev/agrl/llm"
)

// The SwiGLU kernels exist in simd builds only, so they install themselves (the other
// kernels: llmkernel.go).
func init() {
	if hostKernels {
		llm.SetSwiGLU(swiGLU, swiGLUBack)
	}
}

// swiGLU is llm.SetSwiGLU's forward kernel: out[i] = silu(g)·u = g/(1 + e^(−g))·u for g =
// gate[i], u = up[i], in float32 with exp16's exponential, 16 lanes at a time; the elements
// past the last 16 go through the same lanes, masked, so every element gets the same bits
// wherever it lies in the slices (a row of a batch as alone). out may be gate. The exponent
// −g is clamped at expArgMax, so a gate below −88.3, whose silu is under 10⁻³⁶, gives a
// value that small rather than exp16's overflow.
func swiGLU(out, gate, up []float32) {
	if useAVX2 || !hasAVX512 { // installed only where one of the two runs (hostKernels)
		swiGLUAVX2(out, gate, up)
		return
	}
	one, zero, top := archsimd.BroadcastFloat32x16(1), archsimd.Float32x16{}, archsimd.BroadcastFloat32x16(expArgMax)
	n := len(gate)
	out, up = out[:n], up[:n]
	for j := 0; j < n; j += 16 {
		if j+16 > n {
			g, u := archsimd.LoadFloat32x16SlicePart(gate[j:]), archsimd.LoadFloat32x16SlicePart(up[j:])
			g.Div(one.Add(exp16(zero.Sub(g).Min(top)))).Mul(u).StoreSlicePart(out[j:])
			break
		}
		g, u := archsimd.LoadFloat32x16Slice(gate[j:j+16]), archsimd.LoadFloat32x16Slice(up[j:j+16])
		g.Div(one.Add(exp16(zero.Sub(g).Min(top)))).Mul(u).StoreSlice(out[j : j+16])
	}
	clearUpper16()
}

// swiGLUBack is llm.SetSwiGLU's backward kernel: with s = 1/(1 + e^(−g)) (exp16's exponential,
// its argument clamped and the lanes as in swiGLU), gate[i] becomes d·u·s·(1 + g·(1 − s)) and
// up[i] becomes d·g·s, for g = gate[i], u = up[i], d = dAct[i]: the gradients of silu(g)·u's
// inputs.
func swiGLUBack(gate, up, dAct []float32) {
	if useAVX2 || !hasAVX512 {
		swiGLUBackAVX2(gate, up, dAct)
		return
	}
	one, zero, top := archsimd.BroadcastFloat32x16(1), archsimd.Float32x16{}, archsimd.BroadcastFloat32x16(expArgMax)
	n := len(gate)
	up, dAct = up[:n], dAct[:n]
	for j := 0; j < n; j += 16 {
		part := j+16 > n
		var g, u, d archsimd.Float32x16
		if part {
			g, u, d = archsimd.LoadFloat32x16SlicePart(gate[j:]), archsimd.LoadFloat32x16SlicePart(up[j:]), archsimd.LoadFloat32x16SlicePart(dAct[j:])
		} else {
			g, u, d = archsimd.LoadFloat32x16Slice(gate[j:j+16]), archsimd.LoadFloat32x16Slice(up[j:j+16]), archsimd.LoadFloat32x16Slice(dAct[j:j+16])
		}
		s := one.Div(one.Add(exp16(zero.Sub(g).Min(top))))
		ds := d.Mul(s)
		dg := ds.Mul(u).Mul(one.Add(g.Mul(one.Sub(s))))
		du := ds.Mul(g)
		if part {
			dg.StoreSlicePart(gate[j:])
			du.StoreSlicePart(up[j:])
			break
		}
		dg.StoreSlice(gate[j : j+16])
		du.StoreSlice(up[j : j+16])
	}
	clearUpper16()
}

// expArgMax is the largest argument the SwiGLU kernels give exp16 and exp8: past about 88.38,
// x/ln2 rounds to 128 and their power of two overflows to +Inf (the softmaxes never get
// there: their arguments are at most 0).
const expArgMax = 88.3

// swiGLUAVX2 is swiGLU on AVX2: the same operations on 8 lanes (exp8), so the same bits.
func swiGLUAVX2(out, gate, up []float32) {
	one, zero, top := archsimd.BroadcastFloat32x8(1), archsimd.Float32x8{}, archsimd.BroadcastFloat32x8(expArgMax)
	n := len(gate)
	out, up = out[:n], up[:n]
	for j := 0; j < n; j += 8 {
		if j+8 > n {
			g, u := archsimd.LoadFloat32x8SlicePart(gate[j:]), archsimd.LoadFloat32x8SlicePart(up[j:])
			g.Div(one.Add(exp8(zero.Sub(g).Min(top)))).Mul(u).StoreSlicePart(out[j:])
			break
		}
		g, u := archsimd.LoadFloat32x8Slice(gate[j:j+8]), archsimd.LoadFloat32x8Slice(up[j:j+8])
		g.Div(one.Add(exp8(zero.Sub(g).Min(top)))).Mul(u).StoreSlice(out[j : j+8])
	}
	clearUpper8x2()
}

// swiGLUBackAVX2 is swiGLUBack on AVX2, the same operations on 8 lanes.
func swiGLUBackAVX2(gate, up, dAct []float32) {
	one, zero, top := archsimd.BroadcastFloat32x8(1), archsimd.Float32x8{}, archsimd.BroadcastFloat32x8(expArgMax)
	n := len(gate)
	up, dAct = up[:n], dAct[:n]
	for j := 0; j < n; j += 8 {
		part := j+8 > n
		var g, u, d archsimd.Float32x8
		if part {
			g, u, d = archsimd.LoadFloat32x8SlicePart(gate[j:]), archsimd.LoadFloat32x8SlicePart(up[j:]), archsimd.LoadFloat32x8SlicePart(dAct[j:])
		} else {
			g, u, d = archsimd.LoadFloat32x8Slice(gate[j:j+8]), archsimd.LoadFloat32x8Slice(up[j:j+8]), archsimd.LoadFloat32x8Slice(dAct[j:j+8])
		}
		s := one.Div(one.Add(exp8(zero.Sub(g).Min(top))))
		ds := d.Mul(s)
		dg := ds.Mul(u).Mul(one.Add(g.Mul(one.Sub(s))))
		du := ds.Mul(g)
		if part {
			dg.StoreSlicePart(gate[j:])
			du.StoreSlicePart(up[j:])
			break
		}
		dg.StoreSlice(gate[j : j+8])
		du.StoreSlice(up[j : j+8])
	}
	clearUpper8x2()
}

// exp8 is exp16 on 8 lanes (the body expSumAVX2 writes out).
func exp8(x archsimd.Float32x8) archsimd.Float32x8 {
	live := x.GreaterEqual(archsimd.BroadcastFloat32x8(-87.3))
	x = x.Max(archsimd.BroadcastFloat32x8(-87.3)).Min(archsimd.BroadcastFloat32x8(88.72))
	n := x.Mul(archsimd.BroadcastFloat32x8(1.44269504088896341)).RoundToEven()
	r := n.MulAdd(archsimd.BroadcastFloat32x8(-0.693359375), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x8(2.12194440e-4), r)
	p := archsimd.BroadcastFloat32x8(1.9875691500e-4)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.3981999507e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(8.3334519073e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(4.1665795894e-2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.6666665459e-1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r.Add(archsimd.BroadcastFloat32x8(1)))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x8(127)).ShiftAllLeft(23).AsFloat32x8()
	return p.Mul(pow).Masked(live)
}
