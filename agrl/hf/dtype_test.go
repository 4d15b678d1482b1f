package hf

import (
	"math"
	"testing"
)

func f32(bits uint32) float32 { return math.Float32frombits(bits) }

func TestFloat32ToBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32 // float32 bits
		want uint16
		why  string
	}{
		{0x3F800000, 0x3F80, "1"},
		{0xC0000000, 0xC000, "-2"},
		{0x00000000, 0x0000, "+0"},
		{0x80000000, 0x8000, "-0"},
		{0x40490FDB, 0x4049, "pi: low half 0x0FDB < 0x8000 rounds down (3.140625)"},
		{0x3EAAAAAB, 0x3EAB, "1/3: low half 0xAAAB > 0x8000 rounds up"},
		{0x3F808000, 0x3F80, "1+2^-8: a tie, kept bit even, rounds down"},
		{0x3F818000, 0x3F82, "1+3·2^-8: a tie, kept bit odd, rounds up"},
		{0x3F808001, 0x3F81, "just past the tie rounds up"},
		{0x3F7FFFFF, 0x3F80, "just below 1 carries into the exponent"},
		{0x7F7FFFFF, 0x7F80, "max float32 rounds to +Inf"},
		{0x7F7F7FFF, 0x7F7F, "just below the last tie stays the max bfloat16"},
		{0x7F800000, 0x7F80, "+Inf"},
		{0xFF800000, 0xFF80, "-Inf"},
		{0x00000001, 0x0000, "smallest float32 subnormal rounds to 0"},
		{0x00018000, 0x0002, "subnormal tie rounds to even"},
		{0x7FC00000, 0x7FC0, "quiet NaN"},
		{0x7F800001, 0x7FC0, "signalling NaN whose payload truncates away stays NaN, not Inf"},
		{0xFF812345, 0xFFC1, "negative NaN keeps sign and top payload bits"},
	} {
		if got := Float32ToBF16(f32(c.in)); got != c.want {
			t.Errorf("Float32ToBF16(%#08x) = %#04x, want %#04x (%s)", c.in, got, c.want, c.why)
		}
	}
}

