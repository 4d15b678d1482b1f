package llm

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"agrl.dev/internal/parallel"
)

// A Cache holds one sequence's keys and values, layer by layer, so that each new token
// attends to the earlier ones without recomputing them. Make it with Model.NewCache and feed
// it with Model.Step or Model.Next. A Cache belongs to one model and one sequence, and is not
// safe for concurrent use; caches cloned from one another may be used concurrently (what they
// share is never written again).
type Cache struct {
	m    *Model
	n    int // positions held, the shared prefix's included
	room int // positions the own buffers have room for (n−pre ≤ room)
	// A clone shares the positions it was cloned with, [0, pre), instead of copying them: pk
	// and pv are, per layer, the buffers that hold them (another cache's, laid out as k and v
	// below with rows pldk apart), which their owner never writes again — a cache only
	// appends, past its own length.
	pre    int
	pldk   int
	pk, pv [][]float32
	// k and v hold, per layer, the cache's own positions [pre, n), num_key_value_heads·head_dim
	// values each: keys after RoPE (and Qwen3's k_norm), values as projected. The keys are laid
	// out transposed, the way attention multiplies them (q·Kᵀ), so that a decoding step reads
	// them as they are instead of transposing every cached key again: dimension d of key-value
	// head h at position pre+j is k[l][(h·head_dim + d)·room + j]. The values are rows,
	// v[l][j·kvw + i].
	k, v [][]float32
}

// NewCache returns an empty cache for m.
func (m *Model) NewCache() *Cache {
	return &Cache{m: m, k: make([][]float32, len(m.layers)), v: make([][]float32, len(m.layers))}
}

// Len is the number of positions the cache holds: the tokens fed to it so far.
func (c *Cache) Len() int { return c.n }

// Clone returns an independent continuation of c, to continue one prefix in several ways
// (say, G samples of one prompt) without running the prefix again: appending to either cache
// leaves the other as it was. The clone shares c's positions
// instead of copying them (neither cache ever writes them again), so a clone costs memory
// only for the positions appended to it afterwards; a clone of a clone shares what the first
// one shared and copies the positions appended to it since.
func (c *Cache) Clone() *Cache {
	d := &Cache{m: c.m, n: c.n, k: make([][]float32, len(c.k)), v: make([][]float32, len(c.v))}
	switch {
	case c.pre > 0:
		d.pre, d.pldk, d.pk, d.pv = c.pre, c.pldk, c.pk, c.pv
		if c.n > c.pre {
			d.moveTo(c, d.roomFor(c.n-c.pre))
		}
	case c.n > 0:
		// c's own buffers become d's prefix: the slices as they are now (c's may move later).
		d.pre, d.pldk, d.pk, d.pv = c.n, c.room, slices.Clone(c.k), slices.Clone(c.v)
	}
	return d
}

// roomFor is the room a cache's own buffers take when they must hold n positions: a quarter
// more and a few, so that appending a token at a time moves them O(log n) times, but never
// more than max_position_embeddings allows after the shared prefix (no sequence grows past
// it).
func (c *Cache) roomFor(n int) int {
	return max(n, min(n+n/4+16, c.m.cfg.MaxPositionEmbeddings-c.pre))
}

// reserve makes room in c for n positions in all (the prefix's included), moving its buffers
// if they are too small.
func (c *Cache) reserve(n int) {
	if n-c.pre > c.room {
		c.moveTo(c, c.roomFor(n-c.pre))
	}
}

// moveTo sets d's buffers to fresh ones of room positions holding src's own positions (d may
// be src: its buffers then grow; otherwise d shares src's prefix).
func (d *Cache) moveTo(src *Cache, room int) {
	cfg := src.m.cfg
	kvw, n := cfg.NumKeyValueHeads*cfg.HeadDim, src.n-src.pre
	for l := range src.k {
		k, v := make([]float32, kvw*room), make([]float32, kvw*room)
		if n > 0 {
			for r := range kvw {
				copy(k[r*room:r*room+n], src.k[l][r*src.room:])
			}
			copy(v, src.v[l][:n*kvw])
		}
		d.k[l], d.v[l] = k, v
	}
	d.room = room
}

// spans returns layer l's cached positions as attention reads them, when the cache holds
// n positions: the shared prefix (possibly empty) and the cache's own positions.
func (c *Cache) spans(l, n int) (Span, Span) {
	var pre Span
	if c.pre > 0 {
		pre = Span{Keys: c.pk[l], Stride: c.pldk, Values: c.pv[l], Len: c.pre}
	}
	return pre, Span{Keys: c.k[l], Stride: c.room, Values: c.v[l], Len: n - c.pre}
}

// Logits runs the model on the whole sequence ids and returns the logits at every position:
// row t scores the token that follows ids[:t+1] (vocab_size values, before softmax). It is
// Step on a fresh cache.
func (m *Model) Logits(ids []int32) ([][]float32, error) {
	return m.Step(m.NewCache(), ids)
}

