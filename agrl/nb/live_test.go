package nb

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"agrl.dev/agrl"
)

// fakeLive returns a Live with a fake clock and a recorder of what it would display.
func fakeLive(total int, metrics ...string) (*Live, *time.Time, *[]string) {
	l := NewLive(total, metrics...)
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var shown []string
	l.now = func() time.Time { return clock }
	l.show = func(id, html string) {
		if !strings.HasPrefix(id, "agrl_nb_") {
			panic("bad display id " + id)
		}
		shown = append(shown, html)
	}
	return l, &clock, &shown
}

func TestLiveThrottlesRedraws(t *testing.T) {
	l, clock, shown := fakeLive(50, "reward/mean", "kl")
	for step := 1; step <= 50; step++ {
		*clock = clock.Add(100 * time.Millisecond) // 10 steps per second, redraw at most once a second
		l.Update(agrl.Metrics{"step": float64(step), "reward/mean": float64(step) / 50, "kl": math.NaN()})
	}
	// The first update, then one per 10 steps (steps 11, 21, 31, 41), then the last step.
	if len(*shown) != 6 {
		t.Fatalf("%d redraws for 50 steps in 5 s, want 6", len(*shown))
	}
	last := (*shown)[5]
	for _, want := range []string{"step 50 / 50", "100%", "4.9 s elapsed", "10.00 steps/s", "reward/mean <b>1</b>", "kl <b>–</b>", "<polyline"} {
		if !strings.Contains(last, want) {
			t.Errorf("missing %q in %s", want, last)
		}
	}
	if strings.Contains(last, "done") {
		t.Error("done before Close")
	}
	l.Close()
	l.Close()
	l.Update(agrl.Metrics{"step": 51})
	if len(*shown) != 7 || !strings.Contains((*shown)[6], "<b>done</b>") {
		t.Fatalf("Close must redraw once with the final state: %d redraws", len(*shown))
	}
	if first := (*shown)[0]; !strings.Contains(first, "step 1 / 50") || !strings.Contains(first, "2%") {
		t.Errorf("first redraw: %s", first)
	}
	mid := (*shown)[2]
	if !strings.Contains(mid, "about ") || !strings.Contains(mid, " left") {
		t.Errorf("no time left estimate in %s", mid)
	}
}

func TestLiveDefaultsAndEscaping(t *testing.T) {
	l, clock, shown := fakeLive(10)
	l.Every(0)
	for step := 0; step < 3; step++ { // a trainer that counts from 0
		*clock = clock.Add(time.Second)
		l.Update(agrl.Metrics{"step": float64(step), "success": 0.5, "kl": 0.01, "<odd>": 1})
	}
	if len(*shown) != 3 {
		t.Errorf("Every(0): %d redraws, want 3", len(*shown))
	}
	out := l.HTML()
	if !strings.Contains(out, "step 3 / 10") {
		t.Errorf("steps done must count updates when steps start at 0: %s", out)
	}
	if !strings.Contains(out, "success <b>0.500</b>") || !strings.Contains(out, "kl <b>0.010</b>") || strings.Contains(out, "odd") {
		t.Errorf("with no metric named, Live follows the default metrics present: %s", out)
	}
	l.Close()
	if !strings.Contains((*shown)[len(*shown)-1], "<b>stopped</b>") {
		t.Error("closing before the last step says stopped")
	}
	hostileLive, _, _ := fakeLive(5, "<script>x</script>")
	hostileLive.Update(agrl.Metrics{"step": 1, "<script>x</script>": 2})
	if h := hostileLive.HTML(); strings.Contains(h, "<script") || !strings.Contains(h, "&lt;script&gt;x&lt;/script&gt; <b>2</b>") {
		t.Errorf("metric names must be escaped: %s", h)
	}
	empty, _, _ := fakeLive(5, "loss")
	if h := empty.HTML(); !strings.Contains(h, "step 0 / 5") || !strings.Contains(h, "loss <b>–</b>") {
		t.Errorf("before any update: %s", h)
	}
}

func TestLiveConcurrentUpdates(t *testing.T) {
	l := NewLive(400, "reward/mean") // real clock, no-op display outside a notebook
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				l.Update(agrl.Metrics{"step": float64(g*100 + i), "reward/mean": float64(i)})
				_ = l.HTML()
			}
		}()
	}
	wg.Wait()
	l.Close()
	if !strings.Contains(l.HTML(), "400 / 400") {
		t.Error("400 updates")
	}
}

func TestSparklineThinsLongSeries(t *testing.T) {
	var pts [][2]float64
	for i := range 10000 {
		pts = append(pts, [2]float64{float64(i), math.Sin(float64(i) / 100)})
	}
	svg := sparkline(pts, 100, 40, "#000")
	if n := strings.Count(svg, ","); n > 260 {
		t.Errorf("%d points drawn for a 100-pixel sparkline", n)
	}
	if !strings.Contains(sparkline(pts[:1], 100, 40, "#000"), "<polyline") {
		t.Error("a single point")
	}
}

func TestLiveShowsTheWarmStart(t *testing.T) {
	l, clock, shown := fakeLive(20, "loss", "accuracy")
	for step := 1; step <= 20; step++ {
		*clock = clock.Add(time.Second)
		l.UpdateSFT(agrl.SFTProgress{Stats: agrl.StepStats{Step: step, Loss: 2 / float64(step), Metrics: map[string]float64{"accuracy": float64(step) / 20}}, Steps: 20})
	}
	last := (*shown)[len(*shown)-1]
	for _, want := range []string{"step 20 / 20", "loss <b>0.100</b>", "accuracy <b>1</b>"} {
		if !strings.Contains(last, want) {
			t.Errorf("missing %q in %s", want, last)
		}
	}
}

// A step's phases show under the bar while it runs (escaped, throttled like updates) and go
// with that step's update.
func TestLiveShowsPhases(t *testing.T) {
	l, clock, shown := fakeLive(3, "reward/mean")
	l.Update(agrl.Metrics{"step": 1, "reward/mean": 0.5})
	*clock = clock.Add(2 * time.Second)
	l.UpdatePhase(agrl.StepPhase{Step: 2, What: "update 1/1: micro-batch 1 of 4 <done>", Elapsed: 95 * time.Second})
	l.UpdatePhase(agrl.StepPhase{Step: 2, What: "update 1/1: micro-batch 2 of 4 done", Elapsed: 96 * time.Second}) // throttled
	if len(*shown) != 2 || !strings.Contains((*shown)[1], "step 2: update 1/1: micro-batch 1 of 4 &lt;done&gt; (1m35s)") {
		t.Fatalf("%d redraws; the phase line is not in the last: %s", len(*shown), (*shown)[len(*shown)-1])
	}
	*clock = clock.Add(2 * time.Second)
	l.Update(agrl.Metrics{"step": 2, "reward/mean": 0.6})
	if last := (*shown)[len(*shown)-1]; strings.Contains(last, "agrl-phase") || !strings.Contains(last, "step 2 / 3") {
		t.Errorf("after step 2's update: %s", last)
	}
}
