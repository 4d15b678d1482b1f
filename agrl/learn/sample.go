package learn

import (
	"agrl.dev/agrl"

	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// Completion is one action the policy wrote: the exact sampled token ids and the log-probs
// recorded when they were drawn.
type Completion struct {
	Tokens   []int32
	LogProbs []float32
	Stop     agrl.StopReason
}

// isStopToken reports whether the sampler ends an action on id.
func isStopToken(id int32) (agrl.StopReason, bool) {
	switch id {
	case agrl.TagID(agrl.ToolClose), agrl.TagID(agrl.AnswerClose):
		return agrl.StopTag, true
	case agrl.EOS:
		return agrl.StopEOS, true
	}
	return "", false
}

// chunkBuckets are the chunk widths K of the incremental graph: 1 while decoding, larger to
// read prompts and observations.
var chunkBuckets = []int{1, 4, 16, 64}

// Decoder generates from a batch of sequences with a KV cache. Each sequence starts from a
// prompt (Start); Run then samples actions until the callback stops them, appending the
// tokens it returns (observations) to the context without recomputing the prefix. All
// sequences of a shard advance together, one graph call per step, each reading its own pending
// tokens or writing its next one; the shards (see LM.Shards) run concurrently.
//
// On the host path (see onHost) the steps run in Go over a KV cache in host memory
// (hostsample.go), with the weights read when Run starts.
//
// A Decoder is not safe for concurrent use (Start, Run and Close are called by one goroutine);
// on the graph path it holds the policy (shared) only during each step, so training may run
// between steps.
type Decoder struct {
	p        *Policy
	s        agrl.Sampling
	capacity int // tokens per sequence
	seqs     []decSeq
	parts    []*decPart
	invT     float32

	// Steps counts graph calls; Fed counts tokens read (prompt, observation and sampled).
	Steps, Fed int
}

// decPart is one shard of a Decoder: the sequences in its cache rows and the KV cache.
type decPart struct {
	rows       []int // rows[r] is the sequence whose keys and values are in cache row r
	b, c       int   // padded batch, cache length
	caches     []*tensors.Tensor
	steps, fed int
	host       *hostCache // the host path's KV cache (hostsample.go)
	arena      arena      // the host path's buffers
}

type decSeq struct {
	started    bool
	fed        int     // tokens in the cache
	pending    []int32 // tokens to read before the next draw
	generating bool
	action     []int32
	actionLogp []float32
	rng        *rand.Rand
}

// minShardBatch is the smallest number of sequences per Decoder shard.
const minShardBatch = 4

// NewDecoder prepares a batch of n sequences of at most capacity tokens each (capacity at most
// the model's context). Each shard's KV cache starts at its longest prompt plus a margin and
// grows by length bucket up to capacity; finished sequences are compacted away.
func (p *Policy) NewDecoder(n, capacity int, s agrl.Sampling) (*Decoder, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("agrl: NewDecoder: batch of %d sequences", n)
	}
	if capacity < 2 || capacity > p.arch.Context {
		return nil, fmt.Errorf("agrl: NewDecoder: capacity %d tokens; want 2..%d (the context)", capacity, p.arch.Context)
	}
	d := &Decoder{p: p, s: s, capacity: capacity, seqs: make([]decSeq, n), invT: invTemperature(s.Temperature)}
	shards := max(1, min(p.workers(), n/minShardBatch))
	for k := range shards {
		part := &decPart{}
		for i := k * n / shards; i < (k+1)*n/shards; i++ {
			part.rows = append(part.rows, i)
		}
		part.b = bucketBatch(len(part.rows))
		d.parts = append(d.parts, part)
	}
	for i := range d.seqs {
		d.seqs[i].rng = rand.New(rand.NewPCG(s.Seed, uint64(i)))
	}
	return d, nil
}

// Len returns the number of tokens sequence i holds (read or pending).
func (d *Decoder) Len(i int) int { return d.seqs[i].fed + len(d.seqs[i].pending) }

// Room returns how many more tokens sequence i can hold.
func (d *Decoder) Room(i int) int { return d.capacity - d.Len(i) }

