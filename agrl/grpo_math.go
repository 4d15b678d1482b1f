package agrl

import (
	"errors"
	"fmt"
	"math"
)

// This file holds GRPO's arithmetic on plain Go numbers: group-relative advantages, the clipped
// surrogate, the KL estimators and the loss normalisations. The trainer computes the same
// quantities inside the model's graph; these host versions are the reference its tests and the
// "GRPO by hand" tutorial check against.

// AdvantageNorm selects how group-relative advantages are scaled.
type AdvantageNorm int

const (
	// NormStd divides by the group's standard deviation: A = (r − mean) / (std + ε), as in
	// DeepSeekMath's GRPO (TRL scale_rewards="group", verl norm_adv_by_std_in_grpo=True).
	NormStd AdvantageNorm = iota
	// NormNone only centres: A = r − mean, as in Dr. GRPO (Liu et al. 2025), which argues the std
	// division over-weights near-uniform groups (TRL scale_rewards="none",
	// verl norm_adv_by_std_in_grpo=False).
	NormNone
)

// String returns "std" or "none".
func (n AdvantageNorm) String() string {
	if n == NormNone {
		return "none"
	}
	return "std"
}

// AdvantageEps is the ε in (std + ε) of NormStd.
const AdvantageEps = 1e-6

// GroupStats describes the advantages of one batch of groups.
type GroupStats struct {
	// Groups is the number of groups; ZeroStd how many had all rewards equal (no signal).
	Groups, ZeroStd int
}

// FracZeroStd is the fraction of groups whose rewards were all equal (frac_reward_zero_std).
func (s GroupStats) FracZeroStd() float64 {
	if s.Groups == 0 {
		return 0
	}
	return float64(s.ZeroStd) / float64(s.Groups)
}

// GroupAdvantages computes the advantage of each reward. rewards holds consecutive groups of
// size group (G samples of the same task). With NormStd the standard deviation is the sample
// one (divides by G−1, as torch.std in TRL and verl). A group whose rewards are all equal gets
// advantage 0 for every sample and is counted in ZeroStd.
func GroupAdvantages(rewards []float64, group int, norm AdvantageNorm) ([]float64, GroupStats, error) {
	if group < 2 {
		return nil, GroupStats{}, fmt.Errorf("agrl: group size %d: GRPO needs at least 2 samples per task", group)
	}
	if len(rewards)%group != 0 {
		return nil, GroupStats{}, fmt.Errorf("agrl: %d rewards is not a whole number of groups of %d", len(rewards), group)
	}
	for i, r := range rewards {
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, GroupStats{}, fmt.Errorf("agrl: reward %d is %v", i, r)
		}
	}
	adv := make([]float64, len(rewards))
	stats := GroupStats{Groups: len(rewards) / group}
	for start := 0; start < len(rewards); start += group {
		mean, scale, allEqual := groupBaseline(rewards[start:start+group], norm)
		if allEqual {
			stats.ZeroStd++
			continue // advantages stay 0
		}
		for i, r := range rewards[start : start+group] {
			adv[start+i] = (r - mean) * scale
		}
	}
	return adv, stats, nil
}

// groupBaseline returns a group's mean reward, the scale of its advantages (1/(sample std +
// AdvantageEps) with NormStd, else 1) and whether its rewards are all equal.
func groupBaseline(g []float64, norm AdvantageNorm) (mean, scale float64, allEqual bool) {
	allEqual = true
	for _, r := range g {
		mean += r
		allEqual = allEqual && r == g[0]
	}
	mean /= float64(len(g))
	scale = 1
	if norm == NormStd && !allEqual {
		v := 0.0
		for _, r := range g {
			v += (r - mean) * (r - mean)
		}
		scale = 1 / (math.Sqrt(v/float64(len(g)-1)) + AdvantageEps)
	}
	return mean, scale, allEqual
}

// KLEstimator selects the per-token estimate of KL(π_θ ‖ π_ref) from the two log-probs.
type KLEstimator int

const (
	// K3 is exp(Δ) − Δ − 1 with Δ = log π_ref − log π_θ: unbiased and never negative (Schulman,
	// "Approximating KL divergence"; TRL and verl's "low_var_kl").
	K3 KLEstimator = iota
	// K1 is −Δ = log π_θ − log π_ref: unbiased but can be negative per token (verl "kl").
	K1
)

// String returns "k3" or "k1".
func (k KLEstimator) String() string {
	if k == K1 {
		return "k1"
	}
	return "k3"
}

// KLDeltaClamp bounds Δ = log π_ref − log π_θ before the exponential of K3 (verl clamps to ±20).
const KLDeltaClamp = 20

// TokenKL is the per-token KL estimate from the log-probs under the policy and the reference.
func TokenKL(k KLEstimator, logp, refLogp float64) float64 {
	d := math.Max(-KLDeltaClamp, math.Min(KLDeltaClamp, refLogp-logp))
	if k == K1 {
		return -d
	}
	return math.Exp(d) - d - 1
}

// ClippedSurrogate is the per-token PPO/GRPO objective term to maximise:
// min(ρ·A, clip(ρ, 1−εlow, 1+εhigh)·A) with ρ = exp(logp − oldLogp). It also reports whether
// the clip was active on the low side (ρ < 1−εlow with A < 0) or the high side
// (ρ > 1+εhigh with A > 0). εhigh > εlow is DAPO's "clip-higher" (DAPO recommends 0.28).
func ClippedSurrogate(logp, oldLogp, adv, epsLow, epsHigh float64) (obj float64, clippedLow, clippedHigh bool) {
	ratio := math.Exp(logp - oldLogp)
	clipped := math.Max(1-epsLow, math.Min(1+epsHigh, ratio))
	obj = math.Min(ratio*adv, clipped*adv)
	return obj, adv < 0 && ratio < 1-epsLow, adv > 0 && ratio > 1+epsHigh
}

