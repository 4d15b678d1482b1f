package hf

import "math"

// RopeInvFreq returns plain RoPE's inverse frequencies for heads of headDim dimensions:
// headDim/2 values theta^(-2i/headDim), i = 0, 1, ...; dimension pair i of a head turns by
// position·inv[i] radians.
//
// It computes in float64; transformers computes the same formula in float32, so its values
// differ from these by up to a few float32 ulps.
func RopeInvFreq(headDim int, theta float64) []float64 {
	inv := make([]float64, headDim/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(headDim))
	}
	return inv
}

// Llama3InvFreq returns RoPE's inverse frequencies rescaled as Llama 3.1 does for long
// contexts (s.Type is not consulted). With wavelength λ = 2π/inv[i] and L =
// s.OriginalMaxPositionEmbeddings:
//
//   - λ < L/HighFreqFactor (high frequencies, short wavelengths): kept;
//   - λ > L/LowFreqFactor (low frequencies): divided by Factor;
//   - in between: interpolated, inv·((1−t)/Factor + t) with t = (L/λ − LowFreqFactor) /
//     (HighFreqFactor − LowFreqFactor), which is 0 at the low edge and 1 at the high one.
//
// This is the formula of Meta's Llama 3.1 reference code and of transformers' rope_type
// "llama3". s must be valid (Factor and LowFreqFactor positive, HighFreqFactor above
// LowFreqFactor), as ParseConfig ensures.
func Llama3InvFreq(headDim int, theta float64, s RopeScaling) []float64 {
	inv := RopeInvFreq(headDim, theta)
	L := float64(s.OriginalMaxPositionEmbeddings)
	lowFreqWavelen := L / s.LowFreqFactor
	highFreqWavelen := L / s.HighFreqFactor
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen < highFreqWavelen:
		case wavelen > lowFreqWavelen:
			inv[i] = f / s.Factor
		default:
			t := (L/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			inv[i] = (1-t)*f/s.Factor + t*f
		}
	}
	return inv
}

// YarnInvFreq returns RoPE's inverse frequencies as YaRN ("Yet another RoPE extensioN",
// Peng et al. 2023) rescales them, with transformers' rope_type "yarn" conventions. Let L be
// s.OriginalMaxPositionEmbeddings (maxPos when 0) and d = headDim. Frequency pair i turns
// L·inv[i]/2π times over the original context; the pairs that turn more than BetaFast times
// (default 32) are kept, those that turn fewer than BetaSlow times (default 1) are divided by
// Factor, and the pairs between are blended linearly in i. The band's ends are the real
// pair indices where those rotation counts are met,
//
//	i(r) = d·ln(L / (2π·r)) / (2·ln theta),
//
// low = i(BetaFast) rounded down and high = i(BetaSlow) rounded up (not rounded when
// NoTruncate), low raised to 0 if below and high lowered to d−1 if above (as in transformers:
// neither is clamped on its other side); then with ramp(i) = clamp((i − low)/(high − low), 0, 1)
// (high nudged by 0.001 if equal to low),
//
//	inv[i] = plain[i]·(1 − ramp(i)) + plain[i]/Factor·ramp(i).
//
// YaRN also scales attention: see YarnAttentionFactor. s must be valid.
func YarnInvFreq(headDim int, theta float64, s RopeScaling, maxPos int) []float64 {
	inv := RopeInvFreq(headDim, theta)
	L := float64(s.OriginalMaxPositionEmbeddings)
	if L == 0 {
		L = float64(maxPos)
	}
	d := float64(headDim)
	pair := func(rotations float64) float64 {
		return d * math.Log(L/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	fast, slow := s.betas()
	low, high := pair(fast), pair(slow)
	if !s.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, d-1)
	if low == high {
		high += 0.001
	}
	for i, f := range inv {
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		inv[i] = f*(1-ramp) + f/s.Factor*ramp
	}
	return inv
}

// betas returns YaRN's BetaFast and BetaSlow, 32 and 1 where zero (unset).
func (s RopeScaling) betas() (fast, slow float64) {
	fast, slow = s.BetaFast, s.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	return fast, slow
}

// YarnAttentionFactor returns the factor YaRN multiplies RoPE's cos and sin by (so the
// attention logits by its square): s.AttentionFactor if set; otherwise, with
// m(k) = 1 + 0.1·k·ln(Factor) (1 when Factor ≤ 1), m(Mscale)/m(MscaleAllDim) when both are
// non-zero and m(1) when not: 1 + 0.1·ln 4 = 1.1386 for Qwen's factor 4.
func YarnAttentionFactor(s RopeScaling) float64 {
	if s.AttentionFactor != 0 {
		return s.AttentionFactor
	}
	m := func(k float64) float64 {
		if s.Factor <= 1 {
			return 1
		}
		return 1 + 0.1*k*math.Log(s.Factor)
	}
	if s.Mscale != 0 && s.MscaleAllDim != 0 {
		return m(s.Mscale) / m(s.MscaleAllDim)
	}
	return m(1)
}

// InvFreq returns the RoPE inverse frequencies of c: HeadDim/2 values from RopeTheta, scaled
// as RopeScaling says. c should be valid (see Validate).
func (c Config) InvFreq() []float64 {
	switch c.RopeScaling.Type {
	case Llama3Rope:
		return Llama3InvFreq(c.HeadDim, c.RopeTheta, c.RopeScaling)
	case YarnRope:
		return YarnInvFreq(c.HeadDim, c.RopeTheta, c.RopeScaling, c.MaxPositionEmbeddings)
	case LinearRope:
		inv := RopeInvFreq(c.HeadDim, c.RopeTheta)
		for i := range inv {
			inv[i] /= c.RopeScaling.Factor
		}
		return inv
	}
	return RopeInvFreq(c.HeadDim, c.RopeTheta)
}

// RopeAttentionFactor returns the factor c's RoPE multiplies cos and sin by: 1 except under
// YaRN (YarnAttentionFactor). Queries and keys are both rotated, so attention logits grow by
// its square.
func (c Config) RopeAttentionFactor() float64 {
	if c.RopeScaling.Type == YarnRope {
		return YarnAttentionFactor(c.RopeScaling)
	}
	return 1
}