// Start gives sequence i its prompt (the tokens, usually BOS and the encoded prompt text, are
// read, not sampled) and marks it to generate.
func (d *Decoder) Start(i int, prompt []int32) error {
	if i < 0 || i >= len(d.seqs) {
		return fmt.Errorf("agrl: Decoder.Start: sequence %d of %d", i, len(d.seqs))
	}
	sq := &d.seqs[i]
	if sq.started {
		return fmt.Errorf("agrl: Decoder.Start: sequence %d already started", i)
	}
	if len(prompt) == 0 || len(prompt) >= d.capacity {
		return fmt.Errorf("agrl: Decoder.Start: prompt of %d tokens for a capacity of %d", len(prompt), d.capacity)
	}
	v := int32(d.p.arch.Vocab())
	for _, t := range prompt {
		if t < 0 || t >= v {
			return fmt.Errorf("agrl: Decoder.Start: token %d outside the vocabulary", t)
		}
	}
	sq.started, sq.generating = true, true
	sq.pending = slices.Clone(prompt)
	return nil
}

// NextFunc is called by Run each time sequence i finishes an action. It returns the tokens to
// append to the context before the next action (the observation; at most Room(i) tokens) and
// whether the sequence goes on to write another action. Calls for sequences of different
// shards may run concurrently; calls for one sequence never do.
type NextFunc func(i int, c Completion) (more []int32, cont bool)

// Run samples until every started sequence has been stopped by next. On the host path (see
// onHost) it reads the weights once, when it starts.
func (d *Decoder) Run(next NextFunc) error {
	var w *hostWeights
	if d.p.onHost() {
		d.p.mu.RLock()
		var err error
		w, err = d.p.hostWeightsOf()
		d.p.mu.RUnlock()
		if err != nil {
			return err
		}
	}
	errs := make([]error, len(d.parts))
	var wg sync.WaitGroup
	for k, part := range d.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { // a panicking callback must not take the process down from a goroutine
				if r := recover(); r != nil {
					errs[k] = fmt.Errorf("agrl: Decoder.Run: panic: %v", r)
				}
			}()
			errs[k] = d.runPart(part, next, w)
		}()
	}
	wg.Wait()
	d.Steps, d.Fed = 0, 0
	for _, part := range d.parts {
		d.Steps += part.steps
		d.Fed += part.fed
	}
	return errors.Join(errs...)
}

func (d *Decoder) runPart(part *decPart, next NextFunc, w *hostWeights) error {
	for {
		maxPend := 0
		for _, i := range part.rows {
			maxPend = max(maxPend, len(d.seqs[i].pending))
		}
		if maxPend == 0 {
			return nil
		}
		var counts []int
		var logp []float32
		if w != nil {
			counts, logp = d.hostStep(part, w)
		} else {
			if err := d.compact(part); err != nil {
				return err
			}
			k := d.chunk(part)
			if err := d.grow(part, k); err != nil {
				return err
			}
			var err error
			if counts, logp, err = d.step(part, k); err != nil {
				return err
			}
		}
		v := d.p.arch.Vocab()
		for r, i := range part.rows {
			sq := &d.seqs[i]
			if counts[r] == 0 || len(sq.pending) > 0 || !sq.generating {
				continue
			}
			row := logp[r*v : (r+1)*v]
			if !finiteRow(row) {
				return fmt.Errorf("agrl: Decoder: sequence %d: the next-token log-probs are not finite (NaN or Inf weights?)", i)
			}
			tok, lp := d.draw(sq, row)
			sq.action = append(sq.action, tok)
			sq.actionLogp = append(sq.actionLogp, lp)
			sq.pending = append(sq.pending, tok)
			reason, stop := isStopToken(tok)
			switch {
			case stop:
			case d.s.MaxActionTokens > 0 && len(sq.action) >= d.s.MaxActionTokens:
				reason, stop = agrl.StopLength, true
			case d.Len(i) >= d.capacity:
				reason, stop = agrl.StopBudget, true
			}
			if !stop {
				continue
			}
			comp := Completion{Tokens: sq.action, LogProbs: sq.actionLogp, Stop: reason}
			sq.action, sq.actionLogp = nil, nil
			more, cont := next(i, comp)
			if !cont {
				sq.generating, sq.pending = false, nil
				continue
			}
			if len(more) > d.Room(i) {
				return fmt.Errorf("agrl: Decoder: sequence %d: %d tokens appended with room for %d", i, len(more), d.Room(i))
			}
			if d.Room(i)-len(more) < 1 {
				return fmt.Errorf("agrl: Decoder: sequence %d has no room left to write an action", i)
			}
			sq.pending = append(sq.pending, more...)
		}
	}
}

