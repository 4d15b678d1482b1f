package learn

import (
	"agrl.dev/agrl"
	"os"

	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/nn"
)

// ropeBase is θ in RoPE's frequencies θ^(−2i/hd).
const ropeBase = 10000

// Policy is a language-model policy: the weights (in a GoMLX model.Store, with the optimizer
// state once trained), the tokenizer and the compiled graphs that score, sample and train.
// Its methods are safe for concurrent use; they run one at a time.
type Policy struct {
	cfg     agrl.LM
	arch    arch
	tok     *agrl.Tokenizer
	backend compute.Backend
	store   *model.Store
	// backendConfig is the backend configuration string ("go:ops_sequential", "xla:cuda").
	backendConfig string
	// mark is the progress Save records; loaded the checkpoint the policy came from.
	mark   checkpointMark
	loaded CheckpointInfo
	// wholeBatches turns off cutting batches by length (tests compare both ways).
	wholeBatches bool
	// graphOnly keeps training steps and scoring in GoMLX graphs on the go backend instead of
	// the host code (host.go), hostAlways takes the host code even without its vector kernels
	// (see onHost); tests that compare the paths set them.
	graphOnly, hostAlways bool

	// mu guards the weights: inference holds it shared, training and saving exclusively.
	mu sync.RWMutex
	// execMu guards the lazily built executors.
	execMu      sync.Mutex
	scoreExec   *model.Exec
	explainExec *model.Exec // TopTokens
	stepExec    *model.Exec
	compactExec *model.Exec
	growExec    *model.Exec
}

// arch is the model's shape, read from its LM configuration; the graph builders are its methods.
type arch struct{ agrl.LMSpec }

// Vocab returns the vocabulary size.
func (c arch) Vocab() int { return c.Tokenizer.VocabSize() }

// NewPolicy validates the configuration (its backend too), starts the backend and initialises
// the weights deterministically from the seed.
//
//	pol, err := learn.NewPolicy(agrl.TinyLM().Layers(4).Seed(7))
func NewPolicy(c agrl.LM) (*Policy, error) {
	if err := validateLM(c); err != nil {
		return nil, err
	}
	backend, err := NewBackend(c.Spec().Backend)
	if err != nil {
		return nil, err
	}
	bc, _ := ParseBackend(c.Spec().Backend) // validated by NewBackend
	p := &Policy{cfg: c, arch: arch{c.Spec()}, tok: c.Spec().Tokenizer, backend: backend, store: model.NewStore(), backendConfig: bc.String(),
		graphOnly: os.Getenv("AGRL_HOST") == "0", hostAlways: os.Getenv("AGRL_HOST") == "1"}
	if err := p.initWeights(); err != nil {
		return nil, err
	}
	return p, nil
}

// validateLM reports the configuration's problems and its backend's, all at once.
func validateLM(c agrl.LM) error {
	return errors.Join(c.Validate(), backendProblem(c.Spec().Backend))
}

// backendProblem is ParseBackend's error, if any.
func backendProblem(config string) error {
	_, err := ParseBackend(config)
	return err
}

// MustNewPolicy is NewPolicy for notebooks: it panics on error.
func MustNewPolicy(c agrl.LM) *Policy {
	p, err := NewPolicy(c)
	if err != nil {
		panic(err)
	}
	return p
}

// shards returns the number of concurrent shards batches are split into.
func (p *Policy) shards() int {
	switch {
	case p.arch.Shards > 0:
		return p.arch.Shards
	case p.backend.String() == "go" && runtime.GOMAXPROCS(0) >= 2:
		return 2
	}
	return 1
}

// Config returns the policy's configuration.
func (p *Policy) Config() agrl.LM { return p.cfg }

// Tokenizer returns the policy's tokenizer.
func (p *Policy) Tokenizer() *agrl.Tokenizer { return p.tok }

// Backend returns the compute backend the policy runs on.
func (p *Policy) Backend() compute.Backend { return p.backend }

// BackendConfig returns the exact backend configuration the policy runs on, such as
// "go:ops_sequential" or "xla:cuda" (what summary.json records).
func (p *Policy) BackendConfig() string { return p.backendConfig }

// Store returns the GoMLX store holding the weights (under "/lm") and optimizer state.
func (p *Policy) Store() *model.Store { return p.store }

// lmScope is the scope of the model weights in the store.
const lmScope = "/lm"

