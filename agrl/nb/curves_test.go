package nb

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"agrl.dev/agrl"
)

// makeRun writes a run directory with steps lines of metrics computed by f and opens it.
func makeRun(t *testing.T, name string, steps int, f func(step int) agrl.Metrics) *agrl.Run {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	w, err := agrl.CreateRun(dir, map[string]any{"name": name, "grpo": map[string]any{"kl": 0.01}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= steps; s++ {
		m := f(s)
		m["step"] = float64(s)
		if err := w.LogMetrics(m); err != nil {
			t.Fatal(err)
		}
	}
	run, err := agrl.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func trainingLike(shift float64) func(int) agrl.Metrics {
	return func(s int) agrl.Metrics {
		x := float64(s)
		m := agrl.Metrics{
			"reward/mean": math.Tanh(x/20) + shift,
			"success":     math.Min(1, x/40),
			"kl":          0.001 * x,
			"entropy":     2 - x/50,
		}
		if s%7 == 0 {
			m["kl"] = math.NaN() // undefined at some steps
		}
		return m
	}
}

func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	return img
}

func TestCurvesPNGSize(t *testing.T) {
	run := makeRun(t, "calc", 60, trainingLike(0))
	for _, tc := range []struct {
		chart   Chart
		metrics []string
		w, h    int
	}{
		{NewChart(), []string{"reward/mean"}, DefaultPanelWidth, DefaultPanelHeight},
		{NewChart(), []string{"reward/mean", "kl"}, 2 * DefaultPanelWidth, DefaultPanelHeight},
		{NewChart(), []string{"reward/mean", "kl", "success"}, 2 * DefaultPanelWidth, 2 * DefaultPanelHeight},
		{NewChart().Panel(300, 200).Columns(3), []string{"reward/mean", "kl", "success", "entropy"}, 900, 400},
		{NewChart().Smooth(5).Title("calc"), nil, 2 * DefaultPanelWidth, 2 * DefaultPanelHeight}, // 4 default metrics present
	} {
		b, err := tc.chart.PNG([]*agrl.Run{run}, tc.metrics...)
		if err != nil {
			t.Fatalf("%v: %v", tc.metrics, err)
		}
		size := decodePNG(t, b).Bounds().Size()
		if size.X != tc.w || size.Y != tc.h {
			t.Errorf("%v: PNG is %v, want %dx%d", tc.metrics, size, tc.w, tc.h)
		}
		if w, h := tc.chart.Size(max(len(tc.metrics), 4*btoi(tc.metrics == nil))); w != tc.w || h != tc.h {
			t.Errorf("%v: Size says %dx%d, want %dx%d", tc.metrics, w, h, tc.w, tc.h)
		}
	}
	// CurvesPNG is the default chart of one run.
	a, err := CurvesPNG(run, "reward/mean", "kl")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewChart().PNG([]*agrl.Run{run}, "reward/mean", "kl")
	if !bytes.Equal(a, b) {
		t.Error("CurvesPNG differs from the default chart")
	}
	if err := Curves(run, "reward/mean"); err != nil { // a no-op display outside a notebook
		t.Error(err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hasColor reports whether some pixel of img has exactly the colour c.
func hasColor(img image.Image, c color.Color) bool {
	r0, g0, b0, _ := c.RGBA()
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				return true
			}
		}
	}
	return false
}

func TestCompareRunsDrawsOneLinePerRun(t *testing.T) {
	runs := []*agrl.Run{
		makeRun(t, "kl0", 40, trainingLike(0)),
		makeRun(t, "kl0.01", 40, trainingLike(0.3)),
		makeRun(t, "kl0.04", 25, trainingLike(-0.3)), // a shorter run
	}
	b, err := CompareRunsPNG(runs, "reward/mean")
	if err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, b)
	for i := range runs {
		if !hasColor(img, plotutil.Color(i)) {
			t.Errorf("no pixel in the colour of run %d", i)
		}
	}
	if hasColor(img, plotutil.Color(len(runs))) {
		t.Error("a colour for a run that is not there")
	}
	single, err := CurvesPNG(runs[0], "reward/mean")
	if err != nil {
		t.Fatal(err)
	}
	if hasColor(decodePNG(t, single), plotutil.Color(1)) {
		t.Error("a one-run plot uses the second run's colour")
	}
	if err := CompareRuns(runs, "reward/mean", "success"); err != nil {
		t.Error(err)
	}
}

func TestCurvesNaNAndConstantSeries(t *testing.T) {
	run := makeRun(t, "odd", 30, func(s int) agrl.Metrics {
		m := agrl.Metrics{"flat": 1, "once": math.NaN(), "gappy": float64(s), "never": math.NaN()}
		if s == 10 {
			m["once"] = 0.5
		}
		if s%2 == 0 {
			m["gappy"] = math.Inf(1)
		}
		return m
	})
	if _, err := CurvesPNG(run, "flat", "once", "gappy"); err != nil {
		t.Fatalf("NaN/Inf values must be skipped, constant and one-point series drawn: %v", err)
	}
	xy, err := finiteSeries(run, "gappy")
	if err != nil || len(xy) != 15 {
		t.Errorf("gappy: %d finite points, %v; want 15", len(xy), err)
	}
}

func TestCurvesErrors(t *testing.T) {
	run := makeRun(t, "r", 5, func(s int) agrl.Metrics { return agrl.Metrics{"loss": 1 / float64(s), "nan": math.NaN()} })
	for _, tc := range []struct {
		name string
		err  func() error
		want []string
	}{
		{"missing metric", func() error { _, err := CurvesPNG(run, "reward/mean"); return err }, []string{`no metric "reward/mean"`, "it has: loss, nan"}},
		{"all NaN", func() error { _, err := CurvesPNG(run, "nan"); return err }, []string{`"nan" at 5 steps, all NaN`}},
		{"two problems", func() error { _, err := CurvesPNG(run, "a", "loss", "b"); return err }, []string{`no metric "a"`, `no metric "b"`}},
		{"no default metric", func() error { _, err := CurvesPNG(run); return err }, []string{"none of the default metrics", "it has: loss, nan"}},
		{"no run", func() error { _, err := CompareRunsPNG(nil, "loss"); return err }, []string{"no run"}},
		{"nil run", func() error { _, err := CurvesPNG(nil, "loss"); return err }, []string{"run 0 is nil"}},
		{"bad chart", func() error {
			_, err := NewChart().Panel(10, 10).Columns(-1).Smooth(-2).PNG([]*agrl.Run{run}, "loss")
			return err
		}, []string{"panel size 10×10", "columns -1", "smoothing window -2"}},
		{"empty run", func() error {
			empty := makeRun(t, "empty", 0, nil)
			_, err := CurvesPNG(empty, "loss")
			return err
		}, []string{`no metric "loss"`, "no metrics yet"}},
		{"display shows the error", func() error { return Curves(run, "nope") }, []string{`no metric "nope"`}},
	} {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

func TestSmooth(t *testing.T) {
	xy := smooth(plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 3}, {X: 3, Y: 5}, {X: 4, Y: 7}}, 2)
	want := []float64{1, 2, 4, 6}
	for i, p := range xy {
		if p.Y != want[i] || p.X != float64(i+1) {
			t.Errorf("point %d = %+v, want y %v", i, p, want[i])
		}
	}
}

func TestRunNamesDisambiguate(t *testing.T) {
	a := &agrl.Run{Dir: "x/run", Name: "run"}
	b := &agrl.Run{Dir: "y/run", Name: "run"}
	c := &agrl.Run{Dir: "z/other", Name: "other"}
	got := runNames([]*agrl.Run{a, b, c})
	if strings.Join(got, ",") != "x/run,y/run,other" {
		t.Errorf("names %v", got)
	}
}
