package nb

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"agrl.dev/agrl"
)

// DefaultMetrics are the curves drawn when no metric is named: those of them that the run
// logged, in this order: reward, success, KL, entropy, response length, tool-call rate and the
// fraction of tokens clipped above 1+ε_high.
var DefaultMetrics = []string{
	agrl.MetricReward, agrl.MetricSuccess, agrl.MetricKL, agrl.MetricEntropy, agrl.MetricResponseLength,
	agrl.MetricToolCallRate, agrl.MetricClipHigh,
}

// Default panel size in pixels, and the resolution the PNG is drawn at.
const (
	DefaultPanelWidth  = 420
	DefaultPanelHeight = 280
	chartDPI           = 96
)

// Chart draws training curves read from run directories: one panel per metric, with the
// training step on the x axis and one line per run. NaN and infinite values (a metric that was
// undefined at a step) are skipped.
//
// Chart is a value: setters return a copy. The zero value draws panels of DefaultPanelWidth ×
// DefaultPanelHeight pixels, two to a row, without smoothing.
//
//	png, err := nb.NewChart().Panel(300, 200).Smooth(10).PNG(runs, "reward/mean", "kl")
type Chart struct {
	width, height int
	cols          int
	smooth        int
	title         string
}

// NewChart returns a chart with the default settings.
func NewChart() Chart { return Chart{} }

// Panel sets the size of each panel in pixels (0 keeps the default; at least 120 × 90).
func (c Chart) Panel(width, height int) Chart { c.width, c.height = width, height; return c }

// Columns sets how many panels share a row (0: one for a single metric, else two).
func (c Chart) Columns(n int) Chart { c.cols = n; return c }

// Smooth replaces each value by the mean of the last window values (0 or 1: raw values).
// RL curves are noisy; a window of about a tenth of the steps shows the trend.
func (c Chart) Smooth(window int) Chart { c.smooth = window; return c }

// Title sets a title drawn above every panel's metric name (e.g. the environment).
func (c Chart) Title(s string) Chart { c.title = s; return c }

// Validate reports every problem of the chart's settings at once, or nil.
func (c Chart) Validate() error {
	var errs []error
	if c.width != 0 && c.width < 120 || c.height != 0 && c.height < 90 || c.width < 0 || c.height < 0 {
		errs = append(errs, fmt.Errorf("panel size %d×%d: want at least 120×90 pixels (or 0 for the default)", c.width, c.height))
	}
	if c.cols < 0 {
		errs = append(errs, fmt.Errorf("columns %d: want >= 0", c.cols))
	}
	if c.smooth < 0 {
		errs = append(errs, fmt.Errorf("smoothing window %d: want >= 0", c.smooth))
	}
	if len(errs) > 0 {
		return fmt.Errorf("nb: invalid chart: %w", errors.Join(errs...))
	}
	return nil
}

// Size returns the PNG's size in pixels for n metrics.
func (c Chart) Size(n int) (width, height int) {
	w, h, cols := c.layout(n)
	rows := (n + cols - 1) / cols
	return w * cols, h * rows
}

func (c Chart) layout(n int) (w, h, cols int) {
	w, h, cols = c.width, c.height, c.cols
	if w == 0 {
		w = DefaultPanelWidth
	}
	if h == 0 {
		h = DefaultPanelHeight
	}
	if cols == 0 {
		cols = 2
	}
	cols = max(1, min(cols, n))
	return w, h, cols
}

// Show draws the chart and displays it in the notebook. On error it displays the error too.
func (c Chart) Show(runs []*agrl.Run, metrics ...string) error {
	png, err := c.PNG(runs, metrics...)
	if err != nil {
		return showError(err)
	}
	ShowPNG(png)
	return nil
}

