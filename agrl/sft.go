package agrl

import (
	"github.com/gomlx/gomlx/core/graph"
)

// SFTLoss is the behaviour-cloning loss: the mean negative log-likelihood of the target tokens
// whose "mask" value is 1 (the actions of expert episodes; never prompt or observation tokens).
// Its metrics are "nll" (the loss), "accuracy" (the fraction of masked targets that are the
// most likely token) and "tokens" (the masked target count).
func SFTLoss(in LossInputs) (*graph.Node, map[string]*graph.Node) {
	mask := graph.Mul(in.Values["mask"], in.Valid) // [B, T-1]
	g := mask.Graph()
	n := graph.Max(graph.ReduceAllSum(mask), graph.Const(g, float32(1)))
	loss := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(mask, in.LogProbs))), n)
	acc := graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Top1)), n)
	return loss, map[string]*graph.Node{"nll": loss, "accuracy": acc, "tokens": n}
}
