package hfgraph

import (
	"fmt"
	"math"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// maskedScore is added to the attention scores of keys a query may not see. It is finite, so a
// row that sees no key (an empty sequence) gets uniform weights, never NaN.
const maskedScore = -1e9

// The projections of a layer, in llm.LoRAModules order.
const (
	qProj = iota
	kProj
	vProj
	oProj
	gateProj
	upProj
	downProj
	numProj
)

// projNames are their names, llm's (the conversion panics at start-up if llm's list changes
// length).
var projNames = [numProj]string(llm.LoRAModules())

// weights are a model's variables as nodes of one graph.
type weights struct {
	embed, norm, head *graph.Node // [V, H] (as stored: see embedRows), [H], [V, H] (embed's values when tied)
	layers            []layerWeights
	scale             float64 // LoRA's alpha/r
	// rng and drop: LoRA dropout's RNG state, advanced by every mask drawn, and its rate (see
	// Model.Dropout); rng is nil when the graph applies no dropout.
	rng  *graph.Node
	drop float64
}

type layerWeights struct {
	inputNorm, postNorm *graph.Node // [H]
	qNorm, kNorm        *graph.Node // Qwen3: [head_dim]; nil otherwise
	proj                [numProj]projWeights
}

// projWeights is one projection: w [in, out], bias [out] or nil, and the adapter's A [in, r]
// and B [r, out], nil when it is not adapted or the graph leaves the adapters out.
type projWeights struct {
	w, bias, loraA, loraB *graph.Node
}

// graphWeights fetches m's variables into graph g; the Base view leaves the adapters out.
func (m *Model) graphWeights(g *graph.Graph) *weights {
	c := m.cfg
	// The embedding table keeps its storage dtype: embedRows converts the rows it gathers, not
	// the whole table; a tied head converts it for its product.
	w := m.newWeights()
	w.embed = m.variable(m.basePath("model.embed_tokens.weight")).NodeValue(g)
	w.norm, w.head = m.headWeights(m.storeNodes(g))
	for l := range c.NumHiddenLayers {
		w.layers = append(w.layers, m.layerWeights(l, m.storeNodes(g)))
	}
	return w
}

// storeNodes gives the store variable of a path as a node of graph g.
func (m *Model) storeNodes(g *graph.Graph) func(path string) *graph.Node {
	return func(path string) *graph.Node { return m.variable(path).NodeValue(g) }
}

// newWeights returns weights with no nodes yet: LoRA's scale and, on a Dropout view, its RNG
// state and rate.
func (m *Model) newWeights() *weights {
	w := &weights{}
	if m.lora != nil {
		w.scale = m.lora.Scale()
		if m.rng != nil && !m.base && m.lora.Dropout > 0 {
			w.rng, w.drop = m.rng, m.lora.Dropout
		}
	}
	return w
}

// headPaths are the store paths of the variables the head reads: the final norm, then the
// LM head's matrix (embed_tokens' where the embeddings are tied).
func (m *Model) headPaths() []string {
	head := "lm_head.weight"
	if m.cfg.TieWordEmbeddings {
		head = "model.embed_tokens.weight"
	}
	return []string{m.basePath("model.norm.weight"), m.basePath(head)}
}

// headWeights returns the final norm and the head's matrix, both float32, from the nodes get
// gives for headPaths. The LM head stays float32 whatever the compute dtype: bfloat16 logits
// would be rounded by up to 2^-9 of their size (0.016 for a logit of 8), straight into the
// log-probs that GRPO's ratios compare.
func (m *Model) headWeights(get func(path string) *graph.Node) (norm, head *graph.Node) {
	ps := m.headPaths()
	return graph.ConvertDType(get(ps[0]), dtypes.Float32), graph.ConvertDType(get(ps[1]), dtypes.Float32)
}

// layerPaths are the store paths of the variables decoder layer l reads, in order: its two
// norms, Qwen3's q and k norms, then per projection (llm.LoRAModules order) its weight, its
// bias where the config has one, and its adapter's A and B where m's graphs use adapters
// (not on the Base view; a Frozen view's copies).
func (m *Model) layerPaths(l int) []string {
	c := m.cfg
	p := fmt.Sprintf("model.layers.%d.", l)
	paths := []string{m.basePath(p + "input_layernorm.weight"), m.basePath(p + "post_attention_layernorm.weight")}
	if c.Family == hf.Qwen3 {
		paths = append(paths, m.basePath(p+"self_attn.q_norm.weight"), m.basePath(p+"self_attn.k_norm.weight"))
	}
	for i, mod := range projNames {
		name := p + moduleGroup(mod) + "." + mod
		paths = append(paths, m.basePath(name+".weight"))
		if m.projBias(i) {
			paths = append(paths, m.basePath(name+".bias"))
		}
		if !m.base && m.targets(mod) {
			paths = append(paths, m.loraPath(l, mod, "A"), m.loraPath(l, mod, "B"))
		}
	}
	return paths
}

// projBias reports whether projection i (qProj …) has a bias.
func (m *Model) projBias(i int) bool {
	switch i {
	case qProj, kProj, vProj:
		return m.cfg.QKVBias()
	case oProj:
		return m.cfg.OutputBias()
	}
	return m.cfg.MLPBias
}

// layerWeights builds decoder layer l's weights from the nodes get gives for layerPaths(l):
// norms and biases as float32, the projections' weights in the compute dtype, the adapters as
// they are.
func (m *Model) layerWeights(l int, get func(path string) *graph.Node) layerWeights {
	paths := m.layerPaths(l)
	next := func() *graph.Node {
		n := get(paths[0])
		paths = paths[1:]
		return n
	}
	f32 := func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, dtypes.Float32) }
	lw := layerWeights{inputNorm: f32(next()), postNorm: f32(next())}
	if m.cfg.Family == hf.Qwen3 {
		lw.qNorm, lw.kNorm = f32(next()), f32(next())
	}
	for i, mod := range projNames {
		pw := projWeights{w: graph.ConvertDType(next(), m.compute)}
		if m.projBias(i) {
			pw.bias = f32(next())
		}
		if !m.base && m.targets(mod) {
			pw.loraA, pw.loraB = next(), next()
		}
		lw.proj[i] = pw
	}
	return lw
}

