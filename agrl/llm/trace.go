package llm

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"agrl.dev/internal/parallel"
)

// Training through the adapters on the host: Trace runs one sequence forward as Step does,
// keeping what the backward pass needs, and Backward takes the gradient of a loss with respect
// to the final hidden states back through the decoder to the LoRA adapters. The base weights
// stay frozen: the backward pass multiplies by them (one product per projection, the input's
// gradient) but computes no gradient for them, which is what makes a LoRA step cost about two
// forward passes instead of three (BackwardWeights, grads.go, takes every weight's gradient
// instead: full fine-tuning). The LM head is left to the caller (Hidden, Head), which turns
// its loss over the logits into the hidden states' gradient.
//
// What a Trace keeps, per layer and position: the residual stream entering each half of the
// layer, the queries, keys and values (after RoPE; with Qwen3's norms, before them too), the
// attention's output, the MLP's two pre-activations and its activation, and each adapter's
// A·x. About 30 KB a position and layer at the SmolLM2-135M shape with every projection
// adapted (0.9 MB a position in all), 80 KB at Qwen3-0.6B's. The attention's weights are
// recomputed in the backward pass, not kept (they are positions² per head). A checkpointed
// trace (TraceOptions.Checkpointed) keeps only each layer's input stream (2.3 KB a position
// and layer at the SmolLM2-135M shape, 4 KB at Qwen3-0.6B's) and runs each layer again in
// Backward. LoRA dropout (TraceOptions.Dropout) draws its masks again where Backward needs
// them rather than keeping them. Sequences that begin alike (a group of episodes of one
// prompt) need not trace their beginning each: a trace made with TraceOptions.Prefix keeps
// its keys and values, TraceAfter traces each sequence's rest after it, and the prefix's
// backward pass, after theirs, takes on what theirs summed into its keys and values.

// mulKernel, when set by SetMul, computes mul's products.
var mulKernel func(m, n, k int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, add bool)

// SetMul installs the product kernel of the backward pass: f(m, n, k, a, ai, ak, b, ldb, c,
// ldc, add) sets (or, with add, adds to) the m×n matrix C at c (element (i, j) at c[i·ldc+j])
// the product A·B of the m×k matrix A at a (element (i, p) at a[i·ai+p·ak]: any strides, so
// that a transpose is read in place) and the k×n matrix B at b (element (p, j) at
// b[p·ldb+j]). It may spread the work over the cores. nil restores the portable loop. agrl/learn
// installs its vector kernels with it; set it before any backward pass runs.
func SetMul(f func(m, n, k int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, add bool)) {
	mulKernel = f
}

// transposeKernel, when set by SetTranspose, computes transposeInto's and addTransposed's
// transposes.
var transposeKernel func(dst []float32, ldd int, src []float32, r, c, lds int, add bool)

// SetTranspose installs the transposes of the backward pass (the input gradient of a
// projection stored [in, out], Model.Share's layout, goes through two): f(dst, ldd, src, r, c,
// lds, add) sets dst[j·ldd+i] to src[i·lds+j] for i < r, j < c, or with add adds it (one
// float32 addition an element, so that any kernel gives the loop's bits), and leaves the rest
// of dst alone. It may spread the work over the cores. nil restores the portable loop.
// agrl/learn installs its vector kernel with it; set it before any backward pass runs.
func SetTranspose(f func(dst []float32, ldd int, src []float32, r, c, lds int, add bool)) {
	transposeKernel = f
}

// mul is C (+)= A·B with SetMul's conventions: the installed kernel, or the portable loop.
func mul(m, n, k int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, add bool) {
	if mulKernel != nil {
		mulKernel(m, n, k, a, ai, ak, b, ldb, c, ldc, add)
		return
	}
	parallel.Rows(m, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ci := c[i*ldc : i*ldc+n]
			if !add {
				clear(ci)
			}
			for p := range k {
				av := a[i*ai+p*ak]
				if av == 0 {
					continue
				}
				bp := b[p*ldb : p*ldb+n]
				for j := range ci {
					ci[j] += av * bp[j]
				}
			}
		}
	})
}

// A Trace is one sequence's forward pass kept for its backward pass (Model.Trace). It belongs
// to the model and adapters it was made with; Backward reads them as they are, so they must not
// change in between.
type Trace struct {
	m        *Model
	n        int       // positions
	ids      []int32   // the tokens traced (BackwardWeights' embedding rows)
	cos, sin []float32 // RoPE's angles, [n, head_dim/2]
	layers   []traceLayer
	last     []float32 // the residual stream after the last layer, [n, hidden]
	hidden   []float32 // last after the final norm: what the LM head multiplies
	dropout  float64   // LoRA dropout (TraceOptions)
	seed     uint64
	bufs     [2][]float32 // projBack's transposes, kept from one projection to the next (scratch)
	start    int          // the position of its first row: the prefix's length when it continues one (TraceAfter), else 0
	pre      *Trace       // the prefix it continues (TraceAfter), until its backward pass
	kv       []prefixKV   // a prefix's (TraceOptions.Prefix) keys and values of each layer, for the traces that continue it
	open     int          // how many traces continue it and have not run their backward pass
}

// prefixKV is one layer's keys and values of a prefix trace (TraceOptions.Prefix), [n, kv
// heads·head_dim] each after RoPE, kept for the traces that continue it (TraceAfter): their
// attention reads them, and their backward passes add the gradients of those keys and values
// into dk and dv (made at the first), which the prefix's own backward pass then takes on.
type prefixKV struct {
	k, v, dk, dv []float32
}