// Step appends ids to the sequence in c and returns the logits at each of their positions,
// as Logits would return them for the whole sequence: row t scores the token after
// ids[t]. ids must be non-empty, every id inside the vocabulary, and the sequence no longer
// than max_position_embeddings; on an error c is unchanged.
func (m *Model) Step(c *Cache, ids []int32) ([][]float32, error) {
	return m.forward(c, ids, false)
}

// Next is Step returning only the logits at the last position, the scores of the token that
// follows: it skips the LM head (vocab_size·hidden_size per position) at the other positions.
func (m *Model) Next(c *Cache, ids []int32) ([]float32, error) {
	rows, err := m.forward(c, ids, true)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// check reports why ids cannot be appended to c.
func (m *Model) check(c *Cache, ids []int32) error {
	switch {
	case c == nil:
		return errors.New("llm: nil cache")
	case c.m == nil:
		return errors.New("llm: the cache was not made by NewCache")
	case c.m != m:
		return errors.New("llm: the cache belongs to another model")
	}
	return m.checkIDs(c.n, ids)
}

// checkIDs checks ids as the tokens at positions after, after+1, …: at least one, each inside
// the vocabulary, none past max_position_embeddings.
func (m *Model) checkIDs(after int, ids []int32) error {
	switch {
	case len(ids) == 0:
		return errors.New("llm: no tokens")
	case after+len(ids) > m.cfg.MaxPositionEmbeddings:
		return fmt.Errorf("llm: %d tokens after %d exceed max_position_embeddings %d",
			len(ids), after, m.cfg.MaxPositionEmbeddings)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= m.cfg.VocabSize {
			return fmt.Errorf("llm: token %d (position %d) is outside the vocabulary [0, %d)", id, after+i, m.cfg.VocabSize)
		}
	}
	return nil
}

// NextBatch is Next for several sequences at once: it appends ids[i] to caches[i] and
// returns, for each i, the logits of the token that follows. The sequences share every pass
// over the weights — their rows go through each projection, and the LM head, together — which
// is what makes decoding a group of episodes cheaper than decoding them one by one (batch-1
// decoding reads every weight for one token). Each sequence's logits are bit for bit those
// Next returns for it alone: every product computes each row on its own (the same chain of
// multiply-adds, whatever the other rows), and attention runs per sequence (or, for decoding
// steps over one shared prefix, SetSharedAttention's kernel, which gives each the same
// bits). Every cache must
// be distinct and each (cache, ids) valid as for Next; on an error no cache is changed.
func (m *Model) NextBatch(caches []*Cache, ids [][]int32) ([][]float32, error) {
	flat, err := m.NextBatchFlat(caches, ids)
	if err != nil {
		return nil, err
	}
	V := m.cfg.VocabSize
	out := make([][]float32, len(caches))
	for i := range out {
		out[i] = flat[i*V : (i+1)*V : (i+1)*V]
	}
	return out, nil
}

// NextBatchFlat is NextBatch with the logits in one buffer, [len(caches), vocab]: sequence
// i's are flat[i·vocab : (i+1)·vocab]. The buffer comes from the pool that the forward pass
// takes its working memory from (Floats): a caller that decodes step after step gives it back
// with PutFloats once it reads none of the logits any more, and a later step then writes its
// logits there instead of in fresh memory (at a real shape and batch 8, 1.5 MB a step, which
// would otherwise be nearly all of decoding's garbage).
func (m *Model) NextBatchFlat(caches []*Cache, ids [][]int32) ([]float32, error) {
	if len(caches) != len(ids) {
		return nil, fmt.Errorf("llm: NextBatch: %d caches for %d id lists", len(caches), len(ids))
	}
	flat, _, err := m.forwardFlat(caches, ids, true)
	return flat, err
}

// StepBatch is Step for several sequences at once: it appends ids[i] to caches[i] and returns,
// for each i, the logits at every one of ids[i]'s positions. Like NextBatch, the sequences
// share every pass over the weights, and each sequence's logits are bit for bit those Step
// returns for it alone. Every cache must be distinct and each (cache, ids) valid as for Step;
// on an error no cache is changed.
func (m *Model) StepBatch(caches []*Cache, ids [][]int32) ([][][]float32, error) {
	if len(caches) != len(ids) {
		return nil, fmt.Errorf("llm: StepBatch: %d caches for %d id lists", len(caches), len(ids))
	}
	return m.forwardMany(caches, ids, false)
}

// forward runs ids (T tokens at positions c.n, c.n+1, ...) through the model, appending their
// keys and values to c, and returns the logits of every position, or of the last one only.
func (m *Model) forward(c *Cache, ids []int32, lastOnly bool) ([][]float32, error) {
	rows, err := m.forwardMany([]*Cache{c}, [][]int32{ids}, lastOnly)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// forwardMany is forward for several sequences: their rows are stacked, [Σ T_i, H], for the
// products and the norms (which treat every row on its own), while RoPE takes each row's own
// position and attention each sequence's own cache. It returns each sequence's logit rows.
func (m *Model) forwardMany(caches []*Cache, ids [][]int32, lastOnly bool) ([][][]float32, error) {
	flat, heads, err := m.forwardFlat(caches, ids, lastOnly)
	if err != nil {
		return nil, err
	}
	V := m.cfg.VocabSize
	out := make([][][]float32, len(caches))
	for i := range caches {
		for r := heads[i]; r < heads[i+1]; r++ {
			out[i] = append(out[i], flat[r*V:(r+1)*V:(r+1)*V])
		}
	}
	return out, nil
}

// forwardFlat is forwardMany with the logits as they come from the LM head: one buffer of
// rows, [heads[len(caches)], vocab], sequence i's rows [heads[i], heads[i+1]).
func (m *Model) forwardFlat(caches []*Cache, ids [][]int32, lastOnly bool) (flat []float32, heads []int, err error) {
	x, off, err := m.trunk(caches, ids)
	if err != nil {
		return nil, nil, err
	}
	defer PutFloats(x)
	H := m.cfg.HiddenSize
	// The LM head, over the rows asked for: every row, or each sequence's last.
	last := x
	heads = make([]int, len(caches)+1) // sequence i's logit rows are [heads[i], heads[i+1])
	if lastOnly {
		// Each sequence's last row moves up to row i of x, in place: row i's source,
		// off[i+1]-1, is at or past i, so no row is read after it is overwritten.
		last = x[:len(caches)*H]
		for i := range caches {
			copy(last[i*H:(i+1)*H], x[(off[i+1]-1)*H:off[i+1]*H])
			heads[i+1] = i + 1
		}
	} else {
		copy(heads, off)
	}
	root := m.base()
	rmsNorm(last, last, root.norm, H, m.cfg.RMSNormEps)
	return headProduct(last, len(last)/H, H, root.head, m.cfg.VocabSize), heads, nil
}

// StepBatchHead is StepBatch with the logits handed out a piece at a time: the positions of
// every sequence go through the layers together, as in StepBatch, and the LM head then runs
// over at most rows of them at a time, each piece's logits passed to f and taken back when
// it returns. The rows are the sequences' positions stacked in order (sequence i's are
// Σ_{j<i} len(ids[j]) onwards); f(lo, z) gets rows [lo, lo + len(z)/vocab) as z, [rows,
// vocab], which it must not keep. A pass over many positions reads each weight once for all
// of them while the logits held at once stay rows × vocab floats (at Qwen3's vocabulary,
// 151,936 floats a row, 512 rows would be 311 MB). Each row's logits are bit for bit
// StepBatch's: every product and norm computes a row on its own. The caches are appended to
// before the first f; an error from f stops the pieces and is returned.
func (m *Model) StepBatchHead(caches []*Cache, ids [][]int32, rows int, f func(lo int, z []float32) error) error {
	if len(caches) != len(ids) {
		return fmt.Errorf("llm: StepBatchHead: %d caches for %d id lists", len(caches), len(ids))
	}
	if rows < 1 {
		return fmt.Errorf("llm: StepBatchHead: %d rows a piece", rows)
	}
	x, off, err := m.trunk(caches, ids)
	if err != nil {
		return err
	}
	defer PutFloats(x)
	H, V, T := m.cfg.HiddenSize, m.cfg.VocabSize, off[len(caches)]
	root := m.base()
	rmsNorm(x, x, root.norm, H, m.cfg.RMSNormEps)
	for lo := 0; lo < T; lo += rows {
		hi := min(T, lo+rows)
		z := headProduct(x[lo*H:hi*H], hi-lo, H, root.head, V)
		err := f(lo, z)
		PutFloats(z)
		if err != nil {
			return err
		}
	}
	return nil
}

// trunk runs ids through the model's layers, appending their keys and values to caches, and
// returns the residual stream after the last layer (before the final norm), [T, hidden], in a
// buffer from Floats that the caller gives back, with off: sequence i's rows are
// [off[i], off[i+1]).
func (m *Model) trunk(caches []*Cache, ids [][]int32) (x []float32, off []int, err error) {
	for i, c := range caches {
		if err := m.check(c, ids[i]); err != nil {
			if len(caches) > 1 {
				err = fmt.Errorf("sequence %d: %w", i, err)
			}
			return nil, nil, err
		}
		for _, d := range caches[:i] {
			if d == c {
				return nil, nil, fmt.Errorf("llm: sequence %d: its cache is also sequence %d's", i, slices.Index(caches, c))
			}
		}
	}
	cfg := m.cfg
	root := m.base() // embeddings, final norm and head read where Share may have put them
	H, D := cfg.HiddenSize, cfg.HeadDim
	nq, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	eps := cfg.RMSNormEps
	off = make([]int, len(caches)+1) // sequence i's rows are [off[i], off[i+1])
	for i := range caches {
		off[i+1] = off[i] + len(ids[i])
	}
	T := off[len(caches)]

	// cos and sin of every new row's angles at its own position: [T, D/2]. These buffers, and
	// the products' results (the pool's where linearT and product made them, fresh from
	// SetLinear's kernel or the portable loops), go back to the pool (PutFloats) once read (the
	// cache keeps copies of the keys and values), for the next pass and the traces to reuse.
	cos, sin := Floats(T*D/2), Floats(T*D/2)
	x = Floats(T * H) // the residual stream, [T, H]; every row written just below
	defer PutFloats(cos, sin)
	for i, c := range caches {
		for t, id := range ids[i] {
			r := off[i] + t
			for j, f := range m.invFreq {
				a := float64(c.n+t) * f
				cos[r*D/2+j], sin[r*D/2+j] = float32(m.ropeScale*math.Cos(a)), float32(m.ropeScale*math.Sin(a))
			}
			copy(x[r*H:(r+1)*H], root.embed[int(id)*H:])
		}
	}
	for i, c := range caches {
		c.reserve(c.n + len(ids[i]))
	}
	h, att := Floats(T*H), Floats(T*nq*D) // written whole by rmsNorm and attendT
	defer PutFloats(h, att)
	groups, joint := sharedGroups(caches, ids)
	for l := range m.layers {
		ly := &m.layers[l]

		// Attention: x += o(attend(rope(q), rope(k), v)) over h = norm(x).
		rmsNorm(h, x, ly.inputNorm, H, eps)
		q := m.proj(l, qProj, h, T, H, ly.wq, nq*D, ly.bq)  // [T, nq·D]
		k := m.proj(l, kProj, h, T, H, ly.wk, nkv*D, ly.bk) // [T, nkv·D]
		v := m.proj(l, vProj, h, T, H, ly.wv, nkv*D, ly.bv)
		if ly.qNorm != nil { // Qwen3: each head normalised before RoPE
			rmsNorm(q, q, ly.qNorm, D, eps)
			rmsNorm(k, k, ly.kNorm, D, eps)
		}
		rope(q, T, nq, D, cos, sin)
		rope(k, T, nkv, D, cos, sin)
		eachSequence(len(caches), func(i int) {
			c, n, kvw := caches[i], off[i+1]-off[i], nkv*D
			own := c.n - c.pre // the new positions' first column in the cache's own buffers
			transposeInto(c.k[l][own:], c.room, k[off[i]*kvw:], n, kvw, kvw)
			copy(c.v[l][own*kvw:], v[off[i]*kvw:off[i+1]*kvw])
			if !joint[i] {
				pre, mine := c.spans(l, c.n+n)
				attendT(att[off[i]*nq*D:off[i+1]*nq*D], q[off[i]*nq*D:off[i+1]*nq*D], pre, mine, n, nq, nkv, D)
			}
		})
		for _, g := range groups { // one decoding step each, over one shared prefix
			outs, qs, owns := make([][]float32, len(g)), make([][]float32, len(g)), make([]Span, len(g))
			var pre Span
			for e, i := range g {
				c := caches[i]
				outs[e], qs[e] = att[off[i]*nq*D:off[i+1]*nq*D], q[off[i]*nq*D:off[i+1]*nq*D]
				pre, owns[e] = c.spans(l, c.n+1)
			}
			sharedAttentionKernel(outs, qs, pre, owns, nq, nkv, D)
		}
		o := m.proj(l, oProj, att, T, nq*D, ly.wo, H, ly.bo)
		addTo(x, o)
		PutFloats(q, k, v, o)

		// MLP: x += down(silu(gate(h)) · up(h)) over h = norm(x).
		rmsNorm(h, x, ly.postNorm, H, eps)
		I := cfg.IntermediateSize
		g := m.proj(l, gateProj, h, T, H, ly.gate, I, ly.bGate)
		u := m.proj(l, upProj, h, T, H, ly.up, I, ly.bUp)
		swigluInto(g, g, u, T, I)
		d := m.proj(l, downProj, g, T, I, ly.down, H, ly.bDown)
		addTo(x, d)
		PutFloats(g, u, d)
	}
	for i, c := range caches {
		c.n += off[i+1] - off[i]
	}
	return x, off, nil
}

// eachSequence runs f(0) … f(n-1), over up to GOMAXPROCS goroutines when there are several.
func eachSequence(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// rmsNorm writes to dst each n-wide row of src scaled to unit root mean square and multiplied
// by w: x · 1/sqrt(mean(x²) + eps) · w, in float32 as transformers computes it (the mean is
// summed in float64). dst may be src.
func rmsNorm(dst, src, w []float32, n int, eps float64) {
	for r := 0; r < len(src)/n; r++ {
		x, y := src[r*n:(r+1)*n], dst[r*n:(r+1)*n]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(n)+eps))
		for i, v := range x {
			y[i] = w[i] * (v * inv)
		}
	}
}

// linearKernel, when set by SetLinear, computes linear's products.
var linearKernel func(x []float32, rows, in int, w []float32, out int) []float32

// SetLinear installs a faster kernel for the matrix products of the forward pass: f(x, rows,
// in, w, out) returns x·wᵀ, [rows, out], for x [rows, in] and w [out, in] (a checkpoint's Linear
// weight, never modified: a kernel may keep a re-laid-out copy of it). nil restores the portable
// loop. agrl/learn installs its vector kernels (GOEXPERIMENT=simd builds on AVX-512 or AVX2
// CPUs); their sums run in another order, so logits differ from the portable loop's in the last
// bits. Each row of f's result must depend on its own row of x only, computed the same way
// whatever the other rows (NextBatch relies on it to give a batched sequence the bits it gets
// alone). The result must be a fresh slice, which becomes the caller's (the forward pass and
// a trace give it to the buffer pool, PutFloats, when done with it). Set it before any
// forward pass runs, not concurrently with one.
func SetLinear(f func(x []float32, rows, in int, w []float32, out int) []float32) { linearKernel = f }

// headKernel, when set by SetHead, computes the LM head's product.
var headKernel func(x []float32, rows, in int, w []float32, out int) []float32

// SetHead installs f for the LM head's product (the logits, x·wᵀ for the head or tied
// embeddings w [vocab, hidden]), in place of SetLinear's kernel: f reads w as it is and keeps
// no copy of it (the head is the model's largest matrix: a transposed copy for SetLinear's
// kernels was 0.62 GB at the Qwen3-0.6B shape). Each row of the result must depend on its own
// row of x only, computed the same way whatever the other rows. The result must be a fresh
// slice, which becomes the caller's; taken from Floats, a decoder's logits reuse the memory of
// those it gave back (NextBatchFlat). nil restores product (SetProduct's kernel, or the
// portable loop), which keeps no copy either. agrl/learn installs its vector kernel with it;
// set it before any forward pass runs.
func SetHead(f func(x []float32, rows, in int, w []float32, out int) []float32) { headKernel = f }

// headProduct is the LM head's x·wᵀ: SetHead's kernel, or product (never a kept copy).
func headProduct(x []float32, rows, in int, w []float32, out int) []float32 {
	if headKernel == nil {
		return product(x, rows, in, w, out)
	}
	return headKernel(x, rows, in, w, out)
}

// productKernel, when set by SetProduct, computes the products of weights that change.
var productKernel func(y, x []float32, rows, in int, w []float32, out int)

// SetProduct installs f for the products whose weights may change between calls (LoRA
// adapters, which a trainer updates in place): f(y, x, rows, in, w, out) writes x·wᵀ into y
// ([rows, out], every element; its contents before are arbitrary) as SetLinear's kernels
// compute it, but must keep nothing of w. Each row of the result must depend on
// its own row of x only (NextBatch relies on it). nil restores the portable loop. Set it
// before any forward pass runs.
func SetProduct(f func(y, x []float32, rows, in int, w []float32, out int)) { productKernel = f }

// product is x·wᵀ for a w that may change: the installed SetProduct kernel, or the loop.
func product(x []float32, rows, in int, w []float32, out int) []float32 {
	if productKernel == nil {
		return linearLoop(x, rows, in, w, out, nil)
	}
	y := Floats(rows * out)
	productKernel(y, x, rows, in, w, out)
	return y
}

// linear returns x·wᵀ + b for rows rows of in values: w is [out, in] (a checkpoint's Linear
// weight), b is [out] or nil. The result is [rows, out]. It runs the installed kernel
// (SetLinear), which may keep a copy of w: call it only with the model's immutable weights, and
// product with anything that changes (adapters).
func linear(x []float32, rows, in int, w []float32, out int, b []float32) []float32 {
	if linearKernel == nil {
		return linearLoop(x, rows, in, w, out, b)
	}
	y := linearKernel(x, rows, in, w, out)
	if b != nil {
		for r := range rows {
			addTo(y[r*out:(r+1)*out], b)
		}
	}
	return y
}

// linearTKernel, when set by SetLinearT, computes linearT's products.
var linearTKernel func(y, x []float32, rows, in int, wt []float32, out int)

// SetLinearT installs the kernel for the products by projections a model holds transposed
// (Model.Share): f(y, x, rows, in, wt, out) writes x·wt into y, [rows, out] (every element;
// y's contents before are arbitrary), for x [rows, in] and wt [in, out], which it never
// modifies and keeps nothing of (a model made by FromStorage reads
// projections whose holder updates them between passes). It must give, bit for bit, what
// SetLinear's kernel gives for the [out, in] weight wt transposes, so that sharing a weight
// never changes a logit; and, like it, compute each row of its result from its own row of x
// alone. nil restores the portable loop, which sums in the order of SetLinear's. Set it
// before any forward pass runs.
func SetLinearT(f func(y, x []float32, rows, in int, wt []float32, out int)) {
	linearTKernel = f
}

// linearT is linear for a weight held as its transpose wt [in, out].
func linearT(x []float32, rows, in int, wt []float32, out int, b []float32) []float32 {
	if linearKernel == nil || linearTKernel == nil {
		return linearLoopT(x, rows, in, wt, out, b)
	}
	y := Floats(rows * out)
	linearTKernel(y, x, rows, in, wt, out)
	if b != nil {
		for r := range rows {
			addTo(y[r*out:(r+1)*out], b)
		}
	}
	return y
}

// linearLoopT is linearLoop over the transpose wt [in, out] of its weight: each output is
// summed in dot's order (four partial sums over the inputs i ≡ 0, 1, 2, 3 mod 4, the tail into
// the first, then (s0+s1)+(s2+s3)), so that its results are linearLoop's, bit for bit, while
// it reads wt row after row.
func linearLoopT(x []float32, rows, in int, wt []float32, out int, b []float32) []float32 {
	y := Floats(rows * out)
	s := make([]float32, 4*out)
	blocks := in &^ 3
	for r := range rows {
		clear(s)
		for i, xi := range x[r*in : (r+1)*in] {
			k := 0
			if i < blocks {
				k = i & 3
			}
			acc, row := s[k*out:(k+1)*out], wt[i*out:(i+1)*out]
			for o := range acc {
				acc[o] += xi * row[o]
			}
		}
		yr := y[r*out : (r+1)*out]
		for o := range yr {
			yr[o] = (s[o] + s[out+o]) + (s[2*out+o] + s[3*out+o])
		}
		if b != nil {
			addTo(yr, b)
		}
	}
	return y
}

// linearLoop is linear with the portable loop.
func linearLoop(x []float32, rows, in int, w []float32, out int, b []float32) []float32 {
	y := Floats(rows * out) // every element written below
	for r := range rows {
		xr, yr := x[r*in:(r+1)*in], y[r*out:(r+1)*out]
		for o := range out {
			yr[o] = dot(xr, w[o*in:(o+1)*in])
		}
		if b != nil {
			addTo(yr, b)
		}
	}
	return y
}

// proj is linear for the projection mod of layer l, plus the LoRA term scale·B(A x) when m
// runs with adapters on that projection (added after the bias, as PEFT adds it). Without
// adapters it is linear itself, so a model with none computes exactly what it did before.
//
// A nil w is a projection the model holds transposed (Share): its [in, out] values are
// multiplied as they are.
func (m *Model) proj(l, mod int, x []float32, rows, in int, w []float32, out int, b []float32) []float32 {
	y, xa := m.projA(l, mod, x, rows, in, w, out, b)
	PutFloats(xa)
	return y
}

// projA is proj also returning the adapter's A x ([rows, rank]; nil where the projection is
// not adapted), which a Trace keeps for its backward pass.
func (m *Model) projA(l, mod int, x []float32, rows, in int, w []float32, out int, b []float32) (y, xa []float32) {
	y = m.frozenProj(l, mod, x, rows, in, w, out, b)
	if m.lora != nil {
		xa = m.lora.add(l, mod, y, x, rows)
	}
	return y, xa
}

// frozenProj is proj without the adapter: x·Wᵀ + b.
func (m *Model) frozenProj(l, mod int, x []float32, rows, in int, w []float32, out int, b []float32) []float32 {
	if w == nil {
		return linearT(x, rows, in, m.layers[l].t[mod], out, b)
	}
	return linear(x, rows, in, w, out, b)
}

// dot is Σ a[i]·b[i] in float32, over four partial sums.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotStrided is dot(a, b') for b' = b[0], b[ld], b[2·ld], …: the same partial sums in the
// same order, so the same bits as dot over the gathered values.
func dotStrided(a, b []float32, ld int) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i*ld]
		s1 += a[i+1] * b[(i+1)*ld]
		s2 += a[i+2] * b[(i+2)*ld]
		s3 += a[i+3] * b[(i+3)*ld]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i*ld]
	}
	return (s0 + s1) + (s2 + s3)
}