// PNG draws the chart as a PNG image. With no metric named it draws DefaultMetrics that the
// first run logged. It is an error to pass no run, a nil run, or a metric that some run never
// logged with a finite value (the error lists the run's metric names).
func (c Chart) PNG(runs []*agrl.Run, metrics ...string) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, errors.New("nb: no run to plot")
	}
	for i, r := range runs {
		if r == nil {
			return nil, fmt.Errorf("nb: run %d is nil", i)
		}
	}
	if len(metrics) == 0 {
		for _, m := range DefaultMetrics {
			if s, _ := finiteSeries(runs[0], m); len(s) > 0 {
				metrics = append(metrics, m)
			}
		}
		if len(metrics) == 0 {
			return nil, fmt.Errorf("nb: run %q logged none of the default metrics %s; name the metrics to plot (it has: %s)",
				runs[0].Name, strings.Join(DefaultMetrics, ", "), metricList(runs[0]))
		}
	}
	names := runNames(runs)
	var plots []*plot.Plot
	var errs []error
	for _, metric := range metrics {
		p, err := c.panel(runs, names, metric)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plots = append(plots, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c.render(plots)
}

// newPanel returns an empty panel for metric: its title (with the smoothing and the chart's
// title), the step axis, sans fonts, a grid and the legend's place.
func (c Chart) newPanel(metric string) *plot.Plot {
	p := plot.New()
	p.Title.Text = metric
	if c.smooth > 1 {
		p.Title.Text += fmt.Sprintf(" (mean of %d)", c.smooth)
	}
	if c.title != "" {
		p.Title.Text = c.title + ": " + p.Title.Text
	}
	p.X.Label.Text = "step"
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p
}

// panel draws one metric of every run.
func (c Chart) panel(runs []*agrl.Run, names []string, metric string) (*plot.Plot, error) {
	p := c.newPanel(metric)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for i, run := range runs {
		xy, err := finiteSeries(run, metric)
		if err != nil {
			return nil, err
		}
		xy = smooth(xy, c.smooth)
		for _, pt := range xy {
			ymin, ymax = min(ymin, pt.Y), max(ymax, pt.Y)
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return nil, fmt.Errorf("nb: %s of run %q: %w", metric, run.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		if len(xy) == 1 { // a line of one point draws nothing
			sc, err := plotter.NewScatter(xy)
			if err == nil {
				sc.Color = line.Color
				p.Add(sc)
			}
		}
		if len(runs) > 1 {
			p.Legend.Add(names[i], line)
		}
	}
	if ymin == ymax { // a constant series: give the axis some height
		pad := max(math.Abs(ymin)*0.1, 0.5)
		ymin, ymax = ymin-pad, ymax+pad
		p.Y.Min, p.Y.Max = ymin, ymax
	}
	if len(runs) > 1 {
		// Headroom above the data for the legend (about 12 pixels per run), so that it never
		// hides a curve.
		_, h, _ := c.layout(1)
		frac := min(0.5, float64(12*len(runs)+8)/float64(max(h-70, 40)))
		p.Y.Min, p.Y.Max = ymin, ymax+(ymax-ymin)*frac/(1-frac)
	}
	return p, nil
}

// render tiles the panels and encodes the PNG.
func (c Chart) render(plots []*plot.Plot) ([]byte, error) {
	n := len(plots)
	w, h, cols := c.layout(n)
	rows := (n + cols - 1) / cols
	width := vg.Length(w*cols) / chartDPI * vg.Inch
	height := vg.Length(h*rows) / chartDPI * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(chartDPI))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(8), PadY: vg.Points(8),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for k := range cols {
			if i := r*cols + k; i < n {
				grid[r][k] = plots[i]
			}
		}
	}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for k, p := range grid[r] {
			if p != nil {
				p.Draw(canvases[r][k])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("nb: encoding PNG: %w", err)
	}
	return buf.Bytes(), nil
}

// finiteSeries returns the (step, value) points of metric with NaN and infinite values
// skipped, or an error that names the run's metrics when none is left.
func finiteSeries(run *agrl.Run, metric string) (plotter.XYs, error) {
	steps, values := run.Series(metric)
	var xy plotter.XYs
	for i, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && !math.IsNaN(steps[i]) {
			xy = append(xy, plotter.XY{X: steps[i], Y: v})
		}
	}
	switch {
	case len(xy) > 0:
		return xy, nil
	case len(values) > 0:
		return nil, fmt.Errorf("nb: run %q logged %q at %d steps, all NaN or infinite", run.Name, metric, len(values))
	default:
		return nil, fmt.Errorf("nb: run %q has no metric %q (it has: %s)", run.Name, metric, metricList(run))
	}
}

func metricList(run *agrl.Run) string {
	var names []string
	for _, m := range run.MetricNames() {
		if m != agrl.MetricStep {
			names = append(names, m)
		}
	}
	if len(names) == 0 {
		return "no metrics yet"
	}
	return strings.Join(names, ", ")
}

// smooth replaces each point's value by the mean of the last window values.
func smooth(xy plotter.XYs, window int) plotter.XYs {
	if window <= 1 {
		return xy
	}
	out := make(plotter.XYs, len(xy))
	sum := 0.0
	for i, pt := range xy {
		sum += pt.Y
		if i >= window {
			sum -= xy[i-window].Y
		}
		out[i] = plotter.XY{X: pt.X, Y: sum / float64(min(i+1, window))}
	}
	return out
}

// runNames returns the runs' names, falling back to their directories when names repeat.
func runNames(runs []*agrl.Run) []string {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name
		if count[r.Name] > 1 || r.Name == "" {
			out[i] = r.Dir
		}
	}
	return out
}