// Logits runs the decoder over a batch of right-padded sequences and returns the logits at
// every position, [B, T, vocab] float32: row b, position t scores the token after
// tokens[b, ..t], as llm.Model.Logits does for one sequence.
//
//	tokens  [B, T] int32: row b holds lengths[b] tokens, then padding (any ids; they are ignored)
//	lengths [B] int32:    the real tokens per row, 0 … T
//
// Every row counts positions from 0 (RoPE), its queries attend causally to its own real tokens
// only, so padding never changes a real position's logits; the logits at padding positions are
// finite and meaningless. It panics (as GoMLX graph builders do) on bad shapes, T above
// max_position_embeddings, or missing variables.
func (m *Model) Logits(tokens, lengths *graph.Node) *graph.Node {
	w := m.graphWeights(tokens.Graph())
	return m.head(w, m.hidden(w, tokens, lengths))
}

// TokenStats computes, for a batch of right-padded sequences (see Logits), the log-probability
// of each next token at inverse temperature invT and the entropy of that next-token
// distribution, the contract of the Tiny model's scorer: all [B, T-1] float32, position j about
// tokens[b, j+1] given tokens[b, ..j],
//
//	logp[b, j]    = log softmax(invT·logits[b, j])[tokens[b, j+1]]
//	entropy[b, j] = −Σ_v p_v log p_v of that softmax
//	valid[b, j]   = 1 if j+1 < lengths[b] (the target is a real token), else 0
//
// logp and entropy are 0 where valid is 0. invT is a scalar (nil means 1); sampling must use
// the same temperature. T must be at least 2.
func (m *Model) TokenStats(tokens, lengths, invT *graph.Node) (logp, entropy, valid *graph.Node) {
	logp, entropy, _, valid = m.tokenStats(tokens, lengths, invT, false)
	return logp, entropy, valid
}