func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// silu is x·sigmoid(x).
func silu(x float32) float32 { return x / (1 + float32(math.Exp(-float64(x)))) }

// swigluInto writes silu(gate)·up into out (which may be gate), T rows of I, over the cores:
// the SetSwiGLU kernel, or silu in float64 (the portable loop). Every element is computed from
// its own inputs alone, so a row's bits do not depend on the rows beside it.
func swigluInto(out, gate, up []float32, T, I int) {
	parallel.Rows(T, func(lo, hi int) {
		a, b := lo*I, hi*I
		if swigluKernel != nil {
			swigluKernel(out[a:b], gate[a:b], up[a:b])
			return
		}
		for i := a; i < b; i++ {
			out[i] = silu(gate[i]) * up[i]
		}
	})
}

// swigluBack replaces gate and up (T rows of I) by the gradients of silu(gate)·up's inputs
// given dAct, that product's gradient, over the cores: the SetSwiGLU kernel, or the portable
// loop (the logistic in float64).
func swigluBack(gate, up, dAct []float32, T, I int) {
	parallel.Rows(T, func(lo, hi int) {
		a, b := lo*I, hi*I
		if swigluBackKernel != nil {
			swigluBackKernel(gate[a:b], up[a:b], dAct[a:b])
			return
		}
		for i := a; i < b; i++ {
			g, u, da := gate[i], up[i], dAct[i]
			s := float32(1 / (1 + math.Exp(-float64(g))))
			gate[i] = da * u * s * (1 + g*(1-s))
			up[i] = da * g * s
		}
	})
}

