package hf

import (
	"fmt"
	"math"
	"strings"
)

// A DType is a safetensors element type, spelled as in the file header ("F32", "BF16", ...).
type DType string

// The element types this package knows, in the order of the reference implementation's
// Dtype enum (increasing alignment). Each takes a whole number of bytes; the sub-byte types of
// newer safetensors versions (F4, F6_E2M3, F6_E3M2) are rejected as unknown.
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	F8E8M0 DType = "F8_E8M0"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	C64    DType = "C64" // complex: two F32
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// dtypes lists the known types in the order above, with their sizes in bytes.
var dtypes = []struct {
	d    DType
	size int
}{
	{BOOL, 1}, {U8, 1}, {I8, 1}, {F8E5M2, 1}, {F8E4M3, 1}, {F8E8M0, 1},
	{I16, 2}, {U16, 2}, {F16, 2}, {BF16, 2},
	{I32, 4}, {U32, 4}, {F32, 4},
	{C64, 8}, {F64, 8}, {I64, 8}, {U64, 8},
}

// rank is a DType's position in dtypes, plus one (0: unknown).
func (d DType) rank() int {
	for i, e := range dtypes {
		if e.d == d {
			return i + 1
		}
	}
	return 0
}

// Size is the number of bytes of one element, or 0 for a DType this package does not know.
func (d DType) Size() int {
	if r := d.rank(); r > 0 {
		return dtypes[r-1].size
	}
	return 0
}

// Known reports whether the package knows d.
func (d DType) Known() bool { return d.Size() > 0 }

// Float reports whether Float32s can read tensors of type d: F32, F16 or BF16.
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 }

func checkDType(d DType) error {
	if !d.Known() {
		names := make([]string, len(dtypes))
		for i, e := range dtypes {
			names[i] = string(e.d)
		}
		return fmt.Errorf("unknown dtype %q (known: %s)", string(d), strings.Join(names, " "))
	}
	return nil
}

// BF16ToFloat32 returns the value of the bfloat16 with bits b. Every bfloat16 is exactly a
// float32 (the top half of its bits), so the conversion is exact, NaN payloads included.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even, as PyTorch's
// tensor.to(torch.bfloat16) does. Values past the largest bfloat16 round to ±Inf; a NaN stays a
// NaN of the same sign (quieted, keeping the top of its payload).
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x0040 // quiet bit: truncation alone could turn a NaN into Inf
	}
	// Adding 0x7FFF plus the lowest kept bit rounds half to even; the carry may run into
	// the exponent, which is what rounding up to the next binade (or to Inf) needs.
	b += 0x7FFF + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 returns the value of the IEEE 754 half-precision float with bits h. Every
// half is exactly a float32, so the conversion is exact: subnormals, ±0, ±Inf and NaN payloads
// included.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h & 0x3FF)
	switch exp {
	case 0: // zero or subnormal: mant × 2^-24, exact in float32
		f := float32(mant) * 0x1p-24
		return math.Float32frombits(sign | math.Float32bits(f))
	case 0x1F: // Inf or NaN
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	}
	// Normal: rebias the exponent from 15 to 127.
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Float32ToF16 rounds f to the nearest IEEE 754 half-precision float, ties to even. Values from
// 65520 up round to ±Inf, values up to 2^-25 round to ±0, and those between become subnormals;
// a NaN stays a NaN of the same sign (quieted, keeping the top of its payload).
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xFF
	mant := b & 0x7FFFFF
	if exp == 0xFF {
		if mant == 0 {
			return sign | 0x7C00
		}
		return sign | 0x7C00 | 0x0200 | uint16(mant>>13)
	}
	e := exp - 127 + 15 // the half's biased exponent
	switch {
	case e >= 0x1F:
		return sign | 0x7C00
	case e <= 0:
		// A half subnormal counts units of 2^-24. f is (mant|1<<23) × 2^(exp-150), so the
		// count is that significand shifted right by 126-exp = 14-e bits (14 to 24 here;
		// below that f is under half the smallest subnormal and rounds to zero).
		if e < -10 {
			return sign
		}
		return sign | uint16(roundShift(mant|0x800000, uint(14-e)))
	}
	// Normal: keep 10 mantissa bits. A carry out of the mantissa bumps the exponent, up to
	// 0x7C00 (Inf), which is the right answer for values that round past 65504.
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundShift returns x >> s rounded to the nearest integer, ties to even (1 <= s <= 31).
func roundShift(x uint32, s uint) uint32 {
	q := x >> s
	rem := x & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}
