package agrl

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-5 }

func TestGroupAdvantagesHandComputed(t *testing.T) {
	// Group 1: [1 0 0 1]: mean 0.5, sample std sqrt(1/3) = 0.57735 -> ±0.866025.
	// Group 2: all equal -> 0, counted. Group 3: [0.5 -0.5 ...] below.
	rewards := []float64{1, 0, 0, 1, 0.7, 0.7, 0.7, 0.7}
	adv, stats, err := GroupAdvantages(rewards, 4, NormStd)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.866025, -0.866025, -0.866025, 0.866025, 0, 0, 0, 0}
	for i := range want {
		if !near(adv[i], want[i]) {
			t.Errorf("adv[%d] = %v, want %v", i, adv[i], want[i])
		}
	}
	if stats.Groups != 2 || stats.ZeroStd != 1 || stats.FracZeroStd() != 0.5 {
		t.Errorf("stats %+v", stats)
	}
	// Dr. GRPO: centring only. [1 0 0 0]: mean 0.25.
	adv, _, err = GroupAdvantages([]float64{1, 0, 0, 0}, 4, NormNone)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []float64{0.75, -0.25, -0.25, -0.25} {
		if !near(adv[i], w) {
			t.Errorf("dr-grpo adv[%d] = %v, want %v", i, adv[i], w)
		}
	}
	// G=2 [0.5 -0.5]: std (sample) = 0.707107 -> ±0.707107.
	adv, _, _ = GroupAdvantages([]float64{0.5, -0.5}, 2, NormStd)
	if !near(adv[0], 0.707107) || !near(adv[1], -0.707107) {
		t.Errorf("G=2: %v", adv)
	}
}

func TestGroupAdvantagesErrors(t *testing.T) {
	if _, _, err := GroupAdvantages([]float64{1, 2, 3}, 2, NormStd); err == nil {
		t.Error("ragged groups")
	}
	if _, _, err := GroupAdvantages([]float64{1}, 1, NormStd); err == nil {
		t.Error("group of 1")
	}
	if _, _, err := GroupAdvantages([]float64{1, math.NaN()}, 2, NormStd); err == nil {
		t.Error("NaN reward")
	}
}

func TestTokenKL(t *testing.T) {
	// Δ = ref − logp = −0.5: k3 = e^−0.5 + 0.5 − 1 = 0.106531; k1 = 0.5.
	if got := TokenKL(K3, -1, -1.5); !near(got, 0.106531) {
		t.Errorf("k3 = %v", got)
	}
	if got := TokenKL(K1, -1, -1.5); !near(got, 0.5) {
		t.Errorf("k1 = %v", got)
	}
	if TokenKL(K3, -2, -2) != 0 || TokenKL(K1, -2, -2) != 0 {
		t.Error("KL of identical policies must be 0")
	}
	// k3 is never negative; k1 can be. Δ is clamped at ±20 so k3 stays finite.
	if TokenKL(K3, -1, -0.2) < 0 || TokenKL(K1, -1, -0.2) >= 0 {
		t.Error("signs")
	}
	if got := TokenKL(K3, -1000, 0); !near(got, math.Exp(20)-21) {
		t.Errorf("clamp: %v", got)
	}
}

func TestClippedSurrogate(t *testing.T) {
	e := math.Exp
	cases := []struct {
		logp, old, adv, lo, hi float64
		obj                    float64
		low, high              bool
	}{
		{0, -0.5, 1, 0.2, 0.28, 1.28, false, true},      // ratio 1.6487 > 1.28 with A>0: clipped high
		{0, -0.5, -1, 0.2, 0.28, -e(0.5), false, false}, // A<0 and ratio high: the pessimistic unclipped term
		{-1, 0, -1, 0.2, 0.2, -0.8, true, false},        // ratio 0.3679 < 0.8 with A<0: clipped low
		{-1, 0, 1, 0.2, 0.2, e(-1), false, false},       // A>0, ratio low: unclipped
		{-0.3, -0.3, 2, 0.2, 0.2, 2, false, false},      // ratio exactly 1
		{0.1, 0, 0.5, 0.2, 0.2, 0.5 * e(0.1), false, false},
	}
	for i, c := range cases {
		obj, low, high := ClippedSurrogate(c.logp, c.old, c.adv, c.lo, c.hi)
		if !near(obj, c.obj) || low != c.low || high != c.high {
			t.Errorf("case %d: got %v %v %v, want %v %v %v", i, obj, low, high, c.obj, c.low, c.high)
		}
	}
}

func TestNormalizeLoss(t *testing.T) {
	loss := [][]float64{{1, 2, 3}, {4}}
	mask := [][]uint8{{0, 1, 1}, {1}}
	for norm, want := range map[LossNorm]float64{TokenMean: 3, SeqMean: 3.25, ConstNorm: 0.45} {
		got, err := NormalizeLoss(norm, loss, mask, 10)
		if err != nil || !near(got, want) {
			t.Errorf("%s: %v %v, want %v", norm, got, err, want)
		}
	}
	if _, err := NormalizeLoss(ConstNorm, loss, mask, 0); err == nil {
		t.Error("dr-grpo without constant")
	}
	if _, err := NormalizeLoss(TokenMean, loss, mask[:1], 1); err == nil {
		t.Error("length mismatch")
	}
	if got, _ := NormalizeLoss(TokenMean, [][]float64{{5}}, [][]uint8{{0}}, 1); got != 0 {
		t.Error("no policy tokens -> 0")
	}
}

// TestNormalizeLossFullyMaskedSequence: a sequence with no policy token adds nothing to the sum
// but counts as a sequence in SeqMean and ConstNorm (as the trainer's graph loss and TRL do),
// and is invisible to TokenMean.
func TestNormalizeLossFullyMaskedSequence(t *testing.T) {
	loss := [][]float64{{1, 2, 3}, {4}, {9, 9}}
	mask := [][]uint8{{0, 1, 1}, {1}, {0, 0}}
	// Token sum 2+3+4 = 9 over 3 policy tokens: 3.
	// Sequence means 2.5, 4 and (nothing) 0 over 3 sequences: 6.5/3 = 2.166667 (not 6.5/2 = 3.25).
	// Dr. GRPO: 9 / (3 sequences × 10) = 0.3.
	for norm, want := range map[LossNorm]float64{TokenMean: 3, SeqMean: 6.5 / 3, ConstNorm: 0.3} {
		got, err := NormalizeLoss(norm, loss, mask, 10)
		if err != nil || !near(got, want) {
			t.Errorf("%s: %v %v, want %v", norm, got, err, want)
		}
	}
	// Only masked sequences: 0 for every normalisation.
	for _, norm := range []LossNorm{TokenMean, SeqMean, ConstNorm} {
		if got, err := NormalizeLoss(norm, [][]float64{{7}, {8}}, [][]uint8{{0}, {0}}, 10); err != nil || got != 0 {
			t.Errorf("%s of masked sequences: %v %v", norm, got, err)
		}
	}
}