// weightSpec describes one weight tensor.
type weightSpec struct {
	name string
	dims []int
	init string // "normal", "resid" (normal scaled for residual outputs), "ones", "zeros"
}

func (c arch) weightSpecs() []weightSpec {
	d, m, v := c.Width, c.MLP, c.Vocab()
	specs := []weightSpec{{"embed", []int{v, d}, "normal"}}
	if c.Positions == agrl.Learned {
		specs = append(specs, weightSpec{"pos", []int{c.Context, d}, "normal"})
	}
	for l := range c.Layers {
		pre := fmt.Sprintf("layer%d/", l)
		specs = append(specs,
			weightSpec{pre + "ln1_g", []int{d}, "ones"}, weightSpec{pre + "ln1_b", []int{d}, "zeros"},
			weightSpec{pre + "q_w", []int{d, d}, "normal"}, weightSpec{pre + "k_w", []int{d, d}, "normal"},
			weightSpec{pre + "v_w", []int{d, d}, "normal"}, weightSpec{pre + "out_w", []int{d, d}, "resid"},
			weightSpec{pre + "ln2_g", []int{d}, "ones"}, weightSpec{pre + "ln2_b", []int{d}, "zeros"},
			weightSpec{pre + "fc1_w", []int{d, m}, "normal"}, weightSpec{pre + "fc2_w", []int{m, d}, "resid"},
		)
	}
	return append(specs, weightSpec{"lnf_g", []int{d}, "ones"}, weightSpec{"lnf_b", []int{d}, "zeros"},
		weightSpec{"head_w", []int{d, v}, "normal"})
}

// initWeights creates every weight in the store from a seeded host RNG, so the same seed gives
// the same model on every backend.
func (p *Policy) initWeights() error {
	rng := rand.New(rand.NewPCG(p.arch.Seed, 0x6167726c)) // "agrl"
	residStd := p.arch.InitStd / math.Sqrt(2*float64(p.arch.Layers))
	for _, w := range p.arch.weightSpecs() {
		n := 1
		for _, d := range w.dims {
			n *= d
		}
		data := make([]float32, n)
		switch w.init {
		case "normal", "resid":
			std := p.arch.InitStd
			if w.init == "resid" {
				std = residStd
			}
			for i := range data {
				data[i] = float32(rng.NormFloat64() * std)
			}
		case "ones":
			for i := range data {
				data[i] = 1
			}
		}
		err := catch(func() error {
			_, err := p.store.CreateVariable(model.JoinPath(lmScope, w.name), tensors.FromFlatDataAndDimensions(data, w.dims...))
			return err
		})
		if err != nil {
			return fmt.Errorf("agrl: creating weight %s: %w", w.name, err)
		}
	}
	return nil
}

// weights are the model's variables as nodes of one graph.
type weights struct {
	embed, pos, lnfG, lnfB, head *graph.Node
	cos, sin                     *graph.Node // RoPE tables [context, hd]
	layers                       []layerWeights
}

type layerWeights struct {
	ln1G, ln1B, qW, kW, vW, outW, ln2G, ln2B, fc1W, fc2W *graph.Node
}

