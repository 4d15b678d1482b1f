package learn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The host code's worker pool. A training step of the Tiny model is about 100 parallel stages of
// a millisecond or less each; starting a goroutine per stage left the second core
// idle for the first ~0.1 ms of every one (the runtime wakes a parked thread for it), about
// a tenth of a step (docs/performance.md, "Keeping both cores busy"). The pool's helpers stay
// awake between stages, polling for the next one for a short while before they park, and the
// caller runs any part of a stage that no helper has claimed yet, so a stage never waits for a
// helper to wake up.

// poolJob is one call of parallel: its nw parts go to whoever claims them first, the caller
// included.
type poolJob struct {
	f    func(w, nw int)
	nw   int32
	next atomic.Int32 // the next part to claim
	left atomic.Int32 // parts not finished yet (await polls it)
	done sync.WaitGroup
}

// claim takes the job's next part, or reports false when none is left.
func (j *poolJob) claim() (int, bool) {
	if j.next.Load() >= j.nw {
		return 0, false
	}
	w := j.next.Add(1) - 1
	return int(w), w < j.nw
}

// run claims and runs parts until none is left.
func (j *poolJob) run() {
	for w, ok := j.claim(); ok; w, ok = j.claim() {
		j.f(w, int(j.nw))
		j.done.Done()
		j.left.Add(-1) // after Done: once left is 0, done.Wait returns at once
	}
}

// await returns when every part of the job has finished. It polls, as an idle helper does,
// for up to poolSpin, and only then blocks on done: blocking at once parked the caller's
// thread whenever a helper's part ended after the caller's, and waking it cost more than the
// wait (a 2-core Zen 3's warm-start step spent 1.9–2.7 ms of its 34–40 in the caller's
// WaitGroup.Wait, 0.6–1.8 ms polling; docs/performance.md, "A stage's end").
func (j *poolJob) await() {
	if j.left.Load() == 0 {
		return // every Done is in: done.Wait would return at once
	}
	start := time.Now()
	for spins := 0; j.left.Load() > 0; spins++ {
		spinPause()
		if spins%64 == 63 {
			if time.Since(start) > poolSpin {
				break
			}
			runtime.Gosched()
		}
	}
	j.done.Wait()
}

var pool struct {
	job     atomic.Pointer[poolJob] // the stage being run, nil between stages
	helpers atomic.Int32            // helpers started
	parked  atomic.Int32            // helpers blocked on poolWake
}

// poolWake wakes parked helpers (a token too many only makes a helper poll and park again).
var poolWake = make(chan struct{}, 256)

// poolSpin is how long an idle helper polls for the next stage before it parks: longer than
// the gaps between a step's stages, much shorter than the pauses between steps.
const poolSpin = 200 * time.Microsecond

// helper is a pool goroutine: it runs parts of whatever stage is posted, polls for the next
// one, and parks when none comes within poolSpin.
func helper() {
	for {
		idle := time.Now()
		for spins := 0; ; spins++ {
			if j := pool.job.Load(); j != nil && j.next.Load() < j.nw {
				j.run()
				idle = time.Now()
				continue
			}
			spinPause()
			if spins%64 == 63 {
				if time.Since(idle) > poolSpin {
					break
				}
				runtime.Gosched()
			}
		}
		pool.parked.Add(1)
		if j := pool.job.Load(); j != nil && j.next.Load() < j.nw { // posted while parking
			pool.parked.Add(-1)
			continue
		}
		<-poolWake
		pool.parked.Add(-1)
	}
}

// parallel runs f(w, nw) for every w < nw and waits; the parts run on the pool's helpers and
// the caller at once, so f must not wait for another of its parts. When the pool is busy (a
// nested or concurrent call) the parts run on goroutines of their own.
func parallel(nw int, f func(w, nw int)) {
	if nw <= 1 {
		f(0, 1)
		return
	}
	j := &poolJob{f: f, nw: int32(nw)}
	j.left.Store(int32(nw))
	j.done.Add(nw)
	if !pool.job.CompareAndSwap(nil, j) {
		for w := 1; w < nw; w++ {
			go func() { defer j.done.Done(); f(w, nw) }()
		}
		f(0, nw)
		j.done.Done()
		j.done.Wait()
		return
	}
	// One helper per other core at most: parts beyond that wait for whoever finishes first.
	for h := pool.helpers.Load(); h < int32(min(nw, runtime.GOMAXPROCS(0))-1); h = pool.helpers.Load() {
		if pool.helpers.CompareAndSwap(h, h+1) {
			go helper()
		}
	}
	// Freed last, even if one of the caller's parts panics (and something above recovers):
	// otherwise every later call would take the fallback.
	defer pool.job.CompareAndSwap(j, nil)
	for range min(pool.parked.Load(), int32(nw-1)) {
		select {
		case poolWake <- struct{}{}:
		default:
		}
	}
	j.run()
	j.await()
}

// chunksPerWorker is how many pieces eachChunk cuts a stage into per worker.
const chunksPerWorker = 4

// eachChunk runs f(w, i) for every piece i < n of a stage, as at most nw parts (parallel's)
// that take the pieces in turn from a shared counter; w is the part's index, for its scratch
// buffers (no two pieces of one part run at once). A fixed split would make every stage wait for its slowest worker, and on a shared
// VM one vCPU often runs slower than the other for a while, or a helper joins a stage late:
// the worker that is ahead takes more pieces. Which worker computes a piece never
// changes its result (the pieces write disjoint outputs, and every output's sum runs in its
// fixed order), so a step stays bit-identical however the pieces fall.
func eachChunk(nw, n int, f func(w, i int)) {
	nw = min(nw, n)
	if nw <= 1 {
		for i := range n {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	parallel(nw, func(w, _ int) {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			f(w, i)
		}
	})
}

// chunked splits n items into about chunksPerWorker pieces per worker, each a multiple of
// align items (except the last) and at least minItems, and runs f(lo, hi) on each (see
// eachChunk).
func chunked(workers, n, align, minItems int, f func(lo, hi int)) {
	if n == 0 {
		return
	}
	if workers <= 1 {
		f(0, n)
		return
	}
	size := (n + workers*chunksPerWorker - 1) / (workers * chunksPerWorker)
	size = (max(size, minItems) + align - 1) / align * align
	eachChunk(workers, (n+size-1)/size, func(_, i int) { f(i*size, min(n, (i+1)*size)) })
}
