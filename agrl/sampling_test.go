package agrl

import (
	"slices"
	"sync"
	"testing"
)

// EpisodeEnded tells Progress, one call at a time, 1 … total as episodes end on several
// goroutines; without Progress it does nothing.
func TestEpisodeEnded(t *testing.T) {
	var got []int
	o := RolloutOptions{Progress: func(done, total int) {
		if total != 40 {
			t.Errorf("total %d", total)
		}
		got = append(got, done) // unsynchronised: EpisodeEnded serialises the calls (go test -race)
	}}
	ended := o.EpisodeEnded(40)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				ended()
			}
		})
	}
	wg.Wait()
	want := make([]int, 40)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(got, want) {
		t.Errorf("progress %v", got)
	}
	RolloutOptions{}.EpisodeEnded(3)() // no Progress: a no-op
}