// cacheMargin is how many tokens past the longest sequence a shard's KV cache is sized for
// when it is (re)allocated.
const cacheMargin = 16

// grow makes sure the shard's KV cache holds the positions the next step writes (chunk k).
// Attention reads the whole cache every step, so the cache starts short — the longest prompt
// plus a margin, rounded up to a length bucket — and is padded to a longer bucket when a
// sequence reaches its end, up to the Decoder's capacity.
func (d *Decoder) grow(part *decPart, k int) error {
	need := 0
	for _, i := range part.rows {
		sq := &d.seqs[i]
		need = max(need, sq.fed+min(len(sq.pending), k))
	}
	maxC := bucketLen(d.capacity, d.p.arch.Context)
	if part.caches != nil && need <= part.c {
		return nil
	}
	c := bucketLen(min(need+cacheMargin, maxC), d.p.arch.Context)
	p := d.p
	hd := p.arch.Width / p.arch.Heads
	if part.caches == nil {
		part.c = c
		for range 2 * p.arch.Layers {
			part.caches = append(part.caches, tensors.FromShape(shapes.Make(dtypes.Float32, part.b*p.arch.Heads, c, hd)))
		}
		return nil
	}
	exec, err := p.growExecutor()
	if err != nil {
		return err
	}
	out, err := d.callOnCaches(exec, tensors.FromShape(shapes.Make(dtypes.Int32, c)), part, "cache growth") // its shape names the new length
	if err != nil {
		return err
	}
	part.caches, part.c = out, c
	return nil
}

// callOnCaches runs exec on first followed by the part's KV caches, donated (their buffers are
// reused for the outputs, so the part holds no caches until the call returns them).
func (d *Decoder) callOnCaches(exec *model.Exec, first any, part *decPart, what string) ([]*tensors.Tensor, error) {
	args := []any{first}
	for _, c := range part.caches {
		don, err := graph.DonateTensorBuffer(c, d.p.backend, 0)
		if err != nil {
			return nil, fmt.Errorf("agrl: Decoder: %w", err)
		}
		args = append(args, don)
	}
	part.caches = nil
	out, err := call(exec, args...)
	if err != nil {
		return nil, fmt.Errorf("agrl: Decoder %s: %w", what, err)
	}
	return out, nil
}

// growExecutor returns the executor that pads KV caches to a longer length, building it once.
func (p *Policy) growExecutor() (*model.Exec, error) {
	p.execMu.Lock()
	defer p.execMu.Unlock()
	if p.growExec == nil {
		e, err := p.newExec("grow", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			c := in[0].Shape().Dimensions[0]
			out := make([]*graph.Node, len(in)-1)
			for i, cache := range in[1:] { // [B·H, C, hd] -> [B·H, c, hd], zeros after C
				zero := graph.ScalarZero(cache.Graph(), cache.DType())
				out[i] = graph.Pad(cache, zero, compute.PadAxis{}, compute.PadAxis{End: c - cache.Shape().Dimensions[1]}, compute.PadAxis{})
			}
			return out
		})
		if err != nil {
			return nil, err
		}
		p.growExec = e
	}
	return p.growExec, nil
}

