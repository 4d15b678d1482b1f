package nb

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"agrl.dev/agrl"
)

// DefaultLiveEvery is how often Live redraws at most: a notebook front end falls behind when
// an output block is replaced many times a second.
const DefaultLiveEvery = time.Second

// Live shows a training run's progress while a notebook cell trains: a progress bar (step,
// elapsed time, time left, steps per second), a small curve of each chosen metric and the
// alarms the metrics set off (agrl.CheckAlarms), updated in place in one output block. Redraws are throttled (see Every); the last step and Close
// always redraw, so the cell keeps the final state. Outside a notebook it draws nothing (HTML
// still renders the current state).
//
// The trainer calls Update from its per-step callback; Update and Close are safe for concurrent
// use.
//
//	live := nb.NewLive(150, "reward/mean", "success", "kl")
//	defer live.Close()
//	... trainer calls live.Update(m) after each step ...
type Live struct {
	mu       sync.Mutex
	id       string
	total    int
	metrics  []string
	auto     bool // no metric named: follow the DefaultMetrics that appear
	series   map[string][][2]float64
	last     agrl.Metrics
	phase    *agrl.StepPhase // where the running step is (UpdatePhase), until its Update
	history  []agrl.Metrics  // every update, for the alarms
	alarms   []agrl.Alarm
	updates  int
	start    time.Time
	lastDraw time.Time
	every    time.Duration
	closed   bool
	draws    int
	now      func() time.Time
	show     func(id, html string)
}

// NewLive returns a live display for a run of totalSteps steps that plots the named metrics
// (none named: the DefaultMetrics that the updates carry).
func NewLive(totalSteps int, metrics ...string) *Live {
	return &Live{
		id:      newDisplayID(),
		total:   totalSteps,
		metrics: append([]string(nil), metrics...),
		auto:    len(metrics) == 0,
		series:  map[string][][2]float64{},
		every:   DefaultLiveEvery,
		now:     time.Now,
		show:    updateHTML,
	}
}

// Every sets the minimum time between redraws (0 redraws at every update) and returns l.
func (l *Live) Every(d time.Duration) *Live {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.every = d
	return l
}

// UpdateSFT records one warm-start SFT step: pass l.UpdateSFT to agrl.GRPO.OnSFTStep, with l
// made for the warm start's steps and its metrics ("loss", "accuracy", "tokens_per_second").
//
//	sft := nb.NewLive(g.Spec().SFT.Spec().Steps, "loss", "accuracy")
//	tr := learn.MustBuild(g.OnSFTStep(sft.UpdateSFT))
func (l *Live) UpdateSFT(p agrl.SFTProgress) { l.Update(p.Metrics()) }

// UpdatePhase shows where the running step is (a line under the bar: "step 4: update 1/2:
// micro-batch 3 of 8 done (2m10s)") until that step's Update: pass it to the learner's
// GRPOTrainer.OnPhase, for runs whose steps take long. Redraws are throttled as Update's.
//
//	tr.OnPhase(live.UpdatePhase)
func (l *Live) UpdatePhase(p agrl.StepPhase) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.phase = &p
	if now := l.now(); l.draws == 0 || now.Sub(l.lastDraw) >= l.every {
		l.drawLocked(now)
	}
}

// Update records one step's metrics and redraws if the last redraw is older than Every, or if
// the step is the last one. Updates after Close are ignored.
func (l *Live) Update(m agrl.Metrics) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := l.now()
	if l.updates == 0 {
		l.start = now
	}
	l.updates++
	l.last = m
	if l.phase != nil && m.Step() >= l.phase.Step {
		l.phase = nil // that step is done
	}
	if _, ok := m[agrl.MetricStep]; ok && !l.sft() {
		l.history = append(l.history, m)
		l.alarms = agrl.CheckAlarms(l.history, nil)
	}
	if l.auto {
		for _, name := range DefaultMetrics {
			if _, ok := m[name]; ok && !contains(l.metrics, name) {
				l.metrics = append(l.metrics, name)
			}
		}
	}
	for _, name := range l.metrics {
		if v, ok := m[name]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			l.series[name] = append(l.series[name], [2]float64{float64(m.Step()), v})
		}
	}
	if l.draws == 0 || now.Sub(l.lastDraw) >= l.every || l.done() >= l.total {
		l.drawLocked(now)
	}
}

// Close redraws the final state (not throttled) and stops further updates. It is safe to call
// twice.
func (l *Live) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.drawLocked(l.now())
	flush() // the final state must reach the notebook before the cell's program exits
}

// HTML renders the current state.
func (l *Live) HTML() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.htmlLocked(l.now())
}

func (l *Live) drawLocked(now time.Time) {
	l.draws++
	l.lastDraw = now
	l.show(l.id, l.htmlLocked(now))
}

// done is the number of steps completed: the step number (trainers count from 0 or 1, or
// resume at a later step) or the number of updates, whichever is larger.
func (l *Live) done() int {
	if l.last == nil {
		return 0
	}
	return max(l.last.Step(), l.updates)
}