// TokenStatsTop1 is TokenStats plus top1 [B, T-1]: 1 where the target token is the most likely
// one (its log-prob is the maximum; ties count) and the target is real, else 0 — SFT's token
// accuracy.
func (m *Model) TokenStatsTop1(tokens, lengths, invT *graph.Node) (logp, entropy, top1, valid *graph.Node) {
	return m.tokenStats(tokens, lengths, invT, true)
}

func (m *Model) tokenStats(tokens, lengths, invT *graph.Node, withTop1 bool) (logp, entropy, top1, valid *graph.Node) {
	g := tokens.Graph()
	b, t := m.checkTokens(tokens, lengths)
	if t < 2 {
		panic(fmt.Errorf("hfgraph: TokenStats needs sequences of at least 2 positions, got [%d %d]", b, t))
	}
	w := m.graphWeights(g)
	x := m.residual(w, tokens, lengths)                            // [B, T, H]
	x = graph.Slice(x, graph.AxisRange(), graph.AxisRange(0, t-1)) // [B, T-1, H]: the last position has no target
	targets := graph.Slice(tokens, graph.AxisRange(), graph.AxisRange(1, t))
	next := graph.AddScalar(graph.Iota(g, shapes.Make(dtypes.Int32, b, t-1), 1), 1)
	valid = graph.ConvertDType(graph.LessThan(next, graph.InsertAxes(lengths, -1)), dtypes.Float32) // [B, T-1]: target j+1 is real
	logp, entropy, top1 = m.headStats(w, x, targets, valid, invT, withTop1)
	return logp, entropy, top1, valid
}

// headStats is TokenStats from the residual stream after the last layer, x [B, n, H], the
// targets [B, n] (the token after each position; any id where valid is 0) and valid [B, n]
// (float32, 1 where the target is real, else 0); top1 is nil unless withTop1.
func (m *Model) headStats(w *weights, x, targets, valid, invT *graph.Node, withTop1 bool) (logp, entropy, top1 *graph.Node) {
	g := x.Graph()
	dims := x.Shape().Dimensions
	b, n := dims[0], dims[1]
	logits := m.head(w, rmsNorm(x, w.norm, m.cfg.RMSNormEps)) // [B, n, V]
	if invT != nil {
		logits = graph.Mul(logits, graph.ConvertDType(invT, dtypes.Float32))
	}
	lp := graph.LogSoftmax(logits, -1) // [B, n, V]
	isReal := graph.GreaterThan(valid, graph.ScalarZero(g, dtypes.Float32))
	targets = graph.Where(isReal, targets, graph.ScalarZero(g, dtypes.Int32))
	// The targets' log-probs by a gather (index [b, j, target]), not a product with a one-hot
	// [B, n, V]: at a real vocabulary (151,936 for Qwen) the one-hot and its product are two
	// more tensors of the logits' size, forward and backward.
	bIdx := graph.Iota(g, shapes.Make(dtypes.Int32, b, n), 0)
	jIdx := graph.Iota(g, shapes.Make(dtypes.Int32, b, n), 1)
	idx := graph.Stack([]*graph.Node{bIdx, jIdx, targets}, -1) // [B, n, 3]
	target := graph.Gather(lp, idx)
	logp = graph.Mul(target, valid)
	entropy = graph.Mul(graph.Neg(graph.ReduceSum(graph.Mul(graph.Exp(lp), lp), -1)), valid)
	if withTop1 {
		top1 = graph.Mul(graph.ConvertDType(graph.GreaterOrEqual(target, graph.ReduceMax(lp, -1)), dtypes.Float32), valid)
	}
	return logp, entropy, top1
}

// checkTokens checks the shapes of tokens [B, T] and lengths [B] (both int32) and returns B, T.
func (m *Model) checkTokens(tokens, lengths *graph.Node) (b, t int) {
	ts, ls := tokens.Shape(), lengths.Shape()
	if ts.Rank() != 2 || ts.DType != dtypes.Int32 || ls.Rank() != 1 || ls.DType != dtypes.Int32 || ls.Dimensions[0] != ts.Dimensions[0] {
		panic(fmt.Errorf("hfgraph: want tokens [B, T] int32 and lengths [B] int32, got %s and %s", ts, ls))
	}
	b, t = ts.Dimensions[0], ts.Dimensions[1]
	if t > m.cfg.MaxPositionEmbeddings {
		panic(fmt.Errorf("hfgraph: %d positions exceed max_position_embeddings %d", t, m.cfg.MaxPositionEmbeddings))
	}
	return b, t
}