// scratch returns tr's working buffer k holding n floats, grown as needed; its contents are
// whatever was left there.
func (tr *Trace) scratch(k, n int) []float32 {
	if cap(tr.bufs[k]) < n {
		PutFloats(tr.bufs[k])
		tr.bufs[k] = Floats(n)
	}
	return tr.bufs[k][:n]
}

// traceLayer is what one layer's backward pass reads.
type traceLayer struct {
	x, mid     []float32 // the stream entering the attention half and the MLP half, [n, hidden]
	qRaw, kRaw []float32 // Qwen3: the queries and keys before their norms
	q, k, v    []float32 // after the norms and RoPE: [n, heads·head_dim], [n, kv·head_dim] ×2
	att        []float32 // the attention's output, o_proj's input, [n, heads·head_dim]
	gate, up   []float32 // the MLP's pre-activations, [n, intermediate]
	act        []float32 // silu(gate)·up, down_proj's input
	xa         [numModules][]float32
}

// Trace runs the model (with its adapters, if any) over ids from position 0, as Logits would,
// and keeps what Backward needs. ids must be non-empty, inside the vocabulary and no longer
// than max_position_embeddings. Its hidden states are bit for bit those of Step over the same
// ids (TraceWith's too, checkpointed or not, without dropout).
func (m *Model) Trace(ids []int32) (*Trace, error) { return m.TraceWith(ids, TraceOptions{}) }

// TraceOptions are a trace's settings besides its tokens (TraceWith).
type TraceOptions struct {
	// Checkpointed keeps, of each layer, only the residual stream entering it (gradient
	// checkpointing): Backward then runs each layer's forward pass again from it, one layer
	// at a time, before taking that layer's gradients. The gradients are the whole trace's
	// bit for bit; the trace holds hidden_size floats a position and layer instead of all of
	// a layer's activations (TraceBytes), for about one more forward pass of the decoder.
	Checkpointed bool
	// Dropout is LoRA dropout, in [0, 1), as PEFT's lora_dropout trains: each adapter's input
	// (its term only; the frozen weight's product reads the input whole) has each element
	// zeroed with this probability and the others scaled by 1/(1−Dropout). The model must
	// have adapters. The masks are a function of Seed, the layer, the projection, the
	// position and the feature (dropoutMask), so Backward and a checkpointed trace's rerun
	// draw the same ones, and a sequence's masks do not depend on what else is trained with
	// it.
	Dropout float64
	// Seed chooses the dropout masks.
	Seed uint64
	// Prefix keeps each layer's keys and values (a position and layer take 2·num_key_value_heads·
	// head_dim floats more, twice that once a continuation has run its backward pass), so
	// that other traces can continue this one (TraceAfter): the episodes of one prompt,
	// traced as the prompt once and each episode's rest after it.
	Prefix bool
}

// TraceWith is Trace with options: checkpointing and LoRA dropout.
func (m *Model) TraceWith(ids []int32, o TraceOptions) (*Trace, error) {
	if err := m.checkDropout("Trace", o); err != nil {
		return nil, err
	}
	return m.trace(nil, ids, o)
}

// checkDropout reports options o's dropout where a trace cannot apply it (op names the call).
func (m *Model) checkDropout(op string, o TraceOptions) error {
	switch {
	case !(o.Dropout >= 0 && o.Dropout < 1):
		return fmt.Errorf("llm: %s: dropout %v is outside [0, 1)", op, o.Dropout)
	case o.Dropout > 0 && m.lora == nil:
		return fmt.Errorf("llm: %s: dropout without adapters", op)
	}
	return nil
}

// TraceAfter traces ids as the continuation of the sequence pre traced (with
// TraceOptions.Prefix, by the same model): its rows are positions pre.Len() … pre.Len()+len(ids)−1
// of the sequence pre's tokens then ids, and their attention reads pre's keys and values. Its
// hidden states are those of the whole sequence's trace at those positions (bit for bit
// without dropout: the attention kernels give the same bits however a sequence's positions
// are split, SetAttention), for the cost of its own positions only. Several traces may
// continue one prefix: that is what it is for (a group of episodes of one prompt, the prompt
// traced once).
//
// Its Backward adds to the adapters' (or BackwardWeights to the weights') gradients the terms
// of its own positions, and sums into pre the gradients of pre's keys and values: pre's own
// backward pass, which must come after every continuation's (it fails before), takes them on,
// with the gradient of pre's hidden states — that of the loss over pre's positions, summed
// over the sequences that contain them. Dropout masks are drawn at each row's position in
// the whole sequence. A continuation cannot be a prefix itself, and the traces must not run
// their backward passes concurrently.
func (m *Model) TraceAfter(pre *Trace, ids []int32, o TraceOptions) (*Trace, error) {
	switch {
	case pre == nil:
		return nil, errors.New("llm: TraceAfter: nil prefix")
	case pre.m != m:
		return nil, errors.New("llm: TraceAfter: the prefix was traced by another model")
	case pre.layers == nil:
		return nil, errors.New("llm: TraceAfter: the prefix's backward pass ran already")
	case pre.kv == nil:
		return nil, errors.New("llm: TraceAfter: the prefix was traced without TraceOptions.Prefix")
	case o.Prefix:
		return nil, errors.New("llm: TraceAfter: a continuation cannot be a prefix itself")
	}
	if err := m.checkDropout("TraceAfter", o); err != nil {
		return nil, err
	}
	tr, err := m.trace(pre, ids, o)
	if err != nil {
		return nil, err
	}
	pre.open++
	return tr, nil
}