func (l *Live) htmlLocked(now time.Time) string {
	var b strings.Builder
	b.WriteString(`<div class="agrl-live" style="font-family:sans-serif;font-size:12px">`)
	done := l.done()
	frac := 0.0
	if l.total > 0 {
		frac = math.Min(1, float64(done)/float64(l.total))
	}
	status := ""
	elapsed := now.Sub(l.start).Seconds()
	if l.updates == 0 {
		elapsed = 0
	}
	fmt.Fprintf(&b, `<div>step %d / %d · %.0f%% · %s elapsed`, done, l.total, 100*frac, seconds(elapsed))
	if l.updates > 1 && elapsed > 0 {
		rate := float64(l.updates-1) / elapsed // steps after the first, over the time since it
		fmt.Fprintf(&b, ` · %.2f steps/s`, rate)
		if left := l.total - done; left > 0 && !l.closed {
			fmt.Fprintf(&b, ` · about %s left`, seconds(float64(left)/rate))
		}
	}
	switch {
	case l.closed && done >= l.total:
		status = "done"
	case l.closed:
		status = "stopped"
	}
	if status != "" {
		fmt.Fprintf(&b, ` · <b>%s</b>`, status)
	}
	b.WriteString(`</div>`)
	if l.phase != nil && !l.closed {
		fmt.Fprintf(&b, `<div class="agrl-phase" style="color:#555">step %d: %s (%s)</div>`, l.phase.Step, esc(l.phase.What), l.phase.Elapsed.Round(time.Second))
	}
	color := "#3f51b5"
	if l.closed && done >= l.total {
		color = "#2e7d32"
	}
	fmt.Fprintf(&b, `<div class="agrl-progress" style="background:#e0e0e0;width:30em;max-width:100%%;height:10px;border-radius:3px;margin:3px 0">`+
		`<div style="background:%s;width:%.1f%%;height:100%%;border-radius:3px"></div></div>`, color, 100*frac)
	if len(l.metrics) > 0 {
		b.WriteString(`<div style="display:flex;flex-wrap:wrap;gap:14px">`)
		for _, name := range l.metrics {
			pts := l.series[name]
			value := "–"
			if len(pts) > 0 {
				value = formatFloat(pts[len(pts)-1][1])
			}
			fmt.Fprintf(&b, `<div><div>%s <b>%s</b></div>%s</div>`, esc(name), esc(value), sparkline(pts, 180, 48, color))
		}
		b.WriteString(`</div>`)
	}
	b.WriteString(AlarmsHTML(l.alarms))
	b.WriteString(`</div>`)
	return b.String()
}

// sft reports whether the updates are a warm start's (they carry no GRPO metrics): the alarms
// read GRPO steps only.
func (l *Live) sft() bool {
	_, ok := l.last[agrl.MetricReward]
	return !ok
}

// Alarms returns the alarms the GRPO metrics so far set off (agrl.CheckAlarms; the hacking
// rule needs evaluations, which the live view does not see: report.html shows it).
func (l *Live) Alarms() []agrl.Alarm {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]agrl.Alarm(nil), l.alarms...)
}

// sparkline draws points as an inline SVG polyline of w×h pixels, with the y range printed.
// Long series are thinned to at most 2 points per pixel.
func sparkline(pts [][2]float64, w, h int, color string) string {
	if len(pts) == 0 {
		return fmt.Sprintf(`<svg width="%d" height="%d"></svg>`, w, h)
	}
	if stride := len(pts) / (2 * w); stride > 1 {
		var thin [][2]float64
		for i := 0; i < len(pts); i += stride {
			thin = append(thin, pts[i])
		}
		pts = append(thin, pts[len(pts)-1])
	}
	x0, x1 := pts[0][0], pts[len(pts)-1][0]
	y0, y1 := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		y0, y1 = min(y0, p[1]), max(y1, p[1])
	}
	if x1 == x0 {
		x1 = x0 + 1
	}
	if y1 == y0 {
		y0, y1 = y0-0.5, y1+0.5
	}
	const pad = 3.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" style="background:#fafafa;border:1px solid #eee">`, w, h)
	b.WriteString(`<polyline fill="none" stroke="` + color + `" stroke-width="1.5" points="`)
	for i, p := range pts {
		x := pad + (p[0]-x0)/(x1-x0)*(float64(w)-2*pad)
		y := float64(h) - pad - (p[1]-y0)/(y1-y0)*(float64(h)-2*pad)
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	b.WriteString(`"/>`)
	fmt.Fprintf(&b, `<text x="2" y="10" font-size="9" fill="#888">%s</text><text x="2" y="%d" font-size="9" fill="#888">%s</text>`,
		esc(formatFloat(y1)), h-2, esc(formatFloat(y0)))
	b.WriteString(`</svg>`)
	return b.String()
}

func seconds(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.1f s", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
