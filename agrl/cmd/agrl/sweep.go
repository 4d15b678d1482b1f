package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/agrl/learn"
	"agrl.dev/agrl/nb"
)

// sweepable lists the flags a grid may vary, with how to parse a value.
var sweepable = map[string]func(f *trainFlags, v string) error{
	"lr":        floatFlag(func(f *trainFlags) *float64 { return &f.lr }),
	"kl":        floatFlag(func(f *trainFlags) *float64 { return &f.kl }),
	"clip":      floatFlag(func(f *trainFlags) *float64 { return &f.clip }),
	"clip-high": floatFlag(func(f *trainFlags) *float64 { return &f.clipHigh }),
	"temperature": floatFlag(func(f *trainFlags) *float64 {
		return &f.temp
	}),
	"group":      intFlag(func(f *trainFlags) *int { return &f.group }),
	"tasks":      intFlag(func(f *trainFlags) *int { return &f.tasks }),
	"curriculum": intFlag(func(f *trainFlags) *int { return &f.curriculum }),
	"screen":     intFlag(func(f *trainFlags) *int { return &f.screen }),
	"gamma":      floatFlag(func(f *trainFlags) *float64 { return &f.gamma }),
	"rubric": func(f *trainFlags, v string) error {
		f.rubric = v
		if v == "" {
			return errors.New("empty rubric name")
		}
		return nil
	},
	"turn-advantages": func(f *trainFlags, v string) error {
		b, err := strconv.ParseBool(v)
		f.turnAdv = b
		return err
	},
	"seed": func(f *trainFlags, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		f.seed = n
		return err
	},
}

func floatFlag(get func(*trainFlags) *float64) func(*trainFlags, string) error {
	return func(f *trainFlags, v string) error {
		x, err := strconv.ParseFloat(v, 64)
		*get(f) = x
		return err
	}
}

func intFlag(get func(*trainFlags) *int) func(*trainFlags, string) error {
	return func(f *trainFlags, v string) error {
		x, err := strconv.Atoi(v)
		*get(f) = x
		return err
	}
}

// gridPoint is one configuration of a sweep: flag name → value, in grid order.
type gridPoint [][2]string

func (p gridPoint) name() string {
	parts := make([]string, len(p))
	for i, kv := range p {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ",")
}

// parseGrid reads "lr=1e-4,3e-4;kl=0,0.01" into the cartesian product of its axes.
func parseGrid(s string) ([]gridPoint, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty grid")
	}
	points := []gridPoint{nil}
	seen := map[string]bool{}
	var errs []error
	for _, axis := range strings.Split(s, ";") {
		name, vals, ok := strings.Cut(strings.TrimSpace(axis), "=")
		name = strings.TrimSpace(name)
		set, known := sweepable[name]
		switch {
		case !ok || name == "" || vals == "":
			errs = append(errs, fmt.Errorf("grid axis %q: want name=v1,v2,…", axis))
			continue
		case !known:
			var names []string
			for k := range sweepable {
				names = append(names, k)
			}
			sort.Strings(names)
			errs = append(errs, fmt.Errorf("grid axis %q: cannot sweep %q (can: %s)", axis, name, strings.Join(names, ", ")))
			continue
		case seen[name]:
			errs = append(errs, fmt.Errorf("grid axis %q given twice", name))
			continue
		}
		seen[name] = true
		var next []gridPoint
		values := map[trainFlags]string{} // parsed value → its first spelling
		for _, v := range strings.Split(vals, ",") {
			v = strings.TrimSpace(v)
			var parsed trainFlags
			if err := set(&parsed, v); err != nil || v == "" {
				errs = append(errs, fmt.Errorf("grid axis %q: bad value %q", name, v))
				continue
			}
			if first, dup := values[parsed]; dup {
				errs = append(errs, fmt.Errorf("grid axis %q lists the same value twice (%q and %q): the points would be the same run", name, first, v))
				continue
			}
			values[parsed] = v
			for _, p := range points {
				next = append(next, append(append(gridPoint(nil), p...), [2]string{name, v}))
			}
		}
		points = next
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(points) > 64 {
		return nil, fmt.Errorf("the grid has %d points; at most 64", len(points))
	}
	return points, nil
}

