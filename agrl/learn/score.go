package learn

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// Graphs are compiled once per input shape (20–50 ms each on the go backend), so batch sizes
// and lengths are rounded up to a few buckets.

// lenBuckets are the sequence lengths graphs are compiled for (capped by the context).
var lenBuckets = []int{16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096}

// bucketLen rounds n up to a length bucket, at most max (n must be <= max).
func bucketLen(n, max int) int {
	for _, b := range lenBuckets {
		if b >= n {
			if b > max {
				return max
			}
			return b
		}
	}
	return max
}

// padLenBuckets are the finer lengths whole sequences are padded to for scoring and training
// (padBatch): a few dozen compiled shapes, each reused over thousands of steps, against a
// third less padding (the calc warm start's batches: docs/performance.md).
var padLenBuckets = []int{16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096}

// padLen rounds n up to a padLenBuckets length, at most max (n must be <= max).
func padLen(n, max int) int {
	for _, b := range padLenBuckets {
		if b >= n {
			return min(b, max)
		}
	}
	return max
}

// bucketBatch rounds a batch size up to a power of two.
func bucketBatch(n int) int {
	b := 1
	for b < n {
		b *= 2
	}
	return b
}

// maxExecCache is the number of compiled shapes each executor keeps.
const maxExecCache = 128

// newExec builds a model executor over the policy's store, with panics in graph building
// reported as errors by GoMLX.
func (p *Policy) newExec(name string, fn func(scope *model.Scope, inputs []*graph.Node) []*graph.Node) (*model.Exec, error) {
	return newExecOn(p.backend, p.store, name, fn)
}

// newExecOn builds an executor of fn over store on backend, keeping maxExecCache compiled
// shapes.
func newExecOn(backend compute.Backend, store *model.Store, name string, fn func(scope *model.Scope, inputs []*graph.Node) []*graph.Node) (*model.Exec, error) {
	var e *model.Exec
	err := catch(func() error {
		var err error
		e, err = model.NewExec(backend, store, fn)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("agrl: building %s executor: %w", name, err)
	}
	e.SetMaxCache(maxExecCache)
	return e, nil
}

// ExecTimeout is the watchdog on every graph execution: a call that runs longer returns an
// error instead of hanging the program (the go backend's parallel modes were seen to hang
// inside large matmuls on 2-core machines). The stuck execution is abandoned. 0 disables it.
//
// The watchdog counts the time the process was running, not wall time: a process that is
// stopped (SIGSTOP, Ctrl-Z, a suspended laptop) is paused, not hung. The rule: a heartbeat
// goroutine wakes every watchdogTick (ExecTimeout/20, at most a second) and adds the time since
// its last wake-up when that is short (at most watchdogGap, 5 ticks, at least 2 s); a longer gap
// means the whole process, heartbeat included, was not running, and only one tick of it counts.
// A hung call — workers spinning or all waiting — leaves the heartbeat running, so it is caught
// after ExecTimeout of counted time. Measuring CPU time instead would miss the hang the
// watchdog exists for: workers that all wait use no CPU either.
var ExecTimeout = 10 * time.Minute

// ErrExecTimeout is matched (errors.Is) by the watchdog's error. A run that fails with it can be
// resumed from its last checkpoint with the same command.
var ErrExecTimeout = errors.New("graph execution watchdog")

// watchdogTick returns the heartbeat period and the longest gap between heartbeats that counts
// as running time, for a timeout.
func watchdogTick(timeout time.Duration) (tick, gap time.Duration) {
	tick = min(time.Second, max(timeout/20, time.Millisecond))
	return tick, max(5*tick, 2*time.Second)
}

// runningClock accumulates the time a process was running from heartbeats (see ExecTimeout).
type runningClock struct {
	last          time.Time
	tick, gap     time.Duration
	running, lost time.Duration
}

// beat records a heartbeat at now and returns the running time so far.
func (c *runningClock) beat(now time.Time) time.Duration {
	d := now.Sub(c.last)
	c.last = now
	if d > c.gap {
		c.lost += d - c.tick
		d = c.tick
	}
	c.running += d
	return c.running
}

// call runs an executor under the watchdog, turning panics into errors.
func call(e *model.Exec, args ...any) ([]*tensors.Tensor, error) {
	type result struct {
		out []*tensors.Tensor
		err error
	}
	run := func() result {
		var r result
		r.err = catch(func() error {
			var err error
			r.out, err = e.Exec(args...)
			return err
		})
		return r
	}
	timeout := ExecTimeout
	if timeout <= 0 {
		r := run()
		return r.out, r.err
	}
	ch := make(chan result, 1)
	go func() { ch <- run() }()
	tick, gap := watchdogTick(timeout)
	timer := time.NewTimer(min(tick, timeout))
	defer timer.Stop()
	clock := runningClock{last: time.Now(), tick: tick, gap: gap}
	for {
		select {
		case r := <-ch:
			return r.out, r.err
		case <-timer.C:
			if clock.beat(time.Now()) < timeout {
				timer.Reset(tick)
				continue
			}
			paused := ""
			if clock.lost > 0 {
				paused = fmt.Sprintf(" (not counting %v the process was stopped)", clock.lost.Round(time.Second))
			}
			return nil, fmt.Errorf("agrl: graph execution of %s ran longer than %v%s: %w (ExecTimeout); "+
				"if the backend runs ops in parallel, try %s", e.Name(), timeout, paused, ErrExecTimeout, DefaultBackend)
		}
	}
}

// mustWeights fetches the weights into g or panics (inside graph building, where GoMLX turns
// the panic into an error).
func (p *Policy) mustWeights(g *graph.Graph) *weights {
	w, err := p.arch.graphWeights(p.store, g)
	if err != nil {
		panic(err)
	}
	return w
}

// invTemperature maps a sampling temperature to the inverse temperature the graphs use.
// Temperature 0 (greedy decoding) scores at temperature 1.
func invTemperature(t float64) float32 {
	if t <= 0 {
		return 1
	}
	return float32(1 / t)
}

// TokenScores are the per-token statistics of one sequence under the policy: entry i is about
// token i+1 given tokens 0..i, so both slices are one shorter than the sequence.
type TokenScores struct {
	// LogProbs are log π(token[i+1] | token[..i]) at the scoring temperature.
	LogProbs []float32
	// Entropy is the entropy (nats) of the next-token distribution at position i.
	Entropy []float32
}

// scoreChunk is the largest batch scored by one graph call.
const scoreChunk = 64

// Score computes the log-probability and entropy of every next token of each sequence at the
// given temperature (use the temperature the tokens were sampled at: the sampler applies it
// the same way, so log-probs agree). Sequences must start with BOS, hold at least two tokens
// and fit the context.
func (p *Policy) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	if err := p.checkSeqs(seqs); err != nil {
		return nil, err
	}
	if p.onHost() {
		return p.hostScore(seqs, temperature)
	}
	p.execMu.Lock()
	if p.scoreExec == nil {
		e, err := p.newExec("score", func(scope *model.Scope, in []*graph.Node) []*graph.Node {
			w := p.mustWeights(in[0].Graph())
			logp, ent, _ := p.arch.tokenStats(w, in[0], in[1])
			return []*graph.Node{logp, ent}
		})
		if err != nil {
			p.execMu.Unlock()
			return nil, err
		}
		p.scoreExec = e
	}
	p.execMu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]TokenScores, len(seqs))
	invT := invTemperature(temperature)
	// Pieces of sequences of similar length, at most scoreChunk each, scored concurrently.
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		lens[i] = len(s)
	}
	plan := planPieces(lens, p.shards(), scoreChunk, p.arch.Context, p.splitsPieces())
	args := make([][]any, len(plan.pieces))
	for k, piece := range plan.pieces {
		batch := make([][]int32, len(piece))
		for i, j := range piece {
			batch[i] = seqs[j]
		}
		tok := p.padBatch(batch)
		args[k] = []any{tok, invT}
	}
	results, err := runPieces(p.scoreExec, args, plan)
	if err != nil {
		for _, res := range results {
			for _, r := range res {
				_ = r.FinalizeAll()
			}
		}
		return nil, fmt.Errorf("agrl: Score: %w", err)
	}
	for k, res := range results {
		logp, ent := tensors.MustCopyFlatData[float32](res[0]), tensors.MustCopyFlatData[float32](res[1])
		tm1 := res[0].Shape().Dimensions[1]
		for i, j := range plan.pieces[k] {
			n := len(seqs[j]) - 1
			out[j] = TokenScores{
				LogProbs: append([]float32(nil), logp[i*tm1:i*tm1+n]...),
				Entropy:  append([]float32(nil), ent[i*tm1:i*tm1+n]...),
			}
		}
		for _, r := range res {
			_ = r.FinalizeAll()
		}
	}
	return out, nil
}

