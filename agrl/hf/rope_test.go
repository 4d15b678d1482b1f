package hf

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

func TestRopeInvFreq(t *testing.T) {
	// head_dim 8, theta 10^4: 10^4^(-i/4) for i = 0, 2, 4, 6 → 1, 0.1, 0.01, 0.001.
	want := []float64{1, 0.1, 0.01, 0.001}
	got := RopeInvFreq(8, 10000)
	if len(got) != len(want) {
		t.Fatalf("RopeInvFreq(8, 1e4) = %v", got)
	}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("RopeInvFreq(8, 1e4)[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestLlama3InvFreq works one example through by hand. head_dim 8 and theta 10^4 give the
// frequencies 1, 0.1, 0.01, 0.001, whose wavelengths 2π/f are 6.28, 62.8, 628.3 and 6283.
// With L = 1024, LowFreqFactor 1 and HighFreqFactor 4 the band edges are 1024/4 = 256 and
// 1024/1 = 1024, so:
//
//	6.28, 62.8 < 256  → kept:            1, 0.1
//	256 ≤ 628.3 ≤ 1024 → interpolated:   t = (1024/628.3 − 1)/(4 − 1) = 0.2099155,
//	                                     0.01·((1−t)/8 + t) = 0.0030867610
//	6283 > 1024       → divided by 8:    0.001/8 = 0.000125
func TestLlama3InvFreq(t *testing.T) {
	s := RopeScaling{Type: Llama3Rope, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 1024}
	want := []float64{1, 0.1, 0.003086760967011274, 0.000125}
	got := Llama3InvFreq(8, 10000, s)
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("Llama3InvFreq[%d] = %.16g, want %.16g", i, got[i], want[i])
		}
	}
	// The same through a config.
	cfg := tiny(Llama, func(c *Config) { c.HeadDim, c.HiddenSize, c.NumAttentionHeads, c.RopeScaling = 8, 32, 4, s })
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.InvFreq(); !near(got[2], want[2]) || len(got) != 4 {
		t.Errorf("Config.InvFreq = %v", got)
	}
	cfg.RopeScaling = RopeScaling{}
	if got := cfg.InvFreq(); !near(got[3], 0.001) {
		t.Errorf("Config.InvFreq without scaling = %v", got)
	}
}

// TestLlama3InvFreqRealConfig checks Llama 3.2's scaling (head_dim 64, theta 5·10^5, factor
// 32, L 8192): the edges of the spectrum are kept and divided by 32, and the interpolated band
// lies between the two, so the frequencies still decrease.
func TestLlama3InvFreqRealConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(llama32Config))
	if err != nil {
		t.Fatal(err)
	}
	got, plain := cfg.InvFreq(), RopeInvFreq(64, 500000)
	if len(got) != 32 || got[0] != 1 || !near(got[31], plain[31]/32) {
		t.Fatalf("first %v, last %v (plain %v)", got[0], got[len(got)-1], plain[31])
	}
	kept, scaled, mixed := 0, 0, 0
	for i := range got {
		switch {
		case got[i] == plain[i]:
			kept++
		case near(got[i], plain[i]/32):
			scaled++
		default:
			mixed++
			if !(got[i] < plain[i] && got[i] > plain[i]/32) {
				t.Errorf("[%d] = %v, not between %v and %v", i, got[i], plain[i]/32, plain[i])
			}
		}
		if i > 0 && !(got[i] < got[i-1]) {
			t.Errorf("[%d] = %v does not decrease from %v", i, got[i], got[i-1])
		}
	}
	if kept == 0 || scaled == 0 || mixed == 0 {
		t.Errorf("kept %d, scaled %d, interpolated %d: want some of each", kept, scaled, mixed)
	}
}