// graphWeights fetches the weight variables into graph g.
func (c arch) graphWeights(store *model.Store, g *graph.Graph) (*weights, error) {
	get := func(name string) (*graph.Node, error) {
		v := store.GetVariable(model.JoinPath(lmScope, name))
		if v == nil {
			return nil, fmt.Errorf("weight %s/%s missing from the store", lmScope, name)
		}
		return v.NodeValue(g), nil
	}
	var errs []error
	must := func(name string) *graph.Node {
		n, err := get(name)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	w := &weights{embed: must("embed"), lnfG: must("lnf_g"), lnfB: must("lnf_b"), head: must("head_w")}
	if c.Positions == agrl.Learned {
		w.pos = must("pos")
	} else {
		w.cos, w.sin = c.ropeTables(g)
	}
	for l := range c.Layers {
		pre := fmt.Sprintf("layer%d/", l)
		w.layers = append(w.layers, layerWeights{
			ln1G: must(pre + "ln1_g"), ln1B: must(pre + "ln1_b"), qW: must(pre + "q_w"), kW: must(pre + "k_w"),
			vW: must(pre + "v_w"), outW: must(pre + "out_w"), ln2G: must(pre + "ln2_g"), ln2B: must(pre + "ln2_b"),
			fc1W: must(pre + "fc1_w"), fc2W: must(pre + "fc2_w"),
		})
	}
	return w, errors.Join(errs...)
}

const lnEps = 1e-5

// layerNorm normalises the last axis of x and applies gain g and bias b ([d] each). The
// forward pass is the backend's fused LayerNorm; the gradient is hand-written (about half the
// passes of GoMLX's decomposed LayerNorm gradient):
//
//	x̂ = (x − μ)·r, r = 1/√(σ² + ε);  dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)) with dx̂ = v·g
//
// It rides on GoMLX's fused-op mechanism (see softmax). Backends without a fused LayerNorm use
// nn.LayerNorm.
func layerNorm(x, g, b *graph.Node) *graph.Node {
	axis := x.Rank() - 1
	out, fused := graph.InternalFusedOpCaller(
		func() *graph.Node { return graph.BackendFusedLayerNorm(x, []int{axis}, lnEps, g, b) },
		func() *graph.Node { return layerNormGrad(x, g, b) },
		true)
	if !fused {
		return nn.LayerNorm(x, []int{-1}, lnEps, g, b, nil)
	}
	return out
}

// layerNormGrad is a node whose value is never used but whose gradient is LayerNorm's.
func layerNormGrad(x, g, b *graph.Node) *graph.Node {
	rank := x.Rank()
	mean := rowMean(x)
	xc := graph.Sub(x, mean)
	r := graph.Rsqrt(graph.AddScalar(rowMean(graph.Square(xc)), lnEps))
	xhat := graph.StopGradient(graph.Mul(xc, r))
	gE := graph.ExpandLeftToRank(g, rank)
	dx := graph.IdentityWithCustomGradient(x, func(_, v *graph.Node) *graph.Node {
		dxhat := graph.Mul(v, gE)
		m1 := rowMean(dxhat)
		m2 := rowMean(graph.Mul(dxhat, xhat))
		return graph.Mul(graph.Sub(graph.Sub(dxhat, m1), graph.Mul(xhat, m2)), r)
	})
	// The gain and bias get their gradients Σ v·x̂ and Σ v through these terms. They are
	// broadcast over the rows by a product with a column of ones, so that the sums over rows
	// in their gradients are matrix products (the backend's reductions over leading axes are
	// slow); the products' values are never computed.
	dims := x.Shape().Dimensions
	d := dims[rank-1]
	ones := graph.Ones(x.Graph(), shapes.Make(x.DType(), x.Shape().Size()/d, 1)) // [N, 1]
	rows := func(p *graph.Node) *graph.Node {                                    // [d] -> [..., d]
		return graph.Reshape(graph.DotGeneral(ones, []int{1}, nil, graph.Reshape(p, 1, d), []int{0}, nil), dims...)
	}
	return graph.Add(graph.Add(dx, graph.Mul(xhat, rows(g))), rows(b))
}

// rowSum sums the last axis of x, keeping it with size 1: [..., d] -> [..., 1]. It is a
// product with a column of ones: the go backend's reductions walk an index iterator per
// element (a [384, 128] sum took 190 µs), its matrix products do not (docs/performance.md).
func rowSum(x *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	d := dims[len(dims)-1]
	ones := graph.Ones(x.Graph(), shapes.Make(x.DType(), 1, d))
	s := graph.DotGeneral(graph.Reshape(x, x.Shape().Size()/d, d), []int{1}, nil, ones, []int{1}, nil) // [N, 1]
	return graph.Reshape(s, append(slices.Clone(dims[:len(dims)-1]), 1)...)
}

// rowMean is the mean over the last axis of x, kept with size 1 (see rowSum).
func rowMean(x *graph.Node) *graph.Node {
	return graph.MulScalar(rowSum(x), 1/float64(x.Shape().Dimensions[x.Rank()-1]))
}

// matmul multiplies the last axis of x [..., in] by w [in, out] (no bias: like LLaMA, the
// linear layers have none, which also spares the backward pass a reduction per layer).
func matmul(x, w *graph.Node) *graph.Node {
	return nn.Dense(x, w, nil, compute.DenseLayoutInputOutputs)
}

// maskedLogit is added to the logits of tokens the policy may never write. It is finite so
// that scoring a sequence that contains them (prompts, observations) never yields NaN.
const maskedLogit = -1e9

// bannedTokens lists the ids the policy never writes: padding, BOS, UNK and the observation
// tags (the environment writes those).
func bannedTokens() []int32 {
	return []int32{agrl.PAD, agrl.BOS, agrl.UNK, agrl.TagID(agrl.ObsOpen), agrl.TagID(agrl.ObsClose)}
}

// outputLogProbs turns final hidden states [..., d] into log-probabilities [..., V] at inverse
// temperature invT (a scalar node): LogSoftmax(logits·invT + ban). The sampler and the scorer
// both call this, so temperature is applied identically in both.
func (c arch) outputLogProbs(w *weights, x, invT *graph.Node) *graph.Node {
	g := x.Graph()
	x = layerNorm(x, w.lnfG, w.lnfB)
	logits := matmul(x, w.head) // [..., V]
	ban := make([]float32, c.Vocab())
	for _, id := range bannedTokens() {
		ban[id] = maskedLogit
	}
	logits = graph.Add(graph.Mul(logits, invT), graph.ExpandLeftToRank(graph.Const(g, ban), logits.Rank()))
	return graph.LogSoftmax(logits, -1)
}

// mlpBlock is the feed-forward half of a block: x + W2·relu(W1·LN(x)). ReLU rather than GELU:
// on the go backend the exact GELU's erf cost 10% of a training step.
func mlpBlock(lw *layerWeights, x *graph.Node) *graph.Node {
	h := layerNorm(x, lw.ln2G, lw.ln2B)
	h = denseRelu(h, lw.fc1W)
	return graph.Add(x, matmul(h, lw.fc2W))
}

// project projects x [B, T, d] with w [d, d] and splits the result into heads, merged with the
// batch axis: [B·H, T, hd]. One batch axis keeps every attention matmul on the go backend's
// fast path (two batch axes made it copy the KV cache at every decoding step).
func (c arch) project(x, w *graph.Node) *graph.Node {
	b, t := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	hd := c.Width / c.Heads
	y := graph.Reshape(matmul(x, w), b, t, c.Heads, hd) // [B, T, H, hd]
	y = graph.TransposeAllAxes(y, 0, 2, 1, 3)           // [B, H, T, hd]
	return graph.Reshape(y, b*c.Heads, t, hd)           // [B·H, T, hd]
}

// mergeHeads turns attention outputs [B·H, T, hd] back into [B, T, d].
func (c arch) mergeHeads(a *graph.Node, b int) *graph.Node {
	t, hd := a.Shape().Dimensions[1], a.Shape().Dimensions[2]
	a = graph.Reshape(a, b, c.Heads, t, hd)                                    // [B, H, T, hd]
	return graph.Reshape(graph.TransposeAllAxes(a, 0, 2, 1, 3), b, t, c.Width) // [B, T, d]
}

// forward runs the transformer over whole sequences tokens [B, T] (int32) and returns the
// final hidden states [B, T, d]. Attention is causal.
func (c arch) forward(w *weights, tokens *graph.Node) *graph.Node {
	g := tokens.Graph()
	t := tokens.Shape().Dimensions[1]
	hd := c.Width / c.Heads
	x := graph.Gather(w.embed, graph.InsertAxes(tokens, -1)) // [B, T, d]
	// A row may hold several sequences back to back (packed training batches, see packRows):
	// each BOS starts a new one, whose tokens attend only to earlier tokens of the same
	// sequence and count their positions from its BOS. A row holding one sequence (and
	// padding) gets the plain causal mask and positions 0..T-1, so scoring and sampling agree
	// exactly. The mask, and the RoPE rotations gathered per token, have the batch's full
	// shape, so that every product and sum with them takes the go backend's same-shape loop
	// (an operand of a smaller shape goes through its broadcasting iterator, several times
	// slower), also in the backward pass.
	b := tokens.Shape().Dimensions[0]
	f32 := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }
	isBOS := f32(graph.Equal(tokens, graph.Const(g, agrl.BOS))) // [B, T]
	upper := make([]float32, t*t)                               // upper[i, j] = 1 for i <= j
	lower := make([]float32, t*t)                               // lower[i, j] = 1 for j <= i
	for i := range t {
		for j := range t {
			if i <= j {
				upper[i*t+j] = 1
			}
			if j <= i {
				lower[i*t+j] = 1
			}
		}
	}
	seg := graph.DotGeneral(isBOS, []int{1}, nil, graph.Const(g, tensors.FromFlatDataAndDimensions(upper, t, t)), []int{0}, nil) // [B, T]: BOS count so far
	same := graph.Equal(graph.BroadcastToDims(graph.InsertAxes(seg, -1), b, t, t), graph.BroadcastToDims(graph.InsertAxes(seg, 1), b, t, t))
	causalRows := graph.Const(g, tensors.FromFlatDataAndDimensions(slices.Repeat(lower, b), b, t, t))
	visible := graph.Mul(f32(same), causalRows)                                   // [B, T, T]: 1 where query i sees key j
	causal := graph.MulScalar(graph.OneMinus(visible), maskedLogit)               // additive bias: 0 or maskedLogit
	pos := graph.ConvertDType(graph.AddScalar(rowSum(visible), -1), dtypes.Int32) // [B, T, 1]: position in its sequence
	var cos, sin *graph.Node                                                      // RoPE rotations [B, T, hd]
	if c.Positions == agrl.Learned {
		x = graph.Add(x, graph.Gather(w.pos, pos)) // + pos[position]
	} else {
		cos, sin = graph.Gather(w.cos, pos), graph.Gather(w.sin, pos)
	}
	scale := graph.Const(g, float32(1/math.Sqrt(float64(hd))))
	// Heads are computed one at a time from column blocks of the projections (and row blocks
	// of the output projection), so that every tensor stays [B, T, ·]: splitting and merging
	// the heads of a [B, T, d] projection are transposes, which the go backend copies element
	// by element (13% of a training step); per-head matmuls measured 1.6-2× faster.
	all := graph.AxisRange()
	for l := range w.layers {
		lw := &w.layers[l]
		h := layerNorm(x, lw.ln1G, lw.ln1B)
		var att *graph.Node
		for hh := range c.Heads {
			cols := graph.AxisRange(hh*hd, (hh+1)*hd)
			q := graph.Mul(matmul(h, graph.Slice(lw.qW, all, cols)), scale) // [B, T, hd], pre-scaled
			k := matmul(h, graph.Slice(lw.kW, all, cols))                   // [B, T, hd]
			v := matmul(h, graph.Slice(lw.vW, all, cols))                   // [B, T, hd]
			if cos != nil {
				q, k = rope(q, cos, sin), rope(k, cos, sin)
			}
			// q·kᵀ with kᵀ made explicit: the backend multiplies 2× faster when the rhs
			// contracts its first axis (docs/performance.md).
			kT := graph.TransposeAllAxes(k, 0, 2, 1)                                                 // [B, hd, T]
			sc := graph.Add(graph.DotGeneral(q, []int{2}, []int{0}, kT, []int{1}, []int{0}), causal) // [B, T, T]
			a := graph.Einsum("bqk,bkd->bqd", softmax(sc), v)                                        // [B, T, hd]
			o := matmul(a, graph.Slice(lw.outW, cols, all))                                          // [B, T, d]
			if att == nil {
				att = o
			} else {
				att = graph.Add(att, o)
			}
		}
		x = graph.Add(x, att) // [B, T, d]
		x = mlpBlock(lw, x)
	}
	return x
}

