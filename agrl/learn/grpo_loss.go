package learn

import (
	"agrl.dev/agrl"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
)

// The per-token values a GRPO batch carries (see TrainBatch): all aligned with Episode.Tokens.
const (
	valMask    = "mask"     // 1 on policy tokens in the loss, else 0
	valAdv     = "adv"      // the episode's advantage on its policy tokens
	valOldLogp = "old_logp" // log-probs recorded when the tokens were sampled
	valRefLogp = "ref_logp" // log-probs under the frozen reference policy (0 when KL is 0)
	valWeight  = "weight"   // the loss normalisation (see LossNorm), 0 off the mask
	valFresh   = "fresh"    // 1 when the weights are those that sampled (first minibatch)
)

var grpoValues = []string{valMask, valAdv, valOldLogp, valRefLogp, valWeight, valFresh}

// grpoLoss builds the GRPO objective in the graph, token by token (shapes [B, T-1]):
//
//	ratio = exp(logπθ − logπold)        (exactly 1 where fresh: logπold = stop_gradient(logπθ))
//	obj   = min(ratio·A, clip(ratio, 1−εlow, 1+εhigh)·A)
//	kl    = k3: exp(Δ) − Δ − 1, k1: −Δ, with Δ = clamp(logπref − logπθ, ±20)
//	loss  = Σ (−obj + β·kl) · weight
//
// where weight holds the mask and the normalisation, so the sum is a token mean, a sequence
// mean or Dr. GRPO's constant-length mean over the whole optimizer batch. With β = 0 there is
// no reference: the KL term and the "kl" metric are 0. The metrics are
// means over the masked tokens of the whole batch ("ratio/dev" is the mean |ratio − 1|).
func grpoLoss(epsLow, epsHigh, beta float64, est agrl.KLEstimator) LossFunc {
	return func(in LossInputs) (*graph.Node, map[string]*graph.Node) {
		g := in.LogProbs.Graph()
		c := func(v float64) *graph.Node { return graph.Const(g, float32(v)) }
		// clamp via Min/Max: GoMLX defines no gradient for Clamp.
		clamp := func(x *graph.Node, lo, hi float64) *graph.Node { return graph.Max(graph.Min(x, c(hi)), c(lo)) }
		f32 := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }
		mask := graph.Mul(in.Values[valMask], in.Valid)
		fresh := in.Values[valFresh]
		logp := in.LogProbs // [B, T-1]
		old := graph.Add(graph.Mul(fresh, graph.StopGradient(logp)), graph.Mul(graph.OneMinus(fresh), in.Values[valOldLogp]))
		logRatio := graph.Mul(graph.Sub(logp, old), mask) // 0 off the mask, so exp stays finite
		ratio := graph.Exp(logRatio)
		adv := in.Values[valAdv]
		clipped := clamp(ratio, 1-epsLow, 1+epsHigh)
		obj := graph.Min(graph.Mul(ratio, adv), graph.Mul(clipped, adv))

		var kl *graph.Node
		if beta == 0 {
			// KL(0): the trainer scores no reference (ref_logp is all 0), so there is no KL to
			// estimate; the penalty and the "kl" metric are exactly 0.
			kl = graph.ZerosLike(logp)
		} else {
			delta := clamp(graph.Mul(graph.Sub(in.Values[valRefLogp], logp), mask), -agrl.KLDeltaClamp, agrl.KLDeltaClamp)
			if est == agrl.K1 {
				kl = graph.Neg(delta)
			} else {
				kl = graph.Sub(graph.Sub(graph.Exp(delta), delta), c(1))
			}
		}
		tokLoss := graph.Neg(obj)
		if beta > 0 {
			tokLoss = graph.Add(tokLoss, graph.Mul(c(beta), kl))
		}
		loss := graph.ReduceAllSum(graph.Mul(tokLoss, in.Values[valWeight]))

		// Means divide by the whole batch's policy tokens: the trainer may split the batch into
		// shards whose losses and metrics are added up.
		n := graph.Max(in.Sums[valMask], c(1))
		mean := func(x *graph.Node) *graph.Node { return graph.Div(graph.ReduceAllSum(graph.Mul(x, mask)), n) }
		zero := c(0)
		clipLow := f32(graph.LogicalAnd(graph.LessThan(ratio, c(1-epsLow)), graph.LessThan(adv, zero)))
		clipHigh := f32(graph.LogicalAnd(graph.GreaterThan(ratio, c(1+epsHigh)), graph.GreaterThan(adv, zero)))
		return loss, map[string]*graph.Node{
			agrl.MetricKL:        mean(kl),
			agrl.MetricEntropy:   mean(in.Entropy),
			agrl.MetricClipLow:   mean(clipLow),
			agrl.MetricClipHigh:  mean(clipHigh),
			agrl.MetricRatioMean: mean(ratio),
			agrl.MetricRatioDev:  mean(graph.Abs(graph.Sub(ratio, c(1)))),
			agrl.MetricApproxKL:  mean(graph.Sub(graph.Sub(ratio, c(1)), logRatio)),
			agrl.MetricPGLoss:    graph.Div(graph.ReduceAllSum(graph.Mul(graph.Neg(obj), mask)), n),
		}
	}
}

// lossMetrics are the metrics of grpoLoss, logged from the step's first minibatch.
var lossMetrics = []string{agrl.MetricKL, agrl.MetricEntropy, agrl.MetricClipLow, agrl.MetricClipHigh,
	agrl.MetricApproxKL, agrl.MetricRatioMean, agrl.MetricRatioDev, agrl.MetricPGLoss}