// swigluKernel and swigluBackKernel, when set by SetSwiGLU, compute swigluInto's and
// swigluBack's elements.
var (
	swigluKernel     func(out, gate, up []float32)
	swigluBackKernel func(gate, up, dAct []float32)
)

// SetSwiGLU installs kernels for the MLP's activation and its gradient, in place of the
// portable loops (whose logistic runs in float64): fwd(out, gate, up) writes silu(g)·u =
// g/(1 + e^(−g))·u to out[i], for g = gate[i], u = up[i] (out may be gate); back(gate, up,
// dAct) replaces gate[i] by dAct[i]·u·s·(1 + g·(1 − s)) and up[i] by dAct[i]·g·s, s the
// logistic of g. Each element must be computed from its own inputs alone, the same way
// wherever it lies in the slices (the forward pass and a trace call fwd on different spans
// of rows, and must agree bit for bit). nil restores the portable loops. agrl/learn installs
// its vector kernels with it; set it before any forward pass runs.
func SetSwiGLU(fwd func(out, gate, up []float32), back func(gate, up, dAct []float32)) {
	swigluKernel, swigluBackKernel = fwd, back
}

// rope rotates each D-wide head of x ([T, heads·D]) by its position's angles, in the
// rotate-half layout of transformers (not the interleaved one of Meta's reference code):
// dimension i pairs with i + D/2, and with c, s the cosine and sine of angle i,
//
//	x[i]     ← x[i]·c − x[i+D/2]·s
//	x[i+D/2] ← x[i+D/2]·c + x[i]·s
//
// cos and sin are [T, D/2].
func rope(x []float32, T, heads, D int, cos, sin []float32) {
	half := D / 2
	for t := range T {
		ct, st := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
		for hd := range heads {
			v := x[(t*heads+hd)*D : (t*heads+hd+1)*D]
			for i := range half {
				a, b := v[i], v[i+half]
				v[i] = a*ct[i] - b*st[i]
				v[i+half] = b*ct[i] + a*st[i]
			}
		}
	}
}