// tokenStats computes, for sequences tokens [B, T], the log-probability of each next token,
// the entropy of each next-token distribution and whether the next token is the most likely
// one (1 or 0), all [B, T-1]: position i is about tokens[i+1] given tokens[..i]. invT is a
// scalar inverse temperature.
func (c arch) tokenStats(w *weights, tokens, invT *graph.Node) (logp, entropy, top1 *graph.Node) {
	t := tokens.Shape().Dimensions[1]
	x := c.forward(w, tokens)                                                                   // [B, T, d]
	lp := c.outputLogProbs(w, graph.Slice(x, graph.AxisRange(), graph.AxisRange(0, t-1)), invT) // [B, T-1, V]
	targets := graph.Slice(tokens, graph.AxisRange(), graph.AxisRange(1, t))                    // [B, T-1]
	onehot := graph.OneHot(targets, c.Vocab(), dtypes.Float32)                                  // [B, T-1, V]
	logp = graph.Squeeze(rowSum(graph.Mul(lp, onehot)), -1)                                     // [B, T-1]
	entropy = graph.Neg(graph.Squeeze(rowSum(graph.Mul(graph.Exp(lp), lp)), -1))                // [B, T-1]
	best := graph.StopGradient(graph.ReduceMax(lp, -1))                                         // [B, T-1]
	top1 = graph.ConvertDType(graph.GreaterOrEqual(graph.StopGradient(logp), best), dtypes.Float32)
	return logp, entropy, top1
}

