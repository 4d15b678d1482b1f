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