// attend is causal grouped-query attention: query t (at position start+t) of head h attends
// to positions 0 … start+t of key-value head h/(nq/nkv), with weights softmax(q·k/sqrt(D)).
// q is [T, nq·D]; keys and values are [start+T, nkv·D]. The result is written to out,
// [T, nq·D] (its previous values are overwritten). It lays the keys out transposed and runs
// attendT.
func attend(out, q, keys, values []float32, start, T, nq, nkv, D int) {
	n, kvw := start+T, nkv*D
	kt := Floats(kvw * n)
	defer PutFloats(kt)
	transposeInto(kt, n, keys, n, kvw, kvw)
	attendT(out, q, Span{}, Span{Keys: kt, Stride: n, Values: values, Len: n}, T, nq, nkv, D)
}

// A Span is a run of one layer's cached positions as attention reads them (SetAttention):
// Len positions, their keys transposed — dimension d of key-value head h at the span's
// position j is Keys[(h·head_dim + d)·Stride + j] — and their values as rows of
// num_key_value_heads·head_dim, Values[j·kvw + i]. A Cache holds its positions in one span,
// or two when it shares a prefix with the cache it was cloned from.
type Span struct {
	Keys   []float32
	Stride int
	Values []float32
	Len    int
}

// attendT is attention over the positions of two spans, pre's then own's, as a Cache holds
// them; the T queries are the last T positions (all in own). It runs the installed kernel
// (SetAttention) if there is one.
func attendT(out, q []float32, pre, own Span, T, nq, nkv, D int) {
	if attentionKernel != nil {
		attentionKernel(out, q, pre, own, T, nq, nkv, D)
		return
	}
	attendLoop(out, q, pre, own, T, nq, nkv, D)
}