// hidden runs the decoder over tokens [B, T] with lengths [B] (see Logits) and returns the
// final normalised hidden states [B, T, H].
func (m *Model) hidden(w *weights, tokens, lengths *graph.Node) *graph.Node {
	return rmsNorm(m.residual(w, tokens, lengths), w.norm, m.cfg.RMSNormEps)
}

// residual is the residual stream [B, T, H] after the last layer (hidden before the final
// norm).
func (m *Model) residual(w *weights, tokens, lengths *graph.Node) *graph.Node {
	x := m.embed(w, tokens, lengths)
	at := m.newAttention(lengths, tokens.Shape().Dimensions[1])
	for l := range w.layers {
		x = w.layer(m.cfg, &w.layers[l], at, x)
	}
	return x
}

// embed returns the embeddings [B, T, H] of tokens [B, T] (padding reads row 0).
func (m *Model) embed(w *weights, tokens, lengths *graph.Node) *graph.Node {
	g := tokens.Graph()
	b, t := m.checkTokens(tokens, lengths)
	isReal := graph.LessThan(graph.Iota(g, shapes.Make(dtypes.Int32, b, t), 1), graph.InsertAxes(lengths, -1)) // [B, T]
	return w.embedRows(graph.Where(isReal, tokens, graph.ScalarZero(g, dtypes.Int32)))                         // [B, T, H]
}

// attention holds what every layer's attention over one batch shares: RoPE's tables and the
// mask.
type attention struct {
	cos, sin *graph.Node // [1, T, 1, hd]
	bias     *graph.Node // [B·nkv, grp·T, T]
}

// newAttention builds the attention constants of a batch of T positions with lengths [B].
func (m *Model) newAttention(lengths *graph.Node, t int) attention {
	c := m.cfg
	nkv := c.NumKeyValueHeads
	cos, sin := m.ropeTables(lengths.Graph(), t)
	return attention{cos: cos, sin: sin, bias: attentionBias(lengths, lengths.Shape().Dimensions[0], t, nkv, c.NumAttentionHeads/nkv)}
}

// layer applies one decoder layer to the residual stream x [B, T, H].
func (w *weights) layer(c hf.Config, lw *layerWeights, at attention, x *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	hd, nq, nkv := c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads
	grp := nq / nkv // query heads per key-value head
	eps := c.RMSNormEps
	scale := 1 / math.Sqrt(float64(hd))

	h := rmsNorm(x, lw.inputNorm, eps)
	q := graph.Reshape(w.project(h, &lw.proj[qProj]), b, t, nq, hd)
	k := graph.Reshape(w.project(h, &lw.proj[kProj]), b, t, nkv, hd)
	v := graph.Reshape(w.project(h, &lw.proj[vProj]), b, t, nkv, hd)
	if lw.qNorm != nil { // Qwen3: each head RMS-normalised before RoPE
		q, k = rmsNorm(q, lw.qNorm, eps), rmsNorm(k, lw.kNorm, eps)
	}
	q, k = rope(q, at.cos, at.sin), rope(k, at.cos, at.sin)
	// Grouped-query attention: query heads n·grp … n·grp+grp−1 share key-value head n, so
	// they are stacked along the query axis of one batch entry (b, n); one batch axis keeps
	// the products on the go backend's fast path.
	q = graph.Reshape(graph.TransposeAllAxes(graph.Reshape(q, b, t, nkv, grp, hd), 0, 2, 3, 1, 4), b*nkv, grp*t, hd)
	kT := graph.Reshape(graph.TransposeAllAxes(k, 0, 2, 3, 1), b*nkv, hd, t)                                    // [B·nkv, hd, T]
	v = graph.Reshape(graph.TransposeAllAxes(v, 0, 2, 1, 3), b*nkv, t, hd)                                      // [B·nkv, T, hd]
	s := graph.DotGeneral(q, []int{2}, []int{0}, kT, []int{1}, []int{0})                                        // [B·nkv, grp·T, T]
	s = graph.Add(graph.MulScalar(s, scale), at.bias)                                                           // q·k/√hd, masked
	a := graph.DotGeneral(graph.Softmax(s, -1), []int{2}, []int{0}, v, []int{1}, []int{0})                      // [B·nkv, grp·T, hd]
	a = graph.Reshape(graph.TransposeAllAxes(graph.Reshape(a, b, nkv, grp, t, hd), 0, 3, 1, 2, 4), b, t, nq*hd) // [B, T, nq·hd]
	x = graph.Add(x, w.project(a, &lw.proj[oProj]))

	h = rmsNorm(x, lw.postNorm, eps)
	gate, up := w.project(h, &lw.proj[gateProj]), w.project(h, &lw.proj[upProj])
	return graph.Add(x, w.project(graph.Mul(silu(gate), up), &lw.proj[downProj])) // SwiGLU
}