// compact shrinks a shard's batch when at most half of its padded rows still hold a sequence
// that reads or writes: the KV-cache rows of the live sequences are gathered into a smaller
// cache, so finished episodes stop costing compute (rollouts end at different lengths).
func (d *Decoder) compact(part *decPart) error {
	var live []int
	for r, i := range part.rows {
		if len(d.seqs[i].pending) > 0 {
			live = append(live, r)
		}
	}
	nb := bucketBatch(len(live))
	if nb >= part.b || part.b < 2*minShardBatch {
		return nil
	}
	p := d.p
	h := p.arch.Heads
	rowsLive := make([]int, len(live))
	for k, r := range live {
		rowsLive[k] = part.rows[r]
	}
	if part.caches == nil { // nothing cached yet (sequences never started)
		part.rows, part.b = rowsLive, nb
		return nil
	}
	idx := make([]int32, nb*h)
	for k := range idx { // padding rows copy row 0's cache (never read)
		idx[k] = int32(k % h)
	}
	rows := make([]int, len(live))
	for k, r := range live {
		rows[k] = part.rows[r]
		for j := range h {
			idx[k*h+j] = int32(r*h + j)
		}
	}
	exec, err := p.compactExecutor()
	if err != nil {
		return err
	}
	out, err := d.callOnCaches(exec, tensors.FromFlatDataAndDimensions(idx, nb*h, 1), part, "compaction")
	if err != nil {
		return err
	}
	part.caches, part.rows, part.b = out, rows, nb
	return nil
}

// compactExecutor returns the executor that gathers KV-cache rows, building it once.
func (p *Policy) compactExecutor() (*model.Exec, error) {
	p.execMu.Lock()
	defer p.execMu.Unlock()
	if p.compactExec == nil {
		e, err := p.newExec("compact", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			out := make([]*graph.Node, len(in)-1)
			for i, c := range in[1:] {
				out[i] = graph.Gather(c, in[0]) // [B'·H, C, hd]
			}
			return out
		})
		if err != nil {
			return nil, err
		}
		p.compactExec = e
	}
	return p.compactExec, nil
}

// stepOverhead is the fixed cost of one decoding step, in tokens per row: a step that reads K
// tokens per row costs about rows·(K + stepOverhead). Measured on Tiny, 32 rows, go backend:
// 5.6, 8.0, 19.4 and 77 ms for K = 1, 4, 16 and 64, i.e. about 0.8 ms per K plus 4.7 ms.
const stepOverhead = 6

// chunk picks the chunk width K for the next step of a shard: the bucket that reads the most
// pending tokens per unit of cost. Every row pays for K, so one sequence reading a long
// observation must not make all the others run a 64-wide step: it then reads its tokens a few
// per step while the others keep writing theirs. Prompts, read by all rows at once, get wide
// chunks.
func (d *Decoder) chunk(part *decPart) int {
	best, bestRate := 1, -1.0
	for _, k := range chunkBuckets {
		useful := 0
		for _, i := range part.rows {
			useful += min(len(d.seqs[i].pending), k)
		}
		rate := float64(useful) / float64(len(part.rows)*(k+stepOverhead))
		if rate > bestRate {
			best, bestRate = k, rate
		}
	}
	return best
}

// stepExecutor returns the policy's incremental-decoding executor, building it once.
func (p *Policy) stepExecutor() (*model.Exec, error) {
	p.execMu.Lock()
	defer p.execMu.Unlock()
	if p.stepExec == nil {
		layers := p.arch.Layers
		e, err := p.newExec("sample", func(scope *model.Scope, in []*graph.Node) []*graph.Node {
			w := p.mustWeights(in[0].Graph())
			logp, caches := p.arch.extend(w, in[0], in[1], in[2], in[3], in[4:4+2*layers])
			return append([]*graph.Node{logp}, caches...)
		})
		if err != nil {
			return nil, err
		}
		p.stepExec = e
	}
	return p.stepExec, nil
}

