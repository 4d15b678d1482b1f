package agrl

import (
	"math"
	"slices"
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

// turnRubric scores 0.25 for every tool call (a per-turn component) and 1 for a correct answer.
func turnRubric() Rubric {
	return NewRubric().Add("answer", ExactAnswer, 1).
		AddTurn("call", func(ep *Episode, k int) float64 { return b2f(ep.Turns[k].Action.Kind == ToolCall) }, 0.25)
}

func TestTurnRewardsAndReturns(t *testing.T) {
	ep := &Episode{Turns: []Turn{{Action: Action{Kind: ToolCall}}, {Action: Action{Kind: ToolCall}}, {Action: Action{Kind: AnswerAction}}},
		Termination: Answered, Correct: true}
	r := turnRubric()
	if !r.HasTurnTerms() || NewRubric().Add("a", ExactAnswer, 1).HasTurnTerms() {
		t.Error("HasTurnTerms")
	}
	// The reward sums the turns: 1 + 0.25·2; the breakdown holds the turn component's sum.
	if reward, err := r.Score(ep); err != nil || reward != 1.5 || ep.Rewards[1].Value != 2 {
		t.Fatalf("Score = %v, %v, %+v", reward, err, ep.Rewards)
	}
	tr, err := r.TurnRewards(ep)
	if err != nil || !slices.Equal(tr, []float64{0.25, 0.25, 0}) {
		t.Fatalf("TurnRewards = %v, %v", tr, err)
	}
	// γ = 0.5, hand-computed: G_2 = 0 + 1 = 1; G_1 = 0.25 + 0.5·1 = 0.75; G_0 = 0.25 + 0.5·0.75 = 0.625.
	g, err := r.Returns(ep, 0.5)
	if err != nil || !slices.Equal(g, []float64{0.625, 0.75, 1}) {
		t.Fatalf("Returns(0.5) = %v, %v", g, err)
	}
	// γ = 1: G_0 is the reward.
	if g, _ := r.Returns(ep, 1); !slices.Equal(g, []float64{1.5, 1.25, 1}) {
		t.Errorf("Returns(1) = %v", g)
	}
	// Without per-turn components and γ = 1 every return is the reward.
	if g, _ := NewRubric().Add("answer", ExactAnswer, 1).Returns(ep, 1); !slices.Equal(g, []float64{1, 1, 1}) {
		t.Errorf("outcome-only returns %v", g)
	}
	if g, _ := r.Returns(&Episode{Correct: true}, 0.9); !slices.Equal(g, []float64{1}) {
		t.Errorf("no turns: %v", g)
	}
	for _, bad := range []float64{0, -0.5, 1.5, math.NaN()} {
		if _, err := r.Returns(ep, bad); err == nil {
			t.Errorf("γ = %v: no error", bad)
		}
	}
	nan := NewRubric().AddTurn("nan", func(*Episode, int) float64 { return math.NaN() }, 1)
	if _, err := nan.TurnRewards(ep); err == nil {
		t.Error("NaN turn reward: no error")
	}
	if err := NewRubric().AddTurn("nil", nil, 1).Validate(); err == nil {
		t.Error("nil turn function: no error")
	}
}

func TestGroupTurnAdvantages(t *testing.T) {
	// Whole returns 1 and 3 (mean 2, sample std √2): scale 1/(√2+ε).
	returns := [][]float64{{1, 0.5}, {3, 2, 1}, {5, 5}, {5}}
	adv, st, err := GroupTurnAdvantages(returns, 2, NormStd)
	if err != nil {
		t.Fatal(err)
	}
	s := 1 / (math.Sqrt2 + AdvantageEps)
	want := [][]float64{{-1 * s, -1.5 * s}, {1 * s, 0, -1 * s}, {0, 0}, {0}}
	for i := range want {
		for k := range want[i] {
			if math.Abs(adv[i][k]-want[i][k]) > 1e-12 {
				t.Errorf("A[%d][%d] = %v, want %v", i, k, adv[i][k], want[i][k])
			}
		}
	}
	if st.Groups != 2 || st.ZeroStd != 1 {
		t.Errorf("stats %+v", st)
	}
	// Equal returns at every turn: exactly GroupAdvantages' advantages at every turn.
	rewards := []float64{0.2, 1, 0.7, 0.7, 0, 1}
	flat, _, _ := GroupAdvantages(rewards, 3, NormStd)
	var rr [][]float64
	for _, r := range rewards {
		rr = append(rr, []float64{r, r, r})
	}
	turn, _, err := GroupTurnAdvantages(rr, 3, NormStd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rewards {
		for k := range 3 {
			if turn[i][k] != flat[i] {
				t.Errorf("episode %d turn %d: %v, GroupAdvantages %v", i, k, turn[i][k], flat[i])
			}
		}
	}
	if nn, _, _ := GroupTurnAdvantages([][]float64{{1, 0}, {3, 1}}, 2, NormNone); nn[0][1] != -2 || nn[1][1] != -1 {
		t.Errorf("NormNone: %v", nn)
	}
	if _, _, err := GroupTurnAdvantages([][]float64{{1}, {}}, 2, NormStd); err == nil {
		t.Error("empty returns: no error")
	}
	if _, _, err := GroupTurnAdvantages([][]float64{{1}, {math.Inf(1)}}, 2, NormStd); err == nil {
		t.Error("infinite return: no error")
	}
}

func TestTurnSpans(t *testing.T) {
	got := TurnSpans([]uint8{0, 0, 1, 1, 0, 0, 1, 0, 1, 1})
	if want := [][2]int{{2, 4}, {6, 7}, {8, 10}}; !slices.Equal(got, want) {
		t.Errorf("TurnSpans = %v, want %v", got, want)
	}
	if got := TurnSpans([]uint8{0, 0}); len(got) != 0 {
		t.Errorf("no policy tokens: %v", got)
	}
}