// LossNorm selects how per-token losses are averaged into the batch loss.
type LossNorm int

const (
	// TokenMean divides the sum over every policy token of the batch by the number of policy
	// tokens in the whole batch (DAPO; TRL loss_type="dapo", verl loss_agg_mode="token-mean").
	TokenMean LossNorm = iota
	// SeqMean averages tokens within each sequence, then averages over every sequence of the
	// batch (the original GRPO; TRL loss_type="grpo", verl "seq-mean-token-mean"). A sequence
	// with no policy tokens in the loss (for instance one left out by MaskTruncated) adds 0 but
	// still counts in the number of sequences, as in TRL.
	SeqMean
	// ConstNorm divides the sum over every policy token by sequences × a constant length (the
	// episode token budget), as in Dr. GRPO (TRL loss_type="dr_grpo", verl
	// "seq-mean-token-sum-norm").
	ConstNorm
)

// String returns "token-mean", "seq-mean" or "dr-grpo".
func (n LossNorm) String() string {
	switch n {
	case SeqMean:
		return "seq-mean"
	case ConstNorm:
		return "dr-grpo"
	}
	return "token-mean"
}

// NormalizeLoss reduces per-token losses to the batch loss. tokenLoss[i] and mask[i] are the
// i-th sequence's per-token losses and loss mask (1 on policy tokens); constLen is ConstNorm's
// constant. Masked-out tokens never count, neither in the sum nor in the token count. The
// number of sequences (SeqMean, ConstNorm) is len(tokenLoss), fully masked sequences included:
// the trainer's graph loss divides the same way, and so does TRL.
func NormalizeLoss(norm LossNorm, tokenLoss [][]float64, mask [][]uint8, constLen int) (float64, error) {
	if len(tokenLoss) != len(mask) {
		return 0, errors.New("agrl: losses and masks differ in length")
	}
	total, tokens, seqSum := 0.0, 0, 0.0
	for i := range tokenLoss {
		if len(tokenLoss[i]) != len(mask[i]) {
			return 0, fmt.Errorf("agrl: sequence %d: %d losses, %d mask entries", i, len(tokenLoss[i]), len(mask[i]))
		}
		s, n := 0.0, 0
		for j, l := range tokenLoss[i] {
			if mask[i][j] != 0 {
				s += l
				n++
			}
		}
		total += s
		tokens += n
		if n > 0 {
			seqSum += s / float64(n)
		}
	}
	switch norm {
	case SeqMean:
		if len(tokenLoss) == 0 {
			return 0, nil
		}
		return seqSum / float64(len(tokenLoss)), nil
	case ConstNorm:
		if constLen <= 0 {
			return 0, fmt.Errorf("agrl: dr-grpo normalisation needs a positive constant length, got %d", constLen)
		}
		if len(tokenLoss) == 0 {
			return 0, nil
		}
		return total / float64(len(tokenLoss)*constLen), nil
	default:
		if tokens == 0 {
			return 0, nil
		}
		return total / float64(tokens), nil
	}
}

// GroupTurnAdvantages is GroupAdvantages with turn-level credit: returns[i] holds episode i's
// returns from each of its turns (Rubric.Returns), and turn k of episode i gets the advantage
//
//	A_{i,k} = (G_{i,k} − mean_j G_{j,0}) · scale
//
// with the group's baseline and scale (1/(sample std + AdvantageEps) with NormStd) taken from the
// episodes' whole returns G_{j,0}, exactly as GroupAdvantages takes them from the rewards. When
// every return is the episode's reward (no per-turn rewards, γ = 1) it equals GroupAdvantages
// at every turn. A group whose whole returns are all equal gets 0 at every turn and is counted
// in ZeroStd. It is an error for an episode to have no return.
func GroupTurnAdvantages(returns [][]float64, group int, norm AdvantageNorm) ([][]float64, GroupStats, error) {
	whole := make([]float64, len(returns))
	for i, g := range returns {
		if len(g) == 0 {
			return nil, GroupStats{}, fmt.Errorf("agrl: episode %d has no return", i)
		}
		for k, v := range g {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, GroupStats{}, fmt.Errorf("agrl: return %d of episode %d is %v", k, i, v)
			}
		}
		whole[i] = g[0]
	}
	if group < 2 || len(returns)%group != 0 {
		_, stats, err := GroupAdvantages(whole, group, norm) // the same checks and errors
		return nil, stats, err
	}
	out := make([][]float64, len(returns))
	stats := GroupStats{Groups: len(returns) / group}
	for start := 0; start < len(returns); start += group {
		mean, scale, allEqual := groupBaseline(whole[start:start+group], norm)
		if allEqual {
			stats.ZeroStd++
		}
		for i := start; i < start+group; i++ {
			out[i] = make([]float64, len(returns[i]))
			if allEqual {
				continue
			}
			for k, g := range returns[i] {
				out[i][k] = (g - mean) * scale
			}
		}
	}
	return out, stats, nil
}

// TurnSpans returns the [start, end) token ranges of the policy's turns in an episode's loss
// mask: its maximal runs of 1s, in order (the sampler writes each action as one run, and
// every observation between two actions is masked out).
func TurnSpans(mask []uint8) [][2]int {
	var spans [][2]int
	for i := 0; i < len(mask); {
		if mask[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(mask) && mask[j] != 0 {
			j++
		}
		spans = append(spans, [2]int{i, j})
		i = j
	}
	return spans
}