// step reads up to k pending tokens of every sequence of a shard and returns how many each
// read, and the next-token log-probs [len(rows)·V] after them.
func (d *Decoder) step(part *decPart, k int) ([]int, []float32, error) {
	p := d.p
	tok := make([]int32, part.b*k)
	start := make([]int32, part.b)
	count := make([]int32, part.b)
	counts := make([]int, len(part.rows))
	for r, i := range part.rows {
		sq := &d.seqs[i]
		n := min(len(sq.pending), k)
		copy(tok[r*k:], sq.pending[:n])
		start[r], count[r], counts[r] = int32(sq.fed), int32(n), n
	}
	exec, err := p.stepExecutor()
	if err != nil {
		return nil, nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	args := []any{tensors.FromFlatDataAndDimensions(tok, part.b, k), tensors.FromFlatDataAndDimensions(start, part.b),
		tensors.FromFlatDataAndDimensions(count, part.b), d.invT}
	for _, c := range part.caches {
		don, err := graph.DonateTensorBuffer(c, p.backend, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("agrl: Decoder: %w", err)
		}
		args = append(args, don)
	}
	part.caches = nil // donated: the outputs replace them
	out, err := call(exec, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("agrl: Decoder step: %w", err)
	}
	part.caches = out[1:]
	logp := tensors.MustCopyFlatData[float32](out[0])
	_ = out[0].FinalizeAll()
	for r, i := range part.rows {
		sq := &d.seqs[i]
		n := counts[r]
		sq.fed += n
		sq.pending = sq.pending[n:]
		part.fed += n
	}
	part.steps++
	return counts, logp, nil
}

// finiteRow reports whether a row of log-probs holds no NaN and at least one finite value.
func finiteRow(row []float32) bool {
	ok := false
	for _, lp := range row {
		if lp != lp {
			return false
		}
		ok = ok || !math.IsInf(float64(lp), 0)
	}
	return ok
}

// draw samples one token from a row of log-probs and returns it with its log-prob.
func (d *Decoder) draw(sq *decSeq, logp []float32) (int32, float32) {
	if d.s.Temperature <= 0 {
		best := 0
		for j, lp := range logp {
			if lp > logp[best] {
				best = j
			}
		}
		return int32(best), logp[best]
	}
	ids := make([]int, 0, len(logp))
	for j, lp := range logp {
		if lp > maskedLogit/2 {
			ids = append(ids, j)
		}
	}
	if d.s.TopK > 0 || (d.s.TopP > 0 && d.s.TopP < 1) {
		sort.SliceStable(ids, func(a, b int) bool { return logp[ids[a]] > logp[ids[b]] })
		if d.s.TopK > 0 && len(ids) > d.s.TopK {
			ids = ids[:d.s.TopK]
		}
		if d.s.TopP > 0 && d.s.TopP < 1 {
			cum := 0.0
			for j, id := range ids {
				cum += math.Exp(float64(logp[id]))
				if cum >= d.s.TopP {
					ids = ids[:j+1]
					break
				}
			}
		}
	}
	total := 0.0
	for _, id := range ids {
		total += math.Exp(float64(logp[id]))
	}
	u := sq.rng.Float64() * total
	for _, id := range ids {
		u -= math.Exp(float64(logp[id]))
		if u <= 0 {
			return int32(id), logp[id]
		}
	}
	last := ids[len(ids)-1]
	return int32(last), logp[last]
}

// Close releases the KV caches.
func (d *Decoder) Close() {
	for _, part := range d.parts {
		for _, c := range part.caches {
			_ = c.FinalizeAll()
		}
		part.caches, part.host, part.arena = nil, nil, arena{}
	}
}

// Complete samples one action after each prompt (at most maxNew tokens, fewer if the context
// fills): the single-turn use of a Decoder.
func (p *Policy) Complete(prompts [][]int32, maxNew int, s agrl.Sampling) ([]Completion, error) {
	if len(prompts) == 0 {
		return nil, nil
	}
	if maxNew <= 0 {
		return nil, fmt.Errorf("agrl: Complete: maxNew %d", maxNew)
	}
	longest := 0
	for _, pr := range prompts {
		longest = max(longest, len(pr))
	}
	s.MaxActionTokens = maxNew
	d, err := p.NewDecoder(len(prompts), min(longest+maxNew, p.arch.Context), s)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	for i, pr := range prompts {
		if err := d.Start(i, pr); err != nil {
			return nil, err
		}
	}
	out := make([]Completion, len(prompts))
	err = d.Run(func(i int, c Completion) ([]int32, bool) {
		out[i] = c
		return nil, false
	})
	return out, err
}
