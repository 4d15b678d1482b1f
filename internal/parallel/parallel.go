// Package parallel splits row-wise work over the CPU's cores: the helper agrl/llm's forward
// pass and agrl/llm/agent's scoring share.
package parallel

import (
	"runtime"
	"sync"
)

// Rows runs f over the rows [lo, hi) of n rows split into contiguous parts, one per
// goroutine, over up to GOMAXPROCS goroutines when there are several rows (f(0, n) on the
// calling goroutine otherwise). The parts are disjoint and cover [0, n); f must treat each row
// on its own, so that its results do not depend on the split.
func Rows(n int, f func(lo, hi int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}