// extend runs the model over a chunk of new tokens per sequence with a KV cache, the
// incremental half of sampling. The go backend has no DynamicUpdateSlice, so rows are written
// into the cache with ScatterSum (the rows written are zero beforehand) and attention reads
// the whole cache, masked to the positions each query may see.
//
//	tokens [B, K] int32: the chunk; row b holds count[b] valid tokens (the rest are ignored)
//	start  [B] int32:    the position of tokens[b, 0] (the number of tokens already cached)
//	count  [B] int32:    valid tokens per row, 0 for a sequence that is idle this step
//	invT   scalar:       inverse temperature
//	caches 2·Layers × [B·H, C, hd]: keys and values of each layer (donated, updated in place)
//
// It returns the log-probabilities [B, V] of the token after each row's last valid token, and
// the updated caches.
func (c arch) extend(w *weights, tokens, start, count, invT *graph.Node, caches []*graph.Node) (*graph.Node, []*graph.Node) {
	g := tokens.Graph()
	b, k := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	cl := caches[0].Shape().Dimensions[1] // cache length C
	bh := b * c.Heads
	hd := c.Width / c.Heads
	i32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Int32, dims...) }

	kIota := graph.Iota(g, i32(b, k), 1)                        // [B, K]
	pos := graph.Add(graph.InsertAxes(start, -1), kIota)        // [B, K] absolute positions
	valid := graph.LessThan(kIota, graph.InsertAxes(count, -1)) // [B, K]
	posC := graph.Min(pos, graph.Const(g, int32(cl-1)))         // [B, K] clamped into the cache
	x := graph.Gather(w.embed, graph.InsertAxes(tokens, -1))    // [B, K, d]
	if c.Positions == agrl.Learned {
		x = graph.Add(x, graph.Gather(w.pos, graph.InsertAxes(posC, -1))) // + pos[posC]
	}
	rowMask := graph.Reshape(graph.BroadcastToDims(graph.Reshape(graph.ConvertDType(valid, dtypes.Float32), b, 1, k, 1),
		b, c.Heads, k, 1), bh, k, 1) // [B·H, K, 1]
	posH := graph.Reshape(graph.BroadcastToDims(graph.Reshape(posC, b, 1, k), b, c.Heads, k), bh, k) // [B·H, K]
	var cos, sin *graph.Node                                                                         // RoPE rotations [B·H, K, hd]
	if c.Positions == agrl.RoPE {
		cos, sin = graph.Gather(w.cos, graph.InsertAxes(posH, -1)), graph.Gather(w.sin, graph.InsertAxes(posH, -1))
	}
	idx := graph.Stack([]*graph.Node{graph.Iota(g, i32(bh, k), 0), posH}, -1) // [B·H, K, 2]: (n, pos)
	posQ := graph.Reshape(graph.BroadcastToDims(graph.Reshape(pos, b, 1, k, 1), b, c.Heads, k, 1), bh, k, 1)
	visible := graph.LessOrEqual(graph.Iota(g, i32(bh, k, cl), 2), posQ) // [B·H, K, C]
	negInf := graph.Const(g, float32(maskedLogit))
	scale := graph.Const(g, float32(1/math.Sqrt(float64(hd))))
	out := make([]*graph.Node, len(caches))
	for l := range w.layers {
		lw := &w.layers[l]
		h := layerNorm(x, lw.ln1G, lw.ln1B)
		q, kNew := graph.Mul(c.project(h, lw.qW), scale), c.project(h, lw.kW) // [B·H, K, hd]
		if cos != nil {                                                       // the cache holds rotated keys
			q, kNew = rope(q, cos, sin), rope(kNew, cos, sin)
		}
		kc := graph.ScatterSum(caches[2*l], idx, graph.Mul(kNew, rowMask), false, false) // [B·H, C, hd]
		vc := graph.ScatterSum(caches[2*l+1], idx, graph.Mul(c.project(h, lw.vW), rowMask), false, false)
		out[2*l], out[2*l+1] = kc, vc
		s := graph.Where(visible, graph.Einsum("nqd,nkd->nqk", q, kc), negInf) // [B·H, K, C]
		a := graph.Einsum("nqk,nkd->nqd", graph.Softmax(s, -1), vc)            // [B·H, K, hd]
		x = graph.Add(x, matmul(c.mergeHeads(a, b), lw.outW))                  // [B, K, d]
		x = mlpBlock(lw, x)
	}
	last := graph.Max(graph.Sub(count, graph.Const(g, int32(1))), graph.Const(g, int32(0))) // [B]
	pick := graph.OneHot(last, k, dtypes.Float32)                                           // [B, K]
	xLast := graph.Einsum("bk,bkd->bd", pick, x)                                            // [B, d]
	return c.outputLogProbs(w, xLast, invT), out                                            // [B, V]
}

