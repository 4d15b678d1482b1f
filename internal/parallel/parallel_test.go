package parallel

import (
	"runtime"
	"sync"
	"testing"
)

// Rows covers every row exactly once, in contiguous parts, whatever n and GOMAXPROCS; with
// no rows it calls f once with an empty range.
func TestRows(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 2, 5, 7, 64, 1001} {
			seen := make([]int, n)
			var mu sync.Mutex
			calls := 0
			Rows(n, func(lo, hi int) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if lo > hi || lo < 0 || hi > n {
					t.Errorf("procs %d n %d: part [%d, %d)", procs, n, lo, hi)
					return
				}
				for i := lo; i < hi; i++ {
					seen[i]++
				}
			})
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("procs %d n %d: row %d done %d times", procs, n, i, c)
				}
			}
			if want := max(1, min(n, procs)); calls != want {
				t.Errorf("procs %d n %d: %d parts, want %d", procs, n, calls, want)
			}
		}
	}
}