// TraceBytes estimates the memory of a trace of n positions with options o, with the model's
// adapters (if any): held, what the trace keeps from TraceWith until Backward; and backward,
// what its Backward takes besides at its peak (the gradients flowing through one layer, the
// attention's blocks of weights, with dropout an adapter's masked input and its gradient,
// and, checkpointed, the layer it runs again).
func (m *Model) TraceBytes(n int, o TraceOptions) (held, backward float64) {
	cfg := m.cfg
	q, kv, I := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim, cfg.IntermediateSize
	xa := 0
	if m.lora != nil {
		for _, p := range m.lora.layers[0] {
			if p != nil {
				xa += m.lora.cfg.Rank
			}
		}
	}
	qk := q + kv // the queries and keys
	if m.layers[0].qNorm != nil {
		qk *= 2 // before their norms too
	}
	// per position of one layer: the stream twice, the queries, keys and values, the
	// attention's output, three MLP-wide rows and A·x
	layer := 4 * float64(2*cfg.HiddenSize+qk+kv+q+3*I+xa)
	L, N, H := float64(cfg.NumHiddenLayers), float64(n), float64(cfg.HiddenSize)
	// Backward's own: four stream-wide rows (the stream's gradient, a norm's output, a half's
	// input gradient and the other's, not yet collected), the attention output's gradient, the
	// queries', keys' and values' (the first two twice with Qwen3's norms), an MLP-wide
	// gradient, and the attention's weights and their gradients for a block of queries
	backward = 4*N*float64(4*cfg.HiddenSize+q+qk+kv+I) + 8*float64(min(n, attnBlock))*N
	if o.Dropout > 0 {
		backward += 8 * N * float64(max(cfg.HiddenSize, q, I))
	}
	var kept float64 // a prefix's keys and values, and their gradients from its continuations
	if o.Prefix {
		kept = 16 * N * L * float64(kv)
	}
	if o.Checkpointed {
		return N*4*H*(L+2) + kept, backward + N*layer
	}
	return N*(L*layer+8*H) + kept, backward
}

// TraceAfterBytes is TraceBytes for a trace of n positions that continues a prefix of p
// (TraceAfter): its backward pass's blocks of attention weights are p columns wider, and its
// attention reads the prefix's keys and values laid out anew. What the prefix keeps for it
// is the prefix's own (TraceBytes with TraceOptions.Prefix).
func (m *Model) TraceAfterBytes(p, n int, o TraceOptions) (held, backward float64) {
	held, backward = m.TraceBytes(n, o)
	P, D, kvw := float64(p), float64(m.cfg.HeadDim), float64(m.cfg.NumKeyValueHeads*m.cfg.HeadDim)
	return held, backward + 8*float64(min(n, attnBlock))*P + 8*(P+float64(n))*D + 4*P*kvw
}

// trace is TraceWith (pre nil) and TraceAfter, their options checked.
func (m *Model) trace(pre *Trace, ids []int32, o TraceOptions) (*Trace, error) {
	start := 0
	if pre != nil {
		start = pre.n
	}
	if err := m.checkIDs(start, ids); err != nil {
		return nil, err
	}
	cfg := m.cfg
	root := m.base()
	H, D, T := cfg.HiddenSize, cfg.HeadDim, len(ids)
	tr := &Trace{m: m, n: T, ids: slices.Clone(ids), cos: make([]float32, T*D/2), sin: make([]float32, T*D/2), dropout: o.Dropout, seed: o.Seed,
		start: start, pre: pre}
	if o.Prefix {
		tr.kv = make([]prefixKV, len(m.layers))
	}
	x := Floats(T * H)
	for t, id := range ids {
		for j, f := range m.invFreq {
			a := float64(start+t) * f
			tr.cos[t*D/2+j], tr.sin[t*D/2+j] = float32(m.ropeScale*math.Cos(a)), float32(m.ropeScale*math.Sin(a))
		}
		copy(x[t*H:(t+1)*H], root.embed[int(id)*H:])
	}
	for l := range m.layers {
		tl, next := tr.layer(l, x)
		if o.Prefix {
			tr.kv[l] = prefixKV{k: Floats(len(tl.k)), v: Floats(len(tl.v))}
			copy(tr.kv[l].k, tl.k)
			copy(tr.kv[l].v, tl.v)
		}
		if o.Checkpointed {
			tl.release()
			tl = traceLayer{x: x}
		}
		tr.layers = append(tr.layers, tl)
		x = next
	}
	tr.last = x
	tr.hidden = make([]float32, T*H)
	rmsNorm(tr.hidden, x, root.norm, H, cfg.RMSNormEps)
	return tr, nil
}

// layer runs layer l of the trace's model over x, the stream entering it ([n, hidden]), and
// returns what its backward pass reads and the stream leaving it.
func (tr *Trace) layer(l int, x []float32) (traceLayer, []float32) {
	m := tr.m
	cfg := m.cfg
	H, D, T := cfg.HiddenSize, cfg.HeadDim, tr.n
	nq, nkv, I := cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.IntermediateSize
	eps := cfg.RMSNormEps
	ly := &m.layers[l]
	tl := traceLayer{x: x}
	h := Floats(T * H)
	rmsNorm(h, x, ly.inputNorm, H, eps)
	tl.q = tr.proj(&tl, l, qProj, h, T, H, ly.wq, nq*D, ly.bq)
	tl.k = tr.proj(&tl, l, kProj, h, T, H, ly.wk, nkv*D, ly.bk)
	tl.v = tr.proj(&tl, l, vProj, h, T, H, ly.wv, nkv*D, ly.bv)
	if ly.qNorm != nil {
		tl.qRaw, tl.kRaw = tl.q, tl.k
		tl.q, tl.k = Floats(len(tl.qRaw)), Floats(len(tl.kRaw))
		rmsNorm(tl.q, tl.qRaw, ly.qNorm, D, eps)
		rmsNorm(tl.k, tl.kRaw, ly.kNorm, D, eps)
	}
	rope(tl.q, T, nq, D, tr.cos, tr.sin)
	rope(tl.k, T, nkv, D, tr.cos, tr.sin)
	tl.att = Floats(T * nq * D)
	tr.attend(l, &tl)
	tl.mid = Floats(len(x))
	copy(tl.mid, x)
	o := tr.proj(&tl, l, oProj, tl.att, T, nq*D, ly.wo, H, ly.bo)
	addTo(tl.mid, o)
	PutFloats(o)

	rmsNorm(h, tl.mid, ly.postNorm, H, eps)
	tl.gate = tr.proj(&tl, l, gateProj, h, T, H, ly.gate, I, ly.bGate)
	tl.up = tr.proj(&tl, l, upProj, h, T, H, ly.up, I, ly.bUp)
	tl.act = swiglu(tl.gate, tl.up, T, I)
	out := Floats(len(tl.mid))
	copy(out, tl.mid)
	d := tr.proj(&tl, l, downProj, tl.act, T, I, ly.down, H, ly.bDown)
	addTo(out, d)
	PutFloats(d, h)
	return tl, out
}