// Curves displays metrics of one run over training steps, one panel per metric (with no
// metric named: DefaultMetrics that the run logged). On error it displays the error too.
//
//	nb.Curves(run, "reward/mean", "success", "kl")
func Curves(run *agrl.Run, metrics ...string) error {
	return NewChart().Show([]*agrl.Run{run}, metrics...)
}

// CurvesPNG draws what Curves displays, as a PNG (for files and HTML reports).
func CurvesPNG(run *agrl.Run, metrics ...string) ([]byte, error) {
	return NewChart().PNG([]*agrl.Run{run}, metrics...)
}

// CompareRuns displays metrics of several runs, one line per run with a legend (for sweeps).
func CompareRuns(runs []*agrl.Run, metrics ...string) error {
	return NewChart().Show(runs, metrics...)
}

// CompareRunsPNG draws what CompareRuns displays, as a PNG.
func CompareRunsPNG(runs []*agrl.Run, metrics ...string) ([]byte, error) {
	return NewChart().PNG(runs, metrics...)
}

// RunGroup is a set of runs drawn as one: the same configuration trained with several seeds.
type RunGroup struct {
	Name string
	Runs []*agrl.Run
}

// ShowSeeds displays metrics of run groups (one configuration, several seeds): each run as a
// faint line and each group's mean over its runs as a bold line of the same colour. On error it
// displays the error too.
func (c Chart) ShowSeeds(groups []RunGroup, metrics ...string) error {
	png, err := c.SeedsPNG(groups, metrics...)
	if err != nil {
		return showError(err)
	}
	ShowPNG(png)
	return nil
}

// SeedsPNG draws what ShowSeeds displays, as a PNG. Every metric must be given. The mean at a
// step is over the runs that logged a finite value there.
func (c Chart) SeedsPNG(groups []RunGroup, metrics ...string) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(groups) == 0 || len(metrics) == 0 {
		return nil, errors.New("nb: SeedsPNG needs at least one group and one metric")
	}
	for _, g := range groups {
		if len(g.Runs) == 0 {
			return nil, fmt.Errorf("nb: group %q has no runs", g.Name)
		}
		for i, r := range g.Runs {
			if r == nil {
				return nil, fmt.Errorf("nb: group %q: run %d is nil", g.Name, i)
			}
		}
	}
	var plots []*plot.Plot
	var errs []error
	for _, metric := range metrics {
		p, err := c.seedPanel(groups, metric)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plots = append(plots, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c.render(plots)
}

// seedPanel draws one metric of every group: faint per-run lines, a bold mean.
func (c Chart) seedPanel(groups []RunGroup, metric string) (*plot.Plot, error) {
	p := c.newPanel(metric)
	for gi, g := range groups {
		col := plotutil.Color(gi)
		r, gr, b, _ := col.RGBA()
		faint := color.NRGBA{R: uint8(r >> 8), G: uint8(gr >> 8), B: uint8(b >> 8), A: 70}
		sum, cnt := map[float64]float64{}, map[float64]int{}
		for _, run := range g.Runs {
			xy, err := finiteSeries(run, metric)
			if err != nil {
				return nil, err
			}
			xy = smooth(xy, c.smooth)
			for _, pt := range xy {
				sum[pt.X] += pt.Y
				cnt[pt.X]++
			}
			line, err := plotter.NewLine(xy)
			if err != nil {
				return nil, fmt.Errorf("nb: %s of run %q: %w", metric, run.Name, err)
			}
			line.Color, line.Width = faint, vg.Points(1)
			p.Add(line)
		}
		var mean plotter.XYs
		for x, s := range sum {
			mean = append(mean, plotter.XY{X: x, Y: s / float64(cnt[x])})
		}
		sort.Slice(mean, func(i, j int) bool { return mean[i].X < mean[j].X })
		line, err := plotter.NewLine(mean)
		if err != nil {
			return nil, fmt.Errorf("nb: mean %s of group %q: %w", metric, g.Name, err)
		}
		line.Color, line.Width = col, vg.Points(2)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (mean of %d)", g.Name, len(g.Runs)), line)
	}
	return p, nil
}