// attentionKernel, when set by SetAttention, computes attendT.
var attentionKernel func(out, q []float32, pre, own Span, T, nq, nkv, D int)

// SetAttention installs f as the kernel of the forward pass's attention, in place of the
// portable loop. f(out, q, pre, own, T, nq, nkv, D) is causal grouped-query attention over
// n = pre.Len + own.Len positions, pre's first (pre may be empty, and is unless the cache is
// a clone): query t of head h (q is [T, nq·D], the query at position n−T+t, every query
// in own) attends to positions 0 … n−T+t of key-value head h/(nq/nkv) with weights
// softmax(q·k/sqrt(D)), and the weighted sum of their values is written to out, [T, nq·D]
// (every element). f must keep no reference to its arguments, and compute each sequence's
// result from its own arguments alone and the same bits however the positions are split
// between the spans (NextBatch and Cache.Clone rely on both). agrl/learn installs vector
// kernels with it in GOEXPERIMENT=simd builds. Call it before any model runs (it is not
// synchronised).
func SetAttention(f func(out, q []float32, pre, own Span, T, nq, nkv, D int)) {
	attentionKernel = f
}

// sharedAttentionKernel, when set by SetSharedAttention, computes the attention of a group of
// decoding steps over one shared prefix.
var sharedAttentionKernel func(out, q [][]float32, pre Span, own []Span, nq, nkv, D int)