// embedRows returns the float32 embeddings of ids [..., n] int32: [..., n, H].
func (w *weights) embedRows(ids *graph.Node) *graph.Node {
	return graph.ConvertDType(graph.Gather(w.embed, graph.InsertAxes(ids, -1)), dtypes.Float32)
}

// head turns hidden states [B, T, H] into logits [B, T, V]: x·headᵀ.
func (m *Model) head(w *weights, x *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	n, h := x.Shape().Size()/dims[2], dims[2]
	y := matmul(graph.Reshape(x, n, h), w.head, 1) // [N, V]
	return graph.Reshape(y, dims[0], dims[1], m.cfg.VocabSize)
}

// matmul contracts x [N, k] (float32) with axis wAxis of the 2-D weight w: in float32, or,
// where w is bfloat16 (Model.SetCompute), as mixed precision does: x rounded to bfloat16, the
// products summed in float32, the sum rounded to bfloat16 and returned as float32. (A float32
// result straight from the product would keep more bits, but GoMLX v0.28.2's gradient of a
// product whose output dtype differs from its inputs' mixes dtypes and fails to build.)
func matmul(x, w *graph.Node, wAxis int) *graph.Node {
	if w.DType() != dtypes.BFloat16 {
		return graph.DotGeneral(x, []int{1}, nil, w, []int{wAxis}, nil)
	}
	y := graph.Dot(graph.ConvertDType(x, dtypes.BFloat16), w).WithAccumulatorDType(dtypes.Float32).
		General([]int{1}, nil, []int{wAxis}, nil)
	return graph.ConvertDType(y, dtypes.Float32)
}

// project applies projection p to x [..., in]: x·W + b, plus the adapter term
// scale·((x·A)·B) where p is adapted, added after the bias as PEFT and agrl/llm add it.
func (w *weights) project(x *graph.Node, p *projWeights) *graph.Node {
	dims := x.Shape().Dimensions
	in, out := dims[len(dims)-1], p.w.Shape().Dimensions[1]
	x2 := graph.Reshape(x, x.Shape().Size()/in, in) // [N, in]
	y := matmul(x2, p.w, 0)                         // [N, out]
	if p.bias != nil {
		y = graph.Add(y, graph.InsertAxes(p.bias, 0))
	}
	if p.loraA != nil {
		xa := x2
		if w.rng != nil {
			w.rng, xa = dropout(w.rng, x2, w.drop)
		}
		u := graph.DotGeneral(xa, []int{1}, nil, p.loraA, []int{0}, nil) // [N, r]
		d := graph.DotGeneral(u, []int{1}, nil, p.loraB, []int{0}, nil)  // [N, out]
		y = graph.Add(y, graph.MulScalar(d, w.scale))
	}
	outDims := append(append([]int(nil), dims[:len(dims)-1]...), out)
	return graph.Reshape(y, outDims...)
}