// checkSeqs validates sequences given to Score and training.
func (p *Policy) checkSeqs(seqs [][]int32) error {
	return checkTokenSeqs(seqs, p.arch.Vocab(), p.arch.Context)
}

// checkTokenSeqs reports (the first ten) problems of sequences for a model of the vocabulary
// and context: fewer than 2 tokens, longer than the context, ids outside the vocabulary, none.
func checkTokenSeqs(seqs [][]int32, vocab, context int) error {
	var errs []error
	v := int32(vocab)
	for i, s := range seqs {
		switch {
		case len(s) < 2:
			errs = append(errs, fmt.Errorf("sequence %d has %d tokens; want at least 2", i, len(s)))
		case len(s) > context:
			errs = append(errs, fmt.Errorf("sequence %d has %d tokens; the context holds %d", i, len(s), context))
		}
		for j, t := range s {
			if t < 0 || t >= v {
				errs = append(errs, fmt.Errorf("sequence %d token %d is %d, outside the vocabulary [0,%d)", i, j, t, v))
				break
			}
		}
		if len(errs) > 10 {
			break
		}
	}
	if len(seqs) == 0 {
		errs = append(errs, errors.New("no sequences"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: bad token sequences: %w", errors.Join(errs...))
	}
	return nil
}

// padBatch packs sequences into a [bucketBatch(n), padLen(maxLen)] int32 tensor padded with
// PAD (padding rows are all PAD).
func (p *Policy) padBatch(seqs [][]int32) *tensors.Tensor {
	maxLen := 0
	for _, s := range seqs {
		maxLen = max(maxLen, len(s))
	}
	b, t := bucketBatch(len(seqs)), padLen(maxLen, p.arch.Context)
	flat := make([]int32, b*t)
	for i, s := range seqs {
		copy(flat[i*t:], s)
	}
	return tensors.FromFlatDataAndDimensions(flat, b, t)
}

var _ = dtypes.Float32