// ropeTables returns RoPE's cos and sin tables [context, hd] as constants: column i and
// i+hd/2 rotate together by angle pos·θ^(−2i/hd).
func (c arch) ropeTables(g *graph.Graph) (cos, sin *graph.Node) {
	hd := c.Width / c.Heads
	cs, sn := c.ropeHost()
	return graph.Const(g, tensors.FromFlatDataAndDimensions(slices.Clone(cs), c.Context, hd)),
		graph.Const(g, tensors.FromFlatDataAndDimensions(slices.Clone(sn), c.Context, hd))
}

// rope rotates x [N, T, hd] by position: x·cos + rotate_half(x)·sin, where rotate_half swaps
// the halves of the last axis and negates the new first half. cos and sin broadcast to x.
func rope(x, cos, sin *graph.Node) *graph.Node {
	hd := x.Shape().Dimensions[x.Rank()-1]
	x1 := graph.Slice(x, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(0, hd/2))
	x2 := graph.Slice(x, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(hd/2, hd))
	rot := graph.Concatenate([]*graph.Node{graph.Neg(x2), x1}, -1)
	return graph.Add(graph.Mul(x, cos), graph.Mul(rot, sin))
}

// denseRelu is relu(x·w) for x [B, T, in], w [in, out]: the backend's fused dense layer with
// its ReLU, and a hand-written gradient (v where the output is positive, then the matmul's
// gradient). Backends without the fused op use relu(matmul(x, w)).
func denseRelu(x, w *graph.Node) *graph.Node {
	dims := x.Shape().Dimensions
	n, in, m := x.Shape().Size()/dims[len(dims)-1], dims[len(dims)-1], w.Shape().Dimensions[1]
	outDims := append(slices.Clone(dims[:len(dims)-1]), m)
	var out *graph.Node
	res, fused := graph.InternalFusedOpCaller(
		func() *graph.Node {
			return graph.BackendFusedDense(x, w, nil, compute.DenseConfig{Activation: compute.ActivationRelu})
		},
		func() *graph.Node {
			pre := graph.DotGeneral(graph.Reshape(x, n, in), []int{1}, nil, w, []int{0}, nil) // value unused
			pre = graph.Reshape(pre, outDims...)
			return graph.IdentityWithCustomGradient(pre, func(_, v *graph.Node) *graph.Node {
				zero := graph.ScalarZero(v.Graph(), v.DType())
				return graph.Where(graph.GreaterThan(out, zero), v, zero)
			})
		}, true)
	if !fused {
		return relu(matmul(x, w))
	}
	out = res
	return out
}