func cmdSweep(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sweep", stderr)
	var f trainFlags
	f.register(fs, args)
	grid := fs.String("grid", "", `the grid, e.g. "lr=1e-4,3e-4;kl=0,0.01" (axes: `+strings.Join(sweepNames(), ", ")+"); may be empty with -seeds")
	seeds := fs.Int("seeds", 1, "train every grid point with this many seeds, -seed, -seed+1, …, each with its own warm start, and report mean ± 95% interval over them")
	fs.StringVar(&f.out, "out", "", "sweep directory (default runs/sweep-ENV)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *seeds < 1 || *seeds > 64 {
		return usageError{fmt.Errorf("-seeds %d: want 1..64", *seeds)}
	}
	points := []gridPoint{nil}
	hasGrid := strings.TrimSpace(*grid) != ""
	if !hasGrid && *seeds == 1 {
		return usageError{errors.New("nothing to sweep: give -grid, or -seeds N with N ≥ 2 (one run is `agrl train`)")}
	}
	if hasGrid {
		var err error
		if points, err = parseGrid(*grid); err != nil {
			return usageError{err}
		}
	}
	if *seeds > 1 {
		for _, kv := range points[0] {
			if kv[0] == "seed" {
				return usageError{errors.New("-seeds with a seed axis in -grid: use one or the other")}
			}
		}
		if len(points)**seeds > 64 {
			return usageError{fmt.Errorf("%d grid points × %d seeds = %d runs; at most 64", len(points), *seeds, len(points)**seeds)}
		}
	}
	if f.out == "" {
		f.out = filepath.Join("runs", "sweep-"+f.env)
	}
	// Every point's configuration is checked before anything trains (the shared warm start
	// included), and every problem is reported at once.
	if _, err := f.config(stderr); err != nil {
		return err
	}
	var problems []error
	for _, p := range points {
		pf := f
		for _, kv := range p {
			_ = sweepable[kv[0]](&pf, kv[1]) // parsed by parseGrid
		}
		pf.out = filepath.Join(f.out, p.name())
		if _, err := pf.config(stderr); err != nil {
			var ue usageError
			if errors.As(err, &ue) {
				err = ue.error
			}
			problems = append(problems, fmt.Errorf("grid point %s: %w", p.name(), err))
		}
	}
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
	}
	learn.ExecTimeout = f.watchdog
	ctx, stop := signalContext(stderr)
	defer stop()
	var err error
	if *seeds > 1 {
		err = seedSweep(ctx, f, points, *seeds, stdout, stderr)
	} else {
		err = sweep(ctx, f, points, stdout, stderr)
	}
	return asInterrupted(ctx, err)
}

// sweep trains the shared warm start and every point, then compares them.
func sweep(ctx context.Context, f trainFlags, points []gridPoint, stdout, stderr io.Writer) error {
	root := f.out
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	base, err := warmStart(ctx, f, filepath.Join(root, "warm-start"), len(points), stdout, stderr)
	if err != nil {
		return err
	}
	var runs []*agrl.Run
	for i, p := range points {
		fmt.Fprintf(stdout, "== run %d/%d: %s\n", i+1, len(points), p.name())
		run, err := trainPoint(ctx, base, p, filepath.Join(root, p.name()), stdout, stderr)
		if err != nil {
			return err
		}
		run.Name = p.name()
		runs = append(runs, run)
	}
	return writeSweep(root, points, runs, stdout)
}

// warmStart trains the warm start that the runs of a sweep share into dir (SFT once; each run
// starts from its checkpoint) and returns the flags that start from it. Without SFT steps, or
// with -from, there is nothing to share and f is returned as it is.
func warmStart(ctx context.Context, f trainFlags, dir string, runs int, stdout, stderr io.Writer) (trainFlags, error) {
	if f.from != "" || f.sftSteps <= 0 {
		return f, nil
	}
	ws := f
	ws.steps, ws.out, ws.evalEvery = 0, dir, 0
	fmt.Fprintf(stdout, "== warm start (seed %d, shared by %d runs) in %s\n", f.seed, runs, ws.out)
	g, err := ws.config(stderr)
	if err != nil {
		return f, err
	}
	if _, err := train(ctx, g, ws, stdout, stderr); err != nil {
		return f, err
	}
	f.from = filepath.Join(ws.out, agrl.RunCheckpointsDir)
	return f, nil
}

