package learn

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"agrl.dev/agrl/learn/hfgraph"
	"agrl.dev/agrl/llm/agent"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// graphDecoder is an agent.Decoder that runs hfgraph.Model.Decode on the policy's backend:
// each sequence's KV cache is one backend tensor (in a GPU's memory on XLA), and only each
// step's logits come back to the host, where the sampler draws. It reads the store's
// variables at every call, so after a training step it decodes the new weights (adapters, or
// every weight with full fine-tuning) without any copy to the host.
//
// Shapes are bucketed, since every new shape is a compilation: a batch's rows are padded to a
// power of two (rows past the batch decode a zero cache and are dropped), its new tokens to
// 1 or a power of two ≥ 8, and caches grow in capacities of 256·2^k positions (capped at the
// context) by a zero-padding graph.
type graphDecoder struct {
	p    *PretrainedPolicy
	m    *hfgraph.Model
	name string // the view, for errors

	mu    sync.Mutex
	step  *model.Exec            // Decode: ids, starts, counts, caches… → logits, caches…
	grow  map[[2]int]*model.Exec // capacity from → to
	zeros *model.Exec            // makes an empty cache
	// zeroT is the empty cache of capacity zeroCap, read only (padding rows and empty
	// sequences read it).
	zeroT   *tensors.Tensor
	zeroCap int
}

// newGraphDecoder decodes view m (the policy's graph, its Base or a frozen reference) of p.
func newGraphDecoder(p *PretrainedPolicy, m *hfgraph.Model, name string) *graphDecoder {
	return &graphDecoder{p: p, m: m, name: name, grow: map[[2]int]*model.Exec{}}
}

// cacheBuf is a cache tensor shared by a sequence and its clones, freed with the last of them.
type cacheBuf struct {
	t        *tensors.Tensor
	capacity int
	refs     atomic.Int32
}

func newCacheBuf(t *tensors.Tensor, capacity int) *cacheBuf {
	b := &cacheBuf{t: t, capacity: capacity}
	b.refs.Store(1)
	return b
}

func (b *cacheBuf) release() {
	if b != nil && b.refs.Add(-1) == 0 && b.t != nil { // t is nil once donated to a step
		_ = b.t.FinalizeAll()
	}
}

// graphSeq is one sequence of a graphDecoder: n positions in buf (nil while empty).
type graphSeq struct {
	d        *graphDecoder
	buf      *cacheBuf
	n        int
	released bool
}

func (d *graphDecoder) NewSeq() agent.Seq { return &graphSeq{d: d} }

func (s *graphSeq) Len() int { return s.n }

func (s *graphSeq) Clone() agent.Seq {
	if s.buf != nil {
		s.buf.refs.Add(1)
	}
	return &graphSeq{d: s.d, buf: s.buf, n: s.n, released: s.released}
}

func (s *graphSeq) Release() {
	s.buf.release()
	s.buf, s.released = nil, true
}

// decodeCapacity is the cache capacity for need positions: 256·2^k, at most the context.
func decodeCapacity(need, context int) int {
	c := 256
	for c < need {
		c *= 2
	}
	return min(c, context)
}

// decodeWidth is the padded number of new tokens per row: 1, else a power of two ≥ 8.
func decodeWidth(n int) int {
	if n <= 1 {
		return 1
	}
	w := 8
	for w < n {
		w *= 2
	}
	return w
}