// attend is layer l's attention over the trace's queries: over its own positions, and
// those of the prefix it continues first (their keys laid out transposed, as a Span).
func (tr *Trace) attend(l int, tl *traceLayer) {
	cfg := tr.m.cfg
	D, T, nq, nkv := cfg.HeadDim, tr.n, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	if tr.pre == nil {
		attend(tl.att, tl.q, tl.k, tl.v, 0, T, nq, nkv, D)
		return
	}
	kvw, P, kv := nkv*D, tr.pre.n, tr.pre.kv[l]
	pt, ot := Floats(kvw*P), Floats(kvw*T)
	transposeInto(pt, P, kv.k, P, kvw, kvw)
	transposeInto(ot, T, tl.k, T, kvw, kvw)
	attendT(tl.att, tl.q, Span{Keys: pt, Stride: P, Values: kv.v, Len: P}, Span{Keys: ot, Stride: T, Values: tl.v, Len: T}, T, nq, nkv, D)
	PutFloats(pt, ot)
}

// release gives the layer's buffers back to the pool (PutFloats), all but its input x, which
// is the previous layer's output (or the embeddings'), and the adapters' products (xa).
func (tl *traceLayer) release() {
	PutFloats(tl.mid, tl.qRaw, tl.kRaw, tl.q, tl.k, tl.v, tl.att, tl.gate, tl.up, tl.act)
	x := tl.x
	*tl = traceLayer{x: x}
}

// swiglu is silu(gate)·up, row by row over the cores, as the forward pass computes it.
func swiglu(gate, up []float32, T, I int) []float32 {
	out := Floats(len(gate))
	swigluInto(out, gate, up, T, I)
	return out
}

// proj is Model.proj keeping the adapter's A·x in tl, the adapter reading its input through
// the trace's dropout masks.
func (tr *Trace) proj(tl *traceLayer, l, mod int, x []float32, rows, in int, w []float32, out int, b []float32) []float32 {
	m := tr.m
	if tr.dropout == 0 || m.lora.layers[l][mod] == nil {
		y, xa := m.projA(l, mod, x, rows, in, w, out, b)
		tl.xa[mod] = xa
		return y
	}
	y := m.frozenProj(l, mod, x, rows, in, w, out, b)
	xd := tr.drop(l, mod, x, in, nil)
	tl.xa[mod] = m.lora.add(l, mod, y, xd, rows)
	PutFloats(xd)
	return y
}

// drop returns x ([·, in] rows, a projection's input) through the dropout masks of layer l's
// projection mod, into dst (made when nil; it may be x).
func (tr *Trace) drop(l, mod int, x []float32, in int, dst []float32) []float32 {
	if dst == nil {
		dst = Floats(len(x)) // written whole
	}
	parallel.Rows(len(x)/in, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			dropoutMask(tr.seed, l, mod, tr.start+t, tr.dropout, x[t*in:(t+1)*in], dst[t*in:(t+1)*in])
		}
	})
	return dst
}

// dropoutMask writes to dst row x (the input of layer l's projection mod at position t, as
// module names index LoRAModules) through its LoRA dropout mask for seed: each element zeroed
// with probability p (multiplied by 0, without a branch), the others scaled by 1/(1−p). The
// mask is a function of (seed, l, mod, t, the element's index) alone: 32 bits of a SplitMix64
// stream per element, kept where they are at least p·2³².
func dropoutMask(seed uint64, l, mod, t int, p float64, x, dst []float32) {
	thr := uint64(p * (1 << 32))
	factor := [2]float32{float32(1 / (1 - p)), 0} // kept, dropped
	s := mix64(mix64(mix64(seed^0x6c6f72612d64726f)^uint64(l)<<32^uint64(mod)) ^ uint64(t))
	dst = dst[:len(x)]
	i := 0
	for ; i+2 <= len(x); i += 2 { // branch-free: each element's flag indexes factor
		s += 0x9e3779b97f4a7c15
		bits := mix64(s)
		dst[i] = x[i] * factor[((bits&0xffffffff)-thr)>>63]
		dst[i+1] = x[i+1] * factor[((bits>>32)-thr)>>63]
	}
	if i < len(x) {
		s += 0x9e3779b97f4a7c15
		dst[i] = x[i] * factor[((mix64(s)&0xffffffff)-thr)>>63]
	}
}

// mix64 is SplitMix64's finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Len is the number of positions traced.
func (tr *Trace) Len() int { return tr.n }