// SetSharedAttention installs f for the attention of sequences that are fed one token each
// and share a cached prefix (clones of one cache: a rollout's episodes of one prompt, decoded
// as a batch). f(out, q, pre, own, nq, nkv, D) must write to every out[e] exactly what
// SetAttention's kernel writes for (out[e], q[e], pre, own[e], T = 1), bit for bit — so that a
// sequence's logits stay those it gets alone (NextBatch) — while it may read the prefix once
// for all of them: its keys and values are most of what a decoding step's attention reads. f
// must keep no reference to its arguments. Without it (nil, the default), or while no
// SetAttention kernel is installed (the portable loop has no shared counterpart), each
// sequence attends on its own. agrl/learn installs one with its vector kernels; call it before any
// model runs (it is not synchronised).
func SetSharedAttention(f func(out, q [][]float32, pre Span, own []Span, nq, nkv, D int)) {
	sharedAttentionKernel = f
}

// sharedGroups returns the sequences of a batch whose attention goes to the shared-prefix
// kernel (SetSharedAttention), when one is installed with a SetAttention kernel to match:
// those fed one token whose caches share one prefix, in groups of two or more. joint[i]
// reports whether sequence i is in a group; the others attend alone.
func sharedGroups(caches []*Cache, ids [][]int32) (groups [][]int, joint []bool) {
	if sharedAttentionKernel == nil || attentionKernel == nil {
		return nil, make([]bool, len(caches))
	}
	type prefix struct {
		first *float32
		n     int
	}
	at := map[prefix]int{} // the group of each prefix seen
	for i, c := range caches {
		if len(ids[i]) != 1 || c.pre == 0 {
			continue
		}
		key := prefix{&c.pk[0][0], c.pre}
		if g, ok := at[key]; ok {
			groups[g] = append(groups[g], i)
		} else {
			at[key] = len(groups)
			groups = append(groups, []int{i})
		}
	}
	groups = slices.DeleteFunc(groups, func(g []int) bool { return len(g) < 2 })
	joint = make([]bool, len(caches))
	for _, g := range groups {
		for _, i := range g {
			joint[i] = true
		}
	}
	return groups, joint
}