// dropout zeroes each entry of x with probability p and divides the others by 1−p, drawing
// the mask from rng; it returns the advanced RNG state and the result.
func dropout(rng, x *graph.Node, p float64) (*graph.Node, *graph.Node) {
	rng, u := graph.RandomUniform(rng, x.Shape()) // [0, 1)
	keep := graph.ConvertDType(graph.GreaterOrEqual(u, graph.Scalar(x.Graph(), x.DType(), p)), x.DType())
	return rng, graph.Mul(x, graph.MulScalar(keep, 1/(1-p)))
}

// rmsNorm normalises the last axis of x to unit root mean square and multiplies it by w:
// x·(1/√(mean(x²) + eps))·w. (GoMLX v0.28.2 defines no gradient for Rsqrt, so it is 1/Sqrt.)
func rmsNorm(x, w *graph.Node, eps float64) *graph.Node {
	ms := graph.ReduceAndKeep(graph.Square(x), graph.ReduceMean, -1)
	x = graph.Mul(x, graph.Reciprocal(graph.Sqrt(graph.AddScalar(ms, eps))))
	return graph.Mul(x, graph.ExpandLeftToRank(w, x.Rank()))
}

// silu is x·sigmoid(x).
func silu(x *graph.Node) *graph.Node { return graph.Mul(x, graph.Sigmoid(x)) }

// ropeTables returns RoPE's cos and sin for positions 0 … t−1 as constants [1, t, 1, hd]:
// dimensions i and i + hd/2 both turn by angle pos·invFreq[i], cos and sin multiplied by
// ropeScale (computed in float64 and rounded once, as agrl/llm does).
func (m *Model) ropeTables(g *graph.Graph, t int) (cos, sin *graph.Node) {
	hd := m.cfg.HeadDim
	cs, sn := make([]float32, t*hd), make([]float32, t*hd)
	for p := range t {
		for i, f := range m.invFreq {
			a := float64(p) * f
			c, s := float32(m.ropeScale*math.Cos(a)), float32(m.ropeScale*math.Sin(a))
			cs[p*hd+i], cs[p*hd+i+hd/2] = c, c
			sn[p*hd+i], sn[p*hd+i+hd/2] = s, s
		}
	}
	return graph.Const(g, tensors.FromFlatDataAndDimensions(cs, 1, t, 1, hd)),
		graph.Const(g, tensors.FromFlatDataAndDimensions(sn, 1, t, 1, hd))
}

// rope rotates x [B, T, heads, hd] in the rotate-half layout: x·cos + rotate_half(x)·sin, where
// rotate_half(x) = (−x[hd/2:], x[:hd/2]), so dimension i turns with dimension i + hd/2.
func rope(x, cos, sin *graph.Node) *graph.Node {
	hd := x.Shape().Dimensions[3]
	all := graph.AxisRange()
	x1 := graph.Slice(x, all, all, all, graph.AxisRange(0, hd/2))
	x2 := graph.Slice(x, all, all, all, graph.AxisRange(hd/2, hd))
	rot := graph.Concatenate([]*graph.Node{graph.Neg(x2), x1}, -1)
	return graph.Add(graph.Mul(x, cos), graph.Mul(rot, sin))
}

// attentionBias is the additive attention mask [B·nkv, grp·T, T]: 0 where query i of row b may
// see key j (j ≤ i and j < lengths[b]), maskedScore elsewhere; laid out as the stacked queries
// of hidden.
func attentionBias(lengths *graph.Node, b, t, nkv, grp int) *graph.Node {
	g := lengths.Graph()
	sh := shapes.Make(dtypes.Int32, b, t, t)
	qi, kj := graph.Iota(g, sh, 1), graph.Iota(g, sh, 2)
	n := graph.BroadcastToDims(graph.Reshape(lengths, b, 1, 1), b, t, t)
	visible := graph.LogicalAnd(graph.LessOrEqual(kj, qi), graph.LessThan(kj, n))                     // [B, T, T]
	bias := graph.MulScalar(graph.OneMinus(graph.ConvertDType(visible, dtypes.Float32)), maskedScore) // 0 or maskedScore
	bias = graph.BroadcastToDims(graph.Reshape(bias, b, 1, 1, t, t), b, nkv, grp, t, t)
	return graph.Reshape(bias, b*nkv, grp*t, t)
}