// Hidden returns the final hidden states, [Len, hidden_size] row-major: the final norm's output,
// which the LM head multiplies (Head) to give the logits. The slice is the trace's own; do not
// modify it.
func (tr *Trace) Hidden() []float32 { return tr.hidden }

// Head returns the LM head's matrix, [vocab_size, hidden_size] row-major (the embeddings when
// they are tied): the logits of hidden states h are h·Headᵀ. The slice is the model's own
// storage; do not modify it.
func (m *Model) Head() []float32 { return m.base().head }

// Backward adds to grads the gradient, with respect to the model's adapters, of a loss whose
// gradient with respect to Hidden is dh ([Len, hidden_size]). grads must be adapters of the
// trace's model's configuration (NewGradients makes them): their matrices receive the sums, in
// PEFT's layout. The model must have adapters. Backward may be called once per trace; it
// frees the trace's memory as it goes.
func (tr *Trace) Backward(dh []float32, grads *Adapters) error {
	m := tr.m
	switch {
	case tr.layers == nil:
		return errors.New("llm: Backward: the trace was used already")
	case tr.open > 0:
		return fmt.Errorf("llm: Backward: %d traces that continue this one have not run their backward pass", tr.open)
	case m.lora == nil:
		return errors.New("llm: Backward: the model has no adapters to train")
	case grads == nil:
		return errors.New("llm: Backward: nil gradients")
	case len(dh) != tr.n*m.cfg.HiddenSize:
		return fmt.Errorf("llm: Backward: %d gradient values for %d positions of %d", len(dh), tr.n, m.cfg.HiddenSize)
	}
	if err := grads.fits(m.cfg); err != nil {
		return fmt.Errorf("llm: Backward: %w", err)
	}
	if !sameAdapterShape(grads, m.lora) {
		return fmt.Errorf("llm: Backward: the gradients' adapters are rank %d on %v, the model's rank %d on %v",
			grads.cfg.Rank, grads.cfg.TargetModules, m.lora.cfg.Rank, m.lora.cfg.TargetModules)
	}
	tr.backward(dh, grads, nil)
	return nil
}

// backward is Backward into ga (the adapters' gradients; nil for none) and BackwardWeights
// into gw (every weight's but the head's; nil for none), the trace's checks done.
func (tr *Trace) backward(dh []float32, ga *Adapters, gw *WeightGrads) {
	m := tr.m
	cfg := m.cfg
	root := m.base()
	H, D, T := cfg.HiddenSize, cfg.HeadDim, tr.n
	nq, nkv, I := cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.IntermediateSize
	eps := cfg.RMSNormEps

	// The buffers below, and the layers' as each is done with, go back to the pool
	// (PutFloats) for the next trace: none is read after that.
	negSin := Floats(len(tr.sin)) // RoPE's backward pass: each pair turned back by its angle
	for i, v := range tr.sin {
		negSin[i] = -v
	}
	dx := zeros(T * H)
	rmsNormBack(dx, tr.last, root.norm, dh, H, eps)
	if gw != nil {
		normGainGrad(gw.g.norm, tr.last, dh, H, eps)
	}
	PutFloats(tr.last) // the last layer's output (or, with no layer, the embeddings' rows): only last held it
	tr.last, tr.hidden = nil, nil
	h := Floats(T * H)
	for l := len(tr.layers) - 1; l >= 0; l-- {
		ly, tl := &m.layers[l], &tr.layers[l]
		if tl.mid == nil { // checkpointed: this layer's forward pass again, from its input
			var out []float32
			*tl, out = tr.layer(l, tl.x)
			PutFloats(out)
		}

		// MLP half: x = mid + down(silu(gate)·up), gate and up over h = norm(mid).
		rmsNorm(h, tl.mid, ly.postNorm, H, eps)
		dAct := zeros(T * I)
		tr.projBack(ga, gw, tl, l, downProj, dx, tl.act, T, I, ly.down, H, dAct)
		PutFloats(tl.act)
		tl.act = nil
		swigluBack(tl.gate, tl.up, dAct, T, I) // dgate and dup, in place of gate and up
		PutFloats(dAct)
		dh2 := zeros(T * H)
		tr.projBack(ga, gw, tl, l, gateProj, tl.gate, h, T, H, ly.gate, I, dh2)
		tr.projBack(ga, gw, tl, l, upProj, tl.up, h, T, H, ly.up, I, dh2)
		PutFloats(tl.gate, tl.up)
		tl.gate, tl.up = nil, nil
		rmsNormBack(dx, tl.mid, ly.postNorm, dh2, H, eps)
		if gw != nil {
			normGainGrad(gw.g.layers[l].postNorm, tl.mid, dh2, H, eps)
		}
		PutFloats(dh2)

		// Attention half: mid = x + o(attend(rope(q), rope(k), v)) over h = norm(x).
		rmsNorm(h, tl.x, ly.inputNorm, H, eps)
		dAtt := zeros(T * nq * D)
		tr.projBack(ga, gw, tl, l, oProj, dx, tl.att, T, nq*D, ly.wo, H, dAtt)
		dq, dk, dv := zeros(T*nq*D), zeros(T*nkv*D), zeros(T*nkv*D)
		var pkv *prefixKV // the prefix's keys and values this trace's attention read, if any
		if tr.pre != nil {
			pkv = &tr.pre.kv[l]
			if pkv.dk == nil {
				pkv.dk, pkv.dv = zeros(len(pkv.k)), zeros(len(pkv.v))
			}
		}
		attendBack(dq, dk, dv, dAtt, tl.q, tl.k, tl.v, tl.att, T, nq, nkv, D, pkv)
		PutFloats(dAtt)
		if tr.kv != nil { // a prefix: the gradients of its keys and values from its continuations'
			if kv := tr.kv[l]; kv.dk != nil {
				addTo(dk, kv.dk)
				addTo(dv, kv.dv)
			}
			PutFloats(tr.kv[l].k, tr.kv[l].v, tr.kv[l].dk, tr.kv[l].dv)
			tr.kv[l] = prefixKV{}
		}
		rope(dq, T, nq, D, tr.cos, negSin)
		rope(dk, T, nkv, D, tr.cos, negSin)
		if ly.qNorm != nil {
			dqr, dkr := zeros(len(dq)), zeros(len(dk))
			rmsNormBack(dqr, tl.qRaw, ly.qNorm, dq, D, eps)
			rmsNormBack(dkr, tl.kRaw, ly.kNorm, dk, D, eps)
			if gw != nil {
				normGainGrad(gw.g.layers[l].qNorm, tl.qRaw, dq, D, eps)
				normGainGrad(gw.g.layers[l].kNorm, tl.kRaw, dk, D, eps)
			}
			PutFloats(dq, dk)
			dq, dk = dqr, dkr
		}
		dh1 := zeros(T * H)
		tr.projBack(ga, gw, tl, l, qProj, dq, h, T, H, ly.wq, nq*D, dh1)
		tr.projBack(ga, gw, tl, l, kProj, dk, h, T, H, ly.wk, nkv*D, dh1)
		tr.projBack(ga, gw, tl, l, vProj, dv, h, T, H, ly.wv, nkv*D, dh1)
		PutFloats(dq, dk, dv)
		rmsNormBack(dx, tl.x, ly.inputNorm, dh1, H, eps)
		if gw != nil {
			normGainGrad(gw.g.layers[l].inputNorm, tl.x, dh1, H, eps)
		}
		PutFloats(dh1, tl.x)
		tl.release()
		tr.layers[l] = traceLayer{}
	}
	PutFloats(h, negSin, tr.bufs[0], tr.bufs[1])
	tr.layers, tr.bufs, tr.kv = nil, [2][]float32{}, nil
	if tr.pre != nil {
		tr.pre.open--
		tr.pre = nil
	}
	if gw != nil { // the embeddings' rows the ids read: dx is the stream's gradient at layer 0
		ge := gw.g.embed
		for t, id := range tr.ids {
			addTo(ge[int(id)*H:(int(id)+1)*H], dx[t*H:(t+1)*H])
		}
	}
	PutFloats(dx)
}