// trainPoint trains one grid point from base's flags into dir.
func trainPoint(ctx context.Context, base trainFlags, p gridPoint, dir string, stdout, stderr io.Writer) (*agrl.Run, error) {
	pf := base
	for _, kv := range p {
		if err := sweepable[kv[0]](&pf, kv[1]); err != nil {
			return nil, err
		}
	}
	pf.out = dir
	g, err := pf.config(stderr)
	if err != nil {
		return nil, err
	}
	run, err := train(ctx, g, pf, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	return run, nil
}

// seedSweep trains every point with n seeds, f.seed, f.seed+1, …: each seed has its own warm
// start (the warm start is where seeds differ most), shared by that seed's points. Runs are
// written to OUT/POINT/seed-S (OUT/seed-S without a grid), warm starts to OUT/warm-start/seed-S.
func seedSweep(ctx context.Context, f trainFlags, points []gridPoint, n int, stdout, stderr io.Writer) error {
	root := f.out
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	runs := make([][]*agrl.Run, len(points))
	for k := range n {
		sf := f
		sf.seed = f.seed + uint64(k)
		seedDir := fmt.Sprintf("seed-%d", sf.seed)
		base := sf
		if len(points) > 1 {
			var err error
			if base, err = warmStart(ctx, sf, filepath.Join(root, "warm-start", seedDir), len(points), stdout, stderr); err != nil {
				return err
			}
		}
		for i, p := range points {
			dir := filepath.Join(root, p.name(), seedDir)
			fmt.Fprintf(stdout, "== seed %d (%d/%d)%s\n", sf.seed, k+1, n, pointLabel(p))
			run, err := trainPoint(ctx, base, p, dir, stdout, stderr)
			if err != nil {
				return err
			}
			run.Name = seedDir
			runs[i] = append(runs[i], run)
		}
	}
	return writeSeedSweep(root, f.env, points, runs, stdout)
}

func pointLabel(p gridPoint) string {
	if len(p) == 0 {
		return ""
	}
	return ": " + p.name()
}

func sweepNames() []string {
	var names []string
	for k := range sweepable {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// writeSweep writes results.csv, results.md and curves.png into the sweep directory and prints
// the markdown table.
func writeSweep(root string, points []gridPoint, runs []*agrl.Run, stdout io.Writer) error {
	header := []string{"run"}
	for _, kv := range points[0] {
		header = append(header, kv[0])
	}
	header = append(header, "dev_success", "test_success", "ood_success", "mean_reward", "final_kl", "wall_seconds")
	rows := [][]string{header}
	for i, run := range runs {
		row := []string{points[i].name()}
		for _, kv := range points[i] {
			row = append(row, kv[1])
		}
		s := run.Summary
		kl := "nan"
		if _, v := run.Series(agrl.MetricKL); len(v) > 0 {
			kl = fmt.Sprintf("%.4f", v[len(v)-1])
		}
		if s == nil || s.Final == nil {
			row = append(row, "", "", "", "", kl, "")
		} else {
			row = append(row, fmt.Sprintf("%.3f", s.Final.DevSuccess), fmt.Sprintf("%.3f", s.Final.TestSuccess),
				fmt.Sprintf("%.3f", s.Final.OODSuccess), fmt.Sprintf("%.3f", s.Final.MeanReward), kl, fmt.Sprintf("%.0f", s.WallSeconds))
		}
		rows = append(rows, row)
	}
	var md strings.Builder
	for i, row := range rows {
		md.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			md.WriteString("|" + strings.Repeat(" --- |", len(row)) + "\n")
		}
	}
	png, err := nb.CompareRunsPNG(runs, agrl.MetricReward, agrl.MetricSuccess, agrl.MetricKL, agrl.MetricEntropy)
	if err != nil {
		return err
	}
	return writeResults(root, rows, md.String(), png, stdout)
}

// writeResults writes a sweep's results.csv (rows), results.md (md) and curves.png (png) into
// root and prints md and the files' names.
func writeResults(root string, rows [][]string, md string, png []byte, stdout io.Writer) error {
	f, err := os.Create(filepath.Join(root, "results.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "curves.png"), png, 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, md)
	fmt.Fprintf(stdout, "wrote %s, %s and %s\n", filepath.Join(root, "results.csv"), filepath.Join(root, "results.md"), filepath.Join(root, "curves.png"))
	return nil
}

// writeSeedSweep writes results.csv (one row per run), results.md (per point: mean ± 95%
// interval over seeds, then the per-seed rows) and curves.png (each seed faint, the mean bold)
// into the sweep directory, and prints results.md.
func writeSeedSweep(root, env string, points []gridPoint, runs [][]*agrl.Run, stdout io.Writer) error {
	header := []string{"point", "seed"}
	var md strings.Builder
	var groups []nb.RunGroup
	rows := [][]string{}
	for i, p := range points {
		name := p.name()
		if name == "" {
			name = env
		}
		st, err := agrl.CompareSeeds(name, runs[i])
		if err != nil {
			return err
		}
		if i == 0 {
			for _, ss := range st.Splits {
				header = append(header, ss.Split.String()+"_before", ss.Split.String()+"_after")
			}
			header = append(header, "zero_std_late", "wall_seconds")
			rows = append(rows, header)
		}
		for _, row := range st.Rows {
			r := []string{name, fmt.Sprint(row.Seed)}
			for _, ss := range st.Splits {
				r = append(r, fmt.Sprintf("%.4f", row.Before[ss.Split]), fmt.Sprintf("%.4f", row.After[ss.Split]))
			}
			rows = append(rows, append(r, fmt.Sprintf("%.4f", row.ZeroStdLate), fmt.Sprintf("%.0f", row.WallSeconds)))
		}
		if i > 0 {
			md.WriteString("\n")
		}
		md.WriteString(st.Markdown())
		groups = append(groups, nb.RunGroup{Name: name, Runs: runs[i]})
	}
	metrics := []string{agrl.MetricSuccess, agrl.MetricReward, agrl.MetricFracRewardZeroStd, agrl.MetricToolCallRate}
	png, err := nb.NewChart().Smooth(10).SeedsPNG(groups, metrics...)
	if err != nil {
		return err
	}
	return writeResults(root, rows, md.String(), png, stdout)
}