// attendLoop is attendT with the portable loop.
func attendLoop(out, q []float32, pre, own Span, T, nq, nkv, D int) {
	clear(out)
	scale := float32(1 / math.Sqrt(float64(D)))
	group := nq / nkv // query heads per key-value head
	kvw := nkv * D
	start := pre.Len + own.Len - T
	scores := make([]float32, start+T)
	for t := range T {
		n := start + t + 1 // positions visible to this query: pre's, then n−pre.Len of own's
		for hd := range nq {
			qh := q[(t*nq+hd)*D : (t*nq+hd+1)*D]
			off := (hd / group) * D
			mx := float32(math.Inf(-1))
			for j := range pre.Len {
				s := dotStrided(qh, pre.Keys[off*pre.Stride+j:], pre.Stride) * scale
				scores[j] = s
				mx = max(mx, s)
			}
			for j := pre.Len; j < n; j++ {
				s := dotStrided(qh, own.Keys[off*own.Stride+j-pre.Len:], own.Stride) * scale
				scores[j] = s
				mx = max(mx, s)
			}
			var sum float32
			for j := range n {
				e := float32(math.Exp(float64(scores[j] - mx)))
				scores[j] = e
				sum += e
			}
			oh := out[(t*nq+hd)*D : (t*nq+hd+1)*D]
			for j := range n {
				p := scores[j] / sum
				var vj []float32
				if j < pre.Len {
					vj = pre.Values[j*kvw+off : j*kvw+off+D]
				} else {
					vj = own.Values[(j-pre.Len)*kvw+off : (j-pre.Len)*kvw+off+D]
				}
				for d := range oh {
					oh[d] += p * vj[d]
				}
			}
		}
	}
}