// relu is max(x, 0) written as Where(x > 0, x, 0): its backward pass is one Where, where
// GoMLX's gradient of Max takes five ops.
func relu(x *graph.Node) *graph.Node {
	zero := graph.ScalarZero(x.Graph(), x.DType())
	return graph.Where(graph.GreaterThan(x, zero), x, zero)
}

// softmax is the softmax over the last axis with a hand-written gradient,
// dS = P⊙v − P⊙Σ(P⊙v): four passes over the attention scores where the gradient of GoMLX's
// decomposed softmax takes about ten. It rides on GoMLX's fused-op mechanism: the gradient of
// the fused node is taken through its "decomposed" alternate, here an identity of the scores
// carrying the custom gradient (never evaluated). Backends without a fused softmax get the
// plain graph.Softmax.
func softmax(s *graph.Node) *graph.Node {
	var p *graph.Node
	out, fused := graph.InternalFusedOpCaller(
		func() *graph.Node { return graph.BackendFusedSoftmax(s, s.Rank()-1) },
		func() *graph.Node {
			return graph.IdentityWithCustomGradient(s, func(_, v *graph.Node) *graph.Node {
				pv := graph.Mul(p, v)
				return graph.Sub(pv, graph.Mul(p, rowSum(pv)))
			})
		}, true)
	if !fused {
		return graph.Softmax(s, -1)
	}
	p = out
	return out
}