// TestYarnInvFreq works one example through by hand. head_dim 8 and theta 10^4 give the
// frequencies 1, 0.1, 0.01, 0.001. With an original context L = 1024 the pair index at which a
// frequency turns r times over L is i(r) = 8·ln(1024/(2πr))/(2·ln 10^4): i(32) = 0.707 and
// i(1) = 2.212, rounded out to the band [0, 3]. The ramp i/3 goes 0, 1/3, 2/3, 1, so with
// factor 4:
//
//	pair 0: kept                         1
//	pair 1: 0.1·(2/3) + 0.025·(1/3)    = 0.075
//	pair 2: 0.01·(1/3) + 0.0025·(2/3)  = 0.005
//	pair 3: divided by 4                 0.00025
//
// Unrounded (NoTruncate) the band is [0.707, 2.212] and pair 1's ramp is
// (1 − 0.70698)/(2.21212 − 0.70698) = 0.19468, giving 0.1 − 0.075·0.19468 = 0.085399.
func TestYarnInvFreq(t *testing.T) {
	s := RopeScaling{Type: YarnRope, Factor: 4, OriginalMaxPositionEmbeddings: 1024}
	want := []float64{1, 0.075, 0.005, 0.00025}
	got := YarnInvFreq(8, 10000, s, 99999) // maxPos unused: L is given
	if len(got) != len(want) {
		t.Fatalf("YarnInvFreq = %v", got)
	}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("YarnInvFreq[%d] = %.16g, want %.16g", i, got[i], want[i])
		}
	}
	// No original context: max_position_embeddings stands in for it.
	if got := YarnInvFreq(8, 10000, RopeScaling{Type: YarnRope, Factor: 4}, 1024); !near(got[1], 0.075) {
		t.Errorf("with L from maxPos: %v", got)
	}
	s.NoTruncate = true
	got = YarnInvFreq(8, 10000, s, 0)
	if math.Abs(got[1]-0.085399) > 1e-6 || got[0] != 1 || !near(got[3], 0.00025) {
		t.Errorf("NoTruncate: %v", got)
	}
	// Betas so large that both ends of the band fall below pair 0: the low end is clamped to
	// 0 but the high end is not (as in transformers), the ramp is never positive, and every
	// frequency is kept.
	s = RopeScaling{Type: YarnRope, Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 1e9, BetaSlow: 1e8}
	for i, f := range YarnInvFreq(8, 10000, s, 0) {
		if want := RopeInvFreq(8, 10000)[i]; f != want {
			t.Errorf("betas past the spectrum: [%d] = %v, want %v", i, f, want)
		}
	}
}

// YaRN's attention factor: 1 + 0.1·ln(factor) by default (1.1386294 for factor 4, as Qwen's
// long-context configs use), 1 when the factor is 1, the given attention_factor, or DeepSeek's
// ratio (1 + 0.1·1·ln 40)/(1 + 0.1·0.5·ln 40) = 1.3688879/1.1844440 = 1.1557220.
func TestYarnAttentionFactor(t *testing.T) {
	for _, c := range []struct {
		s    RopeScaling
		want float64
	}{
		{RopeScaling{Factor: 4}, 1.1386294361119891},
		{RopeScaling{Factor: 1}, 1},
		{RopeScaling{Factor: 4, AttentionFactor: 0.9}, 0.9},
		{RopeScaling{Factor: 40, Mscale: 1, MscaleAllDim: 0.5}, 1.1557220},
		{RopeScaling{Factor: 40, Mscale: 1}, 1 + 0.1*math.Log(40)}, // one of the pair: the default
	} {
		if got := YarnAttentionFactor(c.s); math.Abs(got-c.want) > 1e-7 {
			t.Errorf("%+v: %.10g, want %.10g", c.s, got, c.want)
		}
	}
	cfg := tiny(Qwen2, func(c *Config) { c.RopeScaling = RopeScaling{Type: YarnRope, Factor: 4} })
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.RopeAttentionFactor(); !near(got, 1.1386294361119891) {
		t.Errorf("Config.RopeAttentionFactor = %v", got)
	}
	cfg.RopeScaling = RopeScaling{Type: LinearRope, Factor: 4}
	if got := cfg.RopeAttentionFactor(); got != 1 {
		t.Errorf("linear: attention factor %v, want 1", got)
	}
}

// Linear scaling divides every frequency by the factor.
func TestLinearInvFreq(t *testing.T) {
	cfg := tiny(Llama, func(c *Config) {
		c.HeadDim, c.HiddenSize, c.NumAttentionHeads = 8, 32, 4
		c.RopeTheta, c.RopeScaling = 10000, RopeScaling{Type: LinearRope, Factor: 2}
	})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, 0.05, 0.005, 0.0005}
	for i, f := range cfg.InvFreq() {
		if !near(f, want[i]) {
			t.Errorf("[%d] = %v, want %v", i, f, want[i])
		}
	}
}