// projBack is the backward pass of proj for projection mod of layer l: given dy, the
// gradient of its output [rows, out], and x, its input [rows, in], it adds the input's
// gradient to dx and, where the projection is adapted, the adapter's gradients to grads. The
// weight w is [out, in]; nil means the model holds it transposed (Share).
func (tr *Trace) projBack(ga *Adapters, gw *WeightGrads, tl *traceLayer, l, mod int, dy, x []float32, rows, in int, w []float32, out int, dx []float32) {
	m := tr.m
	if w != nil { // dx += dy·W, W [out, in]
		mul(rows, in, out, dy, out, 1, w, in, dx, in, true)
	} else { // dx += dy·tᵀ, t [in, out]: as (t·dyᵀ)ᵀ, each operand read by rows (the transposes cost rows·(in+out))
		rp := paddedWidth(rows)
		dyT, dxT := tr.scratch(0, out*rp), tr.scratch(1, in*rp)
		if rp > rows { // the padding's columns: zeros
			for j := range out {
				clear(dyT[j*rp+rows : (j+1)*rp])
			}
		}
		transposeInto(dyT, rp, dy, rows, out, out)
		mul(in, rp, out, m.layers[l].t[mod], out, 1, dyT, rp, dxT, rp, false)
		addTransposed(dx, dxT, in, rows, rp)
	}
	if gw != nil {
		gw.weightGrad(l, mod, dy, x, rows, in, out)
	}
	if m.lora == nil || m.lora.layers[l][mod] == nil {
		return
	}
	p := m.lora.layers[l][mod]
	r, s := m.lora.cfg.Rank, m.lora.scale
	xa := tl.xa[mod] // A·drop(x), [rows, r]
	// y += s·(drop(x)·Aᵀ)·Bᵀ: dB += s·dyᵀ·xa, d(xa) = s·dy·B, dA += d(xa)ᵀ·drop(x),
	// dx += drop(d(xa)·A) (the same mask: zeroed where the input was, scaled alike). Without
	// ga (BackwardWeights) only dx.
	if ga != nil {
		sxa := Floats(len(xa))
		for i, v := range xa {
			sxa[i] = s * v
		}
		mul(out, r, rows, dy, 1, out, sxa, r, ga.layers[l][mod].b, r, true)
		PutFloats(sxa)
	}
	dxa := Floats(rows * r) // written whole by the product
	mul(rows, r, out, dy, out, 1, p.b, r, dxa, r, false)
	for i := range dxa {
		dxa[i] *= s
	}
	if tr.dropout == 0 {
		if ga != nil {
			mul(r, in, rows, dxa, 1, r, x, in, ga.layers[l][mod].a, in, true)
		}
		mul(rows, in, r, dxa, r, 1, p.a, in, dx, in, true)
	} else {
		if ga != nil {
			xd := tr.drop(l, mod, x, in, nil)
			mul(r, in, rows, dxa, 1, r, xd, in, ga.layers[l][mod].a, in, true)
			PutFloats(xd)
		}
		dxd := Floats(rows * in)
		mul(rows, in, r, dxa, r, 1, p.a, in, dxd, in, false)
		addTo(dx, tr.drop(l, mod, dxd, in, dxd))
		PutFloats(dxd)
	}
	PutFloats(dxa, xa)
	tl.xa[mod] = nil
}

