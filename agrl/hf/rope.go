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

// InvFreq returns the RoPE inverse frequencies of c: HeadDim/2 values from RopeTheta, scaled
// as RopeScaling says. c should be valid (see Validate).
func (c Config) InvFreq() []float64 {
	if c.RopeScaling.Type == Llama3Rope {
		return Llama3InvFreq(c.HeadDim, c.RopeTheta, c.RopeScaling)
	}
	return RopeInvFreq(c.HeadDim, c.RopeTheta)
}
