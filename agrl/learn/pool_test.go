package learn

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelRunsEveryPartOnce checks that parallel runs each part exactly once with the
// right part count, whether the pool takes the call, a nested call falls back to goroutines,
// several goroutines call at once, or there are more parts than cores; and that chunked
// covers every item once, in pieces aligned as asked.
func TestParallelRunsEveryPartOnce(t *testing.T) {
	check := func(nw int) {
		t.Helper()
		runs := make([]atomic.Int32, nw)
		var bad atomic.Int32
		parallel(nw, func(w, n int) {
			if n != nw {
				bad.Add(1)
			}
			runs[w].Add(1)
		})
		if bad.Load() != 0 {
			t.Fatalf("parallel(%d): a part was told another part count", nw)
		}
		for w := range runs {
			if got := runs[w].Load(); got != 1 {
				t.Fatalf("parallel(%d): part %d ran %d times", nw, w, got)
			}
		}
	}
	for _, procs := range []int{1, 2, 4} {
		old := runtime.GOMAXPROCS(procs)
		for _, nw := range []int{1, 2, 3, 5, 17} {
			for range 50 {
				check(nw)
			}
		}
		// Nested: the inner calls find the pool busy and use goroutines of their own.
		var inner atomic.Int32
		parallel(3, func(_, _ int) {
			parallel(4, func(_, _ int) { inner.Add(1) })
		})
		if inner.Load() != 12 {
			t.Fatalf("GOMAXPROCS %d: nested calls ran %d inner parts, want 12", procs, inner.Load())
		}
		// Concurrent callers.
		var wg sync.WaitGroup
		var total atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					parallel(3, func(w, _ int) { total.Add(int64(w) + 1) })
				}
			}()
		}
		wg.Wait()
		if total.Load() != 4*200*6 {
			t.Fatalf("GOMAXPROCS %d: concurrent calls summed %d, want %d", procs, total.Load(), 4*200*6)
		}
		runtime.GOMAXPROCS(old)
	}
	for _, c := range [][4]int{{0, 2, 1, 1}, {1, 2, 4, 8}, {7, 3, 1, 8}, {1235, 2, 4, 8}, {128, 2, 16, 16}, {100, 5, 16, 1}, {1 << 16, 2, 16, 1 << 13}} {
		n, workers, align, minItems := c[0], c[1], c[2], c[3]
		seen := make([]atomic.Int32, n)
		var misaligned atomic.Int32
		chunked(workers, n, align, minItems, func(lo, hi int) {
			if lo%align != 0 || (hi%align != 0 && hi != n) || lo >= hi {
				misaligned.Add(1)
			}
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
		})
		if misaligned.Load() != 0 {
			t.Fatalf("chunked(%d, %d, align %d): a piece is misaligned or empty", workers, n, align)
		}
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Fatalf("chunked(%d, %d): item %d covered %d times", workers, n, i, seen[i].Load())
			}
		}
	}
}

// TestParallelWaitsForSlowParts: parallel returns only once every part has finished. Every
// part but part 0 sleeps, for nothing, for less than poolSpin and for longer, so that (as the
// scheduler allows: nothing here forces who runs which part) the caller often finishes first
// and waits, by polling alone or by polling and then blocking. An await that stops at one
// unfinished part, or that gives up polling without blocking, fails it.
func TestParallelWaitsForSlowParts(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	for _, d := range []time.Duration{0, 50 * time.Microsecond, poolSpin / 2, 3 * poolSpin} {
		for range 20 {
			for _, nw := range []int{2, 3, 8} {
				finished := make([]atomic.Bool, nw)
				parallel(nw, func(w, _ int) {
					if w > 0 {
						time.Sleep(d)
					}
					finished[w].Store(true)
				})
				for w := range finished {
					if !finished[w].Load() {
						t.Fatalf("parts of %v, %d parts: parallel returned before part %d finished", d, nw, w)
					}
				}
			}
		}
	}
}

// BenchmarkParallelStage times one stage of parallel on two workers whose parts are empty or
// take about 2 µs: the pool's fixed cost a stage (posting it, a polling helper claiming a
// part, the caller awaiting the last), which a training step of the Tiny model pays about 100
// times.
func BenchmarkParallelStage(b *testing.B) {
	var sink [2]float64
	for _, work := range []int{0, 2000} {
		b.Run(fmt.Sprintf("work%d", work), func(b *testing.B) {
			for range b.N {
				parallel(2, func(w, _ int) {
					x := 1.0
					for i := range work {
						x += float64(i) * 1e-9 * x
					}
					sink[w] += x
				})
			}
		})
	}
	_ = sink
}