// attendBack is the backward pass of attend over one sequence from position 0: given q, k
// and v as attend read them (after RoPE), its output att and the output's gradient dAtt, it
// writes the gradients of q, k and v. The attention weights are recomputed from q and k, head
// by head: P = softmax(q·kᵀ/√D) over the visible positions, dV = Pᵀ·dO, dP = dO·Vᵀ,
// dS = P ⊙ (dP − rowsum(dO ⊙ O)), dQ = dS·K/√D, dK = dSᵀ·Q/√D. The queries go in blocks of
// attnBlock rows, each against the keys its last row sees: the products cover the causal
// triangle (and a block's diagonal square), not the whole width × width square, and the
// weights held are attnBlock × width, twice. With pre (a continuation's, TraceAfter) the
// sequence's first positions are pre's: every query sees them before its own, and the
// gradients of their keys and values are added to pre.dk and pre.dv.
func attendBack(dq, dk, dv, dAtt, q, k, v, att []float32, T, nq, nkv, D int, pre *prefixKV) {
	clear(dk)
	clear(dv)
	scale := float32(1 / math.Sqrt(float64(D)))
	group, qw, kvw := nq/nkv, nq*D, nkv*D
	P := 0 // the prefix's positions
	if pre != nil {
		P = len(pre.k) / kvw
	}
	N := P + T // every position's column
	bq := min(T, attnBlock)
	p, dp := Floats(bq*N), Floats(bq*N) // each product below writes the part of them it reads
	defer PutFloats(p, dp)
	for kh := range nkv {
		var kt, vt []float32 // [D, N]: the prefix's keys (values) transposed, then the trace's
		if P == 0 {
			kt, vt = transposeStrided(k[kh*D:], T, D, kvw), transposeStrided(v[kh*D:], T, D, kvw)
		} else {
			kt, vt = make([]float32, D*N), make([]float32, D*N)
			transposeInto(kt, N, pre.k[kh*D:], P, D, kvw)
			transposeInto(kt[P:], N, k[kh*D:], T, D, kvw)
			transposeInto(vt, N, pre.v[kh*D:], P, D, kvw)
			transposeInto(vt[P:], N, v[kh*D:], T, D, kvw)
		}
		for g := range group {
			hd := kh*group + g
			for t0 := 0; t0 < T; t0 += bq {
				t1 := min(T, t0+bq)
				n, w := t1-t0, P+t1 // the block's rows, and the keys its last row sees
				mul(n, w, D, q[t0*qw+hd*D:], qw, 1, kt, N, p, w, false)
				mul(n, w, D, dAtt[t0*qw+hd*D:], qw, 1, vt, N, dp, w, false)
				parallel.Rows(n, func(lo, hi int) {
					for r := lo; r < hi; r++ {
						t := t0 + r
						o, do := att[t*qw+hd*D:t*qw+hd*D+D], dAtt[t*qw+hd*D:t*qw+hd*D+D]
						var delta float32
						for i := range o {
							delta += o[i] * do[i]
						}
						row, drow := p[r*w:(r+1)*w], dp[r*w:(r+1)*w]
						vis := row[:P+t+1]
						Softmax(vis, scale)
						for j := range vis {
							drow[j] = vis[j] * (drow[j] - delta) * scale
						}
						clear(row[P+t+1:])
						clear(drow[P+t+1:])
					}
				})
				if P == 0 {
					mul(n, D, w, dp, w, 1, k[kh*D:], kvw, dq[t0*qw+hd*D:], qw, false)
				} else {
					mul(n, D, P, dp, w, 1, pre.k[kh*D:], kvw, dq[t0*qw+hd*D:], qw, false)
					mul(n, D, t1, dp[P:], w, 1, k[kh*D:], kvw, dq[t0*qw+hd*D:], qw, true)
					mul(P, D, n, dp, 1, w, q[t0*qw+hd*D:], qw, pre.dk[kh*D:], kvw, true)
					mul(P, D, n, p, 1, w, dAtt[t0*qw+hd*D:], qw, pre.dv[kh*D:], kvw, true)
				}
				mul(t1, D, n, dp[P:], 1, w, q[t0*qw+hd*D:], qw, dk[kh*D:], kvw, true)
				mul(t1, D, n, p[P:], 1, w, dAtt[t0*qw+hd*D:], qw, dv[kh*D:], kvw, true)
			}
		}
	}
}

// attnBlock is how many query rows attendBack takes at once (a variable for tests).
var attnBlock = 128

// Softmax replaces x by softmax(scale·x), in place: the attention's weights of one query
// over the positions it sees, as the forward kernels (SetAttention's) and the backward pass
// compute them, the exponentials through the SetExpSum kernel.
func Softmax(x []float32, scale float32) {
	if softmaxKernel != nil {
		softmaxKernel(x, scale)
		return
	}
	SoftmaxLoop(x, scale)
}

// SoftmaxLoop is Softmax without SetSoftmax's kernel (but with SetExpSum's): the portable
// steps whose bits that kernel must give. Each element is scaled (one float32 product), the
// largest scaled value is the exponentials' shift, and each exponential is divided by their
// sum (one float32 division).
func SoftmaxLoop(x []float32, scale float32) {
	mx := float32(math.Inf(-1))
	for j, v := range x {
		x[j] = v * scale
		mx = max(mx, x[j])
	}
	sum := ExpSum(x, mx)
	for j := range x {
		x[j] /= sum
	}
}