func TestBF16ToFloat32(t *testing.T) {
	for _, c := range []struct {
		in   uint16
		want float32
	}{
		{0x3F80, 1},
		{0xC000, -2},
		{0x4049, 3.140625},
		{0x7F7F, 0x1.FEp127},
		{0x0001, 0x1p-133}, // smallest bfloat16 subnormal
		{0x0080, 0x1p-126}, // smallest normal
		{0x7F80, float32(math.Inf(1))},
		{0xFF80, float32(math.Inf(-1))},
	} {
		if got := BF16ToFloat32(c.in); got != c.want {
			t.Errorf("BF16ToFloat32(%#04x) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := BF16ToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("BF16ToFloat32(0x8000) = %g, want -0", got)
	}
	if got := math.Float32bits(BF16ToFloat32(0x7FC1)); got != 0x7FC10000 {
		t.Errorf("BF16ToFloat32(0x7FC1) bits = %#08x, want the NaN payload kept", got)
	}
}

func TestF16ToFloat32(t *testing.T) {
	for _, c := range []struct {
		in   uint16
		want float32
	}{
		{0x3C00, 1},
		{0xC000, -2},
		{0x3555, 0x1.554p-2}, // 0.333251953125, the half nearest 1/3
		{0x7BFF, 65504},      // largest half
		{0x0400, 0x1p-14},    // smallest normal
		{0x0001, 0x1p-24},    // smallest subnormal: 5.9604645e-08
		{0x0002, 0x1p-23},
		{0x03FF, 1023 * 0x1p-24}, // largest subnormal: 6.0975552e-05
		{0x8001, -0x1p-24},
		{0x7C00, float32(math.Inf(1))},
		{0xFC00, float32(math.Inf(-1))},
	} {
		if got := F16ToFloat32(c.in); got != c.want {
			t.Errorf("F16ToFloat32(%#04x) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := F16ToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToFloat32(0x8000) = %g, want -0", got)
	}
	if got := math.Float32bits(F16ToFloat32(0x7E01)); got != 0x7FC02000 {
		t.Errorf("F16ToFloat32(0x7E01) bits = %#08x, want 0x7fc02000 (NaN, payload kept)", got)
	}
}

func TestFloat32ToF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
		why  string
	}{
		{1, 0x3C00, "1"},
		{-2, 0xC000, "-2"},
		{65504, 0x7BFF, "largest half"},
		{65519, 0x7BFF, "below the midpoint to 65536"},
		{65520, 0x7C00, "the midpoint to 65536 ties to even: Inf"},
		{1e6, 0x7C00, "overflow"},
		{0x1p-24, 0x0001, "smallest subnormal"},
		{0x1p-25, 0x0000, "half the smallest subnormal ties to even: 0"},
		{0x1.000002p-25, 0x0001, "just past that rounds up"},
		{3 * 0x1p-25, 0x0002, "1.5 units ties to even: 2"},
		{1e-8, 0x0000, "far below: 0"},
		{1023.5 * 0x1p-24, 0x0400, "the largest subnormal's upper midpoint rounds to the smallest normal"},
		{1 + 0x1p-11, 0x3C00, "1 + half an ulp ties to even"},
		{1 + 3*0x1p-11, 0x3C02, "1 + 1.5 ulp ties to even"},
		{float32(math.Inf(-1)), 0xFC00, "-Inf"},
		{f32(0x7F800001), 0x7E00, "signalling NaN stays NaN, quieted"},
		{f32(0xFFC02000), 0xFE01, "negative NaN keeps sign and top payload"},
	} {
		if got := Float32ToF16(c.in); got != c.want {
			t.Errorf("Float32ToF16(%g) = %#04x, want %#04x (%s)", c.in, got, c.want, c.why)
		}
	}
}

// TestHalfRoundingExhaustive checks every half-precision and bfloat16 value: converting to
// float32 and back is the identity, and the midpoint of each pair of neighbours rounds to the
// even one while the float32s on either side of it round to the nearer one.
func TestHalfRoundingExhaustive(t *testing.T) {
	for _, k := range []struct {
		name    string
		toF32   func(uint16) float32
		fromF32 func(float32) uint16
		maxBits uint16 // the largest finite positive value
	}{
		{"F16", F16ToFloat32, Float32ToF16, 0x7BFF},
		{"BF16", BF16ToFloat32, Float32ToBF16, 0x7F7F},
	} {
		for h := range 1 << 16 {
			h := uint16(h)
			f := k.toF32(h)
			got := k.fromF32(f)
			if f != f {
				if g := k.toF32(got); g == g || math.Signbit(float64(g)) != math.Signbit(float64(f)) {
					t.Fatalf("%s: NaN %#04x came back as %#04x", k.name, h, got)
				}
				continue
			}
			if got != h {
				t.Fatalf("%s: %#04x -> %g -> %#04x", k.name, h, f, got)
			}
		}
		for h := uint16(0); h <= k.maxBits; h++ {
			lo, hi := float64(k.toF32(h)), float64(k.toF32(h+1)) // h+1 past maxBits is +Inf
			if h == k.maxBits {
				hi = 2*lo - float64(k.toF32(h-1)) // where the next value would be
			}
			mid := float32((lo + hi) / 2) // exact: one bit more than the narrow type holds
			even := h
			if h&1 == 1 {
				even = h + 1
			}
			for _, sign := range []float32{1, -1} {
				sb := uint16(0)
				if sign < 0 {
					sb = 0x8000
				}
				if got := k.fromF32(sign * mid); got != even|sb {
					t.Fatalf("%s: midpoint %g of %#04x and %#04x -> %#04x, want %#04x", k.name, sign*mid, h, h+1, got, even|sb)
				}
				below := math.Nextafter32(mid, 0)
				if got := k.fromF32(sign * below); got != h|sb {
					t.Fatalf("%s: %g just below a midpoint -> %#04x, want %#04x", k.name, sign*below, got, h|sb)
				}
				above := math.Nextafter32(mid, float32(math.Inf(1)))
				if got := k.fromF32(sign * above); got != (h+1)|sb {
					t.Fatalf("%s: %g just above a midpoint -> %#04x, want %#04x", k.name, sign*above, got, (h+1)|sb)
				}
			}
		}
	}
}

func TestDTypeSize(t *testing.T) {
	for d, want := range map[DType]int{BOOL: 1, U8: 1, F8E4M3: 1, F16: 2, BF16: 2, I32: 4, F32: 4, F64: 8, I64: 8, C64: 8, "F4": 0, "f32": 0, "": 0} {
		if got := d.Size(); got != want {
			t.Errorf("%q.Size() = %d, want %d", d, got, want)
		}
	}
}