// NextBatch implements agent.Decoder.
func (d *graphDecoder) NextBatch(seqs []agent.Seq, ids [][]int32) ([][]float32, error) {
	if len(seqs) == 0 || len(seqs) != len(ids) {
		return nil, fmt.Errorf("agrl: graph decoding: %d sequences and %d id lists", len(seqs), len(ids))
	}
	cfg := d.p.cfg
	context := cfg.MaxPositionEmbeddings
	gs := make([]*graphSeq, len(seqs))
	need, width := 0, 0
	for i, s := range seqs {
		g, ok := s.(*graphSeq)
		switch {
		case !ok || g.d != d:
			return nil, errors.New("agrl: graph decoding: a sequence of another decoder")
		case g.released:
			return nil, errors.New("agrl: graph decoding: a released sequence")
		case len(ids[i]) == 0:
			return nil, errors.New("agrl: graph decoding: no ids to append")
		case g.n+len(ids[i]) > context:
			return nil, fmt.Errorf("agrl: graph decoding: %d positions exceed the context (%d)", g.n+len(ids[i]), context)
		}
		for _, id := range ids[i] {
			if id < 0 || int(id) >= cfg.VocabSize {
				return nil, fmt.Errorf("agrl: graph decoding: token %d outside the vocabulary (%d)", id, cfg.VocabSize)
			}
		}
		gs[i] = g
		need, width = max(need, g.n+len(ids[i])), max(width, len(ids[i]))
		if g.buf != nil {
			need = max(need, g.buf.capacity)
		}
	}
	capacity := decodeCapacity(need, context)
	width = decodeWidth(width)
	rows := bucketBatch(len(seqs))

	d.mu.Lock()
	defer d.mu.Unlock()
	zero, err := d.zeroCache(capacity)
	if err != nil {
		return nil, err
	}
	tok := make([]int32, rows*width)
	starts, counts := make([]int32, rows), make([]int32, rows)
	inputs := make([]any, rows)
	// A cache no other sequence shares is donated to the step, whose output may then reuse its
	// memory (XLA); so is a grown copy. The shared empty cache never is. A sequence whose cache
	// was donated to a step that then failed has lost it: it is marked released.
	var donated []*graphSeq
	fail := func(err error) ([][]float32, error) {
		for _, g := range donated {
			g.buf, g.released = nil, true
		}
		return nil, err
	}
	donate := func(t *tensors.Tensor) (any, error) {
		v, err := graph.DonateTensorBuffer(t, d.p.backend, 0)
		if err != nil {
			return nil, fmt.Errorf("agrl: graph decoding: %w", err)
		}
		return v, nil
	}
	for i := range rows {
		counts[i] = 1
		inputs[i] = zero
		if i >= len(gs) {
			continue // a padding row: one token 0 on an empty cache
		}
		g := gs[i]
		copy(tok[i*width:], ids[i])
		starts[i], counts[i] = int32(g.n), int32(len(ids[i]))
		switch {
		case g.buf == nil:
		case g.buf.capacity == capacity && g.buf.refs.Load() == 1:
			v, err := donate(g.buf.t)
			if err != nil {
				return fail(err)
			}
			inputs[i], g.buf.t = v, nil
			donated = append(donated, g)
		case g.buf.capacity == capacity:
			inputs[i] = g.buf.t
		default:
			t, err := d.grown(g.buf, capacity)
			if err != nil {
				return fail(err)
			}
			v, err := donate(t)
			if err != nil {
				_ = t.FinalizeAll()
				return fail(err)
			}
			inputs[i] = v
		}
	}
	if d.step == nil {
		if d.step, err = d.p.newExec("decode", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			logits, caches := d.m.Decode(in[3:], in[0], in[1], in[2])
			return append([]*graph.Node{logits}, caches...)
		}); err != nil {
			return fail(err)
		}
	}
	args := append([]any{tensors.FromFlatDataAndDimensions(tok, rows, width), starts, counts}, inputs...)
	out, err := call(d.step, args...)
	if err != nil {
		return fail(fmt.Errorf("agrl: graph decoding (%s): %w", d.name, err))
	}
	flat := tensors.MustCopyFlatData[float32](out[0])
	_ = out[0].FinalizeAll()
	logits := make([][]float32, len(gs))
	v := cfg.VocabSize
	for i, g := range gs {
		logits[i] = flat[i*v : (i+1)*v : (i+1)*v]
		g.buf.release()
		g.buf, g.n = newCacheBuf(out[1+i], capacity), g.n+len(ids[i])
	}
	for _, t := range out[1+len(gs):] {
		_ = t.FinalizeAll()
	}
	return logits, nil
}

// zeroCache is an empty cache of the capacity (d.mu held), made by a graph on the backend and
// only ever read. Only the last capacity's is kept: at a long context one is large.
func (d *graphDecoder) zeroCache(capacity int) (*tensors.Tensor, error) {
	if d.zeroCap == capacity && d.zeroT != nil {
		return d.zeroT, nil
	}
	e := d.zeros
	if e == nil {
		var err error
		e, err = d.p.newExec("decode cache", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Zeros(in[0].Graph(), d.m.CacheShape(in[0].Shape().Dimensions[0]))}
		})
		if err != nil {
			return nil, err
		}
		d.zeros = e
	}
	out, err := call(e, make([]int32, capacity)) // the input gives the capacity as its length
	if err != nil {
		return nil, fmt.Errorf("agrl: graph decoding: an empty cache: %w", err)
	}
	if d.zeroT != nil {
		_ = d.zeroT.FinalizeAll()
	}
	d.zeroT, d.zeroCap = out[0], capacity
	return out[0], nil
}

// grown is buf's cache padded with empty slots to the capacity (d.mu held).
func (d *graphDecoder) grown(buf *cacheBuf, capacity int) (*tensors.Tensor, error) {
	key := [2]int{buf.capacity, capacity}
	e := d.grow[key]
	if e == nil {
		var err error
		e, err = d.p.newExec("decode cache growth", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			more := graph.Zeros(in[0].Graph(), d.m.CacheShape(capacity-in[0].Shape().Dimensions[3]))
			return []*graph.Node{graph.Concatenate([]*graph.Node{in[0], more}, 3)}
		})
		if err != nil {
			return nil, err
		}
		d.grow[key] = e
	}
	out, err := call(e, buf.t)
	if err != nil {
		return nil, fmt.Errorf("agrl: graph decoding: growing a cache to %d positions: %w", capacity, err)
	}
	return out[0], nil
}
