package hfgraph

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"
)

// The segments of the decoder, for a training step that cannot hold one whole graph's
// activations: Embed, then Layer once per decoder layer, then HeadStats over chunks of
// positions. Each segment is its own graph; a caller keeps only the residual stream between
// them, and takes the backward pass segment by segment, last first, recomputing each one's
// forward pass with the gradient of its output as an input (the gradient of Σ y·dy with respect
// to the segment's inputs and weights is the vector–Jacobian product). Composed, they compute
// what TokenStats computes (agrl/learn's TestSegmentedStep).

// LayerVariables returns the variables decoder layer l reads, in the order Layer takes their
// values: its norms, Qwen3's q and k norms, then per projection its weight, bias and (on a
// model with adapters, not its Base view) adapter A and B.
func (m *Model) LayerVariables(l int) []*model.Variable {
	if l < 0 || l >= m.cfg.NumHiddenLayers {
		panic(fmt.Errorf("hfgraph: layer %d of %d", l, m.cfg.NumHiddenLayers))
	}
	return m.variables(m.layerPaths(l))
}

// HeadVariables returns the variables HeadStats reads: the final norm and the LM head's
// matrix (embed_tokens' where the embeddings are tied).
func (m *Model) HeadVariables() []*model.Variable { return m.variables(m.headPaths()) }

// variables returns the variables of paths, in order.
func (m *Model) variables(paths []string) []*model.Variable {
	vs := make([]*model.Variable, len(paths))
	for i, p := range paths {
		vs[i] = m.variable(p)
	}
	return vs
}

// EmbedVariable returns the embedding table's variable, the one Embed reads.
func (m *Model) EmbedVariable() *model.Variable {
	return m.variable(m.basePath("model.embed_tokens.weight"))
}

// Embed returns the residual stream entering the first layer: the float32 embeddings
// [B, T, H] of tokens [B, T] with lengths [B] (padding reads row 0; see Logits).
func (m *Model) Embed(tokens, lengths *graph.Node) *graph.Node {
	w := &weights{embed: m.EmbedVariable().NodeValue(tokens.Graph())}
	return m.embed(w, tokens, lengths)
}

// Layer applies one decoder layer to the residual stream x [B, T, H] (float32) of sequences
// with lengths [B], and returns the stream it leaves. params are the layer's weights as nodes
// of x's graph, in LayerVariables order: the values of any layer's variables, since every
// layer has the same structure (parameters fed from them let one compiled graph serve every
// layer). On a Dropout view it draws the layer's masks from the view's RNG state, as the
// whole graph draws that layer's, and returns the advanced state; rng is nil otherwise.
func (m *Model) Layer(x, lengths *graph.Node, params []*graph.Node) (y, rng *graph.Node) {
	dims := x.Shape().Dimensions
	if x.Rank() != 3 || dims[2] != m.cfg.HiddenSize || x.DType() != dtypes.Float32 {
		panic(fmt.Errorf("hfgraph: Layer wants x [B, T, %d] float32, got %s", m.cfg.HiddenSize, x.Shape()))
	}
	paths := m.layerPaths(0)
	if len(params) != len(paths) {
		panic(fmt.Errorf("hfgraph: Layer wants %d weights (LayerVariables), got %d", len(paths), len(params)))
	}
	byPath := make(map[string]*graph.Node, len(paths))
	for i, p := range paths {
		byPath[p] = params[i]
	}
	w := m.newWeights()
	lw := m.layerWeights(0, func(path string) *graph.Node { return byPath[path] })
	y = w.layer(m.cfg, &lw, m.newAttention(lengths, dims[1]), x)
	return y, w.rng
}

// HeadStats is TokenStats' head over n positions: x [B, n, H] is the residual stream after
// the last layer at those positions, targets [B, n] int32 the tokens that follow them (any id
// where valid is 0) and valid [B, n] float32 1 where the target is real, else 0. It returns
// logp, entropy and top1 [B, n] as TokenStatsTop1 defines them (0 where valid is 0). Every
// position is computed alone, so a long sequence's positions can go through in chunks.
func (m *Model) HeadStats(x, targets, valid, invT *graph.Node) (logp, entropy, top1 *graph.Node) {
	xs, ts, vs := x.Shape(), targets.Shape(), valid.Shape()
	if xs.Rank() != 3 || xs.Dimensions[2] != m.cfg.HiddenSize || ts.Rank() != 2 || ts.DType != dtypes.Int32 ||
		vs.Rank() != 2 || vs.DType != dtypes.Float32 || ts.Dimensions[0] != xs.Dimensions[0] || ts.Dimensions[1] != xs.Dimensions[1] ||
		!ts.EqualDimensions(vs) {
		panic(fmt.Errorf("hfgraph: HeadStats wants x [B, n, %d], targets [B, n] int32 and valid [B, n] float32, got %s, %s and %s",
			m.cfg.HiddenSize, xs, ts, vs))
	}
	w := m.newWeights()
	w.norm, w.head = m.headWeights(m.storeNodes(x.Graph()))
	return m.headStats(w, x, targets, valid, invT, true)
}