// ExpSum replaces each x by exp(x − shift) and returns their sum: the installed kernel
// (SetExpSum) or the portable loop (a SetSoftmax kernel calls it, as SoftmaxLoop does).
func ExpSum(x []float32, shift float32) float32 {
	if expSumKernel != nil {
		return expSumKernel(x, shift)
	}
	var sum float32
	for j, v := range x {
		e := float32(math.Exp(float64(v - shift)))
		x[j] = e
		sum += e
	}
	return sum
}

// softmaxKernel, when set by SetSoftmax, computes Softmax.
var softmaxKernel func(x []float32, scale float32)

// SetSoftmax installs f for Softmax: f(x, scale) must leave in x the bits SoftmaxLoop does
// (the same products, shift, exponentials and divisions, on vectors). nil restores the loop.
func SetSoftmax(f func(x []float32, scale float32)) { softmaxKernel = f }

// expSumKernel, when set by SetExpSum, computes ExpSum.
var expSumKernel func(x []float32, shift float32) float32

// SetExpSum installs f for the backward pass's softmax: f(x, shift) replaces each element of x
// by exp(x − shift) and returns their sum. nil restores the portable loop.
func SetExpSum(f func(x []float32, shift float32) float32) { expSumKernel = f }

// rmsNormBack adds to dx the gradient of rmsNorm's input x ([·, n] rows) given its output's
// gradient dy, with w frozen: dx += r·(w⊙dy) − x·r³·mean(w⊙dy⊙x), r = 1/sqrt(mean(x²) + eps).
func rmsNormBack(dx, x, w, dy []float32, n int, eps float64) {
	parallel.Rows(len(x)/n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, gr, dr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n], dx[r*n:(r+1)*n]
			var ss, sg float64
			for i, v := range xr {
				ss += float64(v) * float64(v)
				sg += float64(w[i]) * float64(gr[i]) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(n)+eps)
			c := float32(sg / float64(n) * inv * inv * inv)
			inv32 := float32(inv)
			for i, v := range xr {
				dr[i] += inv32*w[i]*gr[i] - c*v
			}
		}
	})
}

// paddedWidth is the column count a product of n columns is given when its operands are
// laid out for it anyway: n rounded up to a multiple of 32 where that adds at most 8 columns
// (zeros), so that its last columns fill the host kernels' widest blocks rather than
// narrower, slower ones (a 255-position sequence's last 31 columns); else n. Each real
// column is the same chain of multiply-adds either way, so the bits do not change.
func paddedWidth(n int) int {
	if r := n % 32; r >= 24 {
		return n + 32 - r
	}
	return n
}

// addTransposed adds to dst ([c, r] row-major) the transpose of src ([r, c], row i at
// src[i·lds]).
func addTransposed(dst, src []float32, r, c, lds int) { transposeAny(dst, r, src, r, c, lds, true) }

// transposeF returns the [c, r] transpose of the row-major [r, c] matrix x.
func transposeF(x []float32, r, c int) []float32 { return transposeStrided(x, r, c, c) }

// transposeStrided returns the [c, r] transpose of the r×c matrix whose row i starts at
// x[i·ld].
func transposeStrided(x []float32, r, c, ld int) []float32 {
	t := make([]float32, r*c)
	transposeInto(t, r, x, r, c, ld)
	return t
}

// transposeInto writes into t (row j at t[j·ldt]) the [c, r] transpose of the r×c matrix
// whose row i starts at x[i·ld]; t's columns past r are left as they are.
func transposeInto(t []float32, ldt int, x []float32, r, c, ld int) {
	transposeAny(t, ldt, x, r, c, ld, false)
}

// transposeAny is TransposeTiles through SetTranspose's kernel where one is installed.
func transposeAny(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	if transposeKernel != nil {
		transposeKernel(dst, ldd, src, r, c, lds, add)
		return
	}
	TransposeTiles(dst, ldd, src, r, c, lds, add)
}

// TransposeTiles is the portable transpose, the one SetTranspose's kernels must match: it
// writes into dst, row j at dst[j·ldd], the transpose of the r×c matrix at src (row i at
// src[i·lds]), dst[j·ldd+i] = src[i·lds+j] for i < r, j < c, or with add adds it (one float32
// addition an element), and leaves the rest of dst alone. It goes in 16×16 tiles: a tile
// reads 16 cache lines of src and writes 16 of dst, so both stay in the L1 cache (an
// element-by-element loop writes every element to another line of dst: 3.6 ns an element on
// the Zen 5 kind, 13 ns in a model's loading).
func TransposeTiles(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	const tile = 16
	for i0 := 0; i0 < r; i0 += tile {
		i1 := min(i0+tile, r)
		for j0 := 0; j0 < c; j0 += tile {
			j1 := min(j0+tile, c)
			for i := i0; i < i1; i++ {
				row := src[i*lds+j0 : i*lds+j1]
				if add {
					for j, v := range row {
						dst[(j0+j)*ldd+i] += v
					}
				} else {
					for j, v := range row {
						dst[(j0+j)*ldd+i] = v
					}
				}
			}
		}
	}
}

// NewGradients returns zero adapters shaped as a (its configuration, layers and matrices): the
// sums a Trace's Backward adds gradients into, named as a's matrices are.
func (a *Adapters) NewGradients() *Adapters {
	g := a.Clone()
	for _, p := range g.params {
		clear(p.Data)
	}
	return g
}

// sameAdapterShape reports whether a and b adapt the same projections at the same rank.
func sameAdapterShape(a, b *Adapters) bool {
	if a.cfg.Rank != b.cfg.Rank || len(a.layers) != len(b.layers) {
		return false
	}
	for l := range a.layers {
		for mod := range numModules {
			if (a.layers[l][mod] == nil) != (b.layers[l][mod] == nil) {
				return false
			}
		}
	}
	return true
}
