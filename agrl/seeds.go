package agrl

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// SeedStats compares runs of one configuration that differ only in their seed: per split, the
// success of the policy GRPO started from (the warm start, LabelSFT), after GRPO (LabelFinal)
// and the gain, each as a mean over seeds with its 95% interval (MeanCI: Student t). The gain's
// interval is of the per-seed differences (paired), so it is narrower than the two intervals
// suggest when warm starts differ.
type SeedStats struct {
	// Name labels the configuration ("calc", a grid point's name).
	Name string `json:"name"`
	// Seeds lists the runs' seeds, in the order of Rows.
	Seeds []uint64 `json:"seeds"`
	// Splits holds one entry per split that every run evaluated, dev, test, ood order.
	Splits []SplitSeedStats `json:"splits"`
	// ZeroStdLate is frac_reward_zero_std averaged over the second half of each run's GRPO
	// steps (the share of groups that carried no signal once training settled), over seeds.
	ZeroStdLate Interval `json:"zero_std_late"`
	// TestByDifficulty holds the test split's success per difficulty that every run
	// evaluated, easiest first (multihop: 1, 2, 3 hops).
	TestByDifficulty []DifficultySeedStats `json:"test_by_difficulty"`
	// Rows holds each run's own numbers, one per seed.
	Rows []SeedRow `json:"rows"`
}

// DifficultySeedStats is one difficulty's test success over seeds.
type DifficultySeedStats struct {
	Difficulty          Difficulty `json:"difficulty"`
	Before, After, Gain Interval   `json:"-"`
}

// SplitSeedStats is one split's success over seeds.
type SplitSeedStats struct {
	Split               Split    `json:"split"`
	Before, After, Gain Interval `json:"-"`
	// ToolCallsBefore and ToolCallsAfter are the tool-call rates, over seeds.
	ToolCallsBefore, ToolCallsAfter Interval `json:"-"`
}

// SeedRow is one run of a SeedStats.
type SeedRow struct {
	Run  string `json:"run"`
	Seed uint64 `json:"seed"`
	// Before and After map a split to its success; ToolCallsBefore/After to its tool-call rate.
	Before, After map[Split]float64 `json:"-"`
	// TestBefore and TestAfter map a difficulty to its test success.
	TestBefore, TestAfter           map[Difficulty]float64 `json:"-"`
	ToolCallsBefore, ToolCallsAfter map[Split]float64      `json:"-"`
	// ZeroStdLate is the run's mean frac_reward_zero_std over its second half (NaN if it logged
	// none).
	ZeroStdLate float64 `json:"zero_std_late"`
	// WallSeconds is the run's wall time (0 when unknown).
	WallSeconds float64 `json:"wall_seconds"`
}

// CompareSeeds builds the SeedStats of finished runs of one configuration. It is an error to
// pass no run, a run without before and after evaluations (no warm start, or unfinished), or
// two runs with the same seed.
func CompareSeeds(name string, runs []*Run) (SeedStats, error) {
	st := SeedStats{Name: name}
	if len(runs) == 0 {
		return st, errors.New("agrl: CompareSeeds of no runs")
	}
	seen := map[uint64]string{}
	var errs []error
	splits := map[Split]int{}
	for _, r := range runs {
		if r == nil {
			return st, errors.New("agrl: CompareSeeds: nil run")
		}
		before, after := r.BeforeAfter()
		if changed := r.BeforeAfterChanges(); len(changed) > 0 {
			errs = append(errs, fmt.Errorf("run %s resumed with other evaluation settings (%s): its start and final evaluations do not compare", r.Dir, changed[0]))
			continue
		}
		if len(before) == 0 || len(after) == 0 {
			errs = append(errs, fmt.Errorf("run %s has no before/after evaluations (a run without warm start, or unfinished)", r.Dir))
			continue
		}
		seed := r.Config.Seed
		if r.Summary != nil && r.Summary.Seed != 0 {
			seed = r.Summary.Seed
		}
		if prev, dup := seen[seed]; dup {
			errs = append(errs, fmt.Errorf("runs %s and %s have the same seed %d", prev, r.Dir, seed))
			continue
		}
		seen[seed] = r.Dir
		row := SeedRow{Run: r.Name, Seed: seed, Before: map[Split]float64{}, After: map[Split]float64{},
			ToolCallsBefore: map[Split]float64{}, ToolCallsAfter: map[Split]float64{}, ZeroStdLate: r.LateMean(MetricFracRewardZeroStd)}
		if r.Summary != nil {
			row.WallSeconds = r.Summary.WallSeconds
		}
		for s, b := range before {
			a, ok := after[s]
			if !ok {
				continue
			}
			row.Before[s], row.After[s] = b.Success, a.Success
			row.ToolCallsBefore[s], row.ToolCallsAfter[s] = b.ToolCallRate, a.ToolCallRate
			splits[s]++
			if s == Test {
				row.TestBefore, row.TestAfter = b.SuccessByDifficulty, a.SuccessByDifficulty
			}
		}
		st.Rows = append(st.Rows, row)
		st.Seeds = append(st.Seeds, seed)
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("agrl: CompareSeeds %s: %w", name, errors.Join(errs...))
	}
	var common []Split
	for s, n := range splits {
		if n == len(st.Rows) {
			common = append(common, s)
		}
	}
	sort.Slice(common, func(i, j int) bool { return common[i] < common[j] })
	for _, s := range common {
		var b, a, g, tb, ta []float64
		for _, row := range st.Rows {
			b, a, g = append(b, row.Before[s]), append(a, row.After[s]), append(g, row.After[s]-row.Before[s])
			tb, ta = append(tb, row.ToolCallsBefore[s]), append(ta, row.ToolCallsAfter[s])
		}
		ss := SplitSeedStats{Split: s}
		var err error
		for _, p := range []struct {
			iv *Interval
			xs []float64
		}{{&ss.Before, b}, {&ss.After, a}, {&ss.Gain, g}, {&ss.ToolCallsBefore, tb}, {&ss.ToolCallsAfter, ta}} {
			if *p.iv, err = MeanCI(p.xs); err != nil {
				return st, err
			}
		}
		st.Splits = append(st.Splits, ss)
	}
	for _, d := range Difficulties {
		var b, a, g []float64
		for _, row := range st.Rows {
			vb, okB := row.TestBefore[d]
			va, okA := row.TestAfter[d]
			if okB && okA {
				b, a, g = append(b, vb), append(a, va), append(g, va-vb)
			}
		}
		if len(b) < len(st.Rows) || len(b) == 0 {
			continue
		}
		ds := DifficultySeedStats{Difficulty: d}
		ds.Before, _ = MeanCI(b)
		ds.After, _ = MeanCI(a)
		ds.Gain, _ = MeanCI(g)
		st.TestByDifficulty = append(st.TestByDifficulty, ds)
	}
	var late []float64
	for _, row := range st.Rows {
		if !math.IsNaN(row.ZeroStdLate) {
			late = append(late, row.ZeroStdLate)
		}
	}
	if len(late) > 0 {
		st.ZeroStdLate, _ = MeanCI(late)
	}
	return st, nil
}

// Split returns the statistics of split s, and whether every run evaluated it.
func (st SeedStats) Split(s Split) (SplitSeedStats, bool) {
	for _, ss := range st.Splits {
		if ss.Split == s {
			return ss, true
		}
	}
	return SplitSeedStats{}, false
}

// LateMean is the mean of a metric over the second half of the run's logged steps (steps
// after half the last step), NaN and infinite values skipped; NaN when there are none.
func (r *Run) LateMean(metric string) float64 {
	steps, values := r.Series(metric)
	if len(steps) == 0 {
		return math.NaN()
	}
	half := steps[len(steps)-1] / 2
	sum, n := 0.0, 0
	for i, v := range values {
		if steps[i] > half && !math.IsNaN(v) && !math.IsInf(v, 0) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// Markdown renders the statistics as two markdown tables: per split, success before → after
// and the gain, in points, as mean ± 95% half-width over the seeds, with the interval's bounds;
// then one row per seed.
func (st SeedStats) Markdown() string {
	var b strings.Builder
	pts := func(iv Interval) string {
		if iv.N < 2 {
			return fmt.Sprintf("%.1f", 100*iv.Mean)
		}
		return fmt.Sprintf("%.1f ± %.1f", 100*iv.Mean, 100*iv.HalfWidth)
	}
	fmt.Fprintf(&b, "%s, %d seeds (%s); success in %%, mean ± half-width of the 95%% Student-t interval:\n\n", st.Name, len(st.Rows), seedList(st.Seeds))
	b.WriteString("| split | warm start | after GRPO | gain (points) | gain interval | tool calls before → after |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, ss := range st.Splits {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | [%+.1f, %+.1f] | %.1f%% → %.1f%% |\n", ss.Split, pts(ss.Before), pts(ss.After), pts(ss.Gain),
			100*ss.Gain.Lo, 100*ss.Gain.Hi, 100*ss.ToolCallsBefore.Mean, 100*ss.ToolCallsAfter.Mean)
	}
	if len(st.TestByDifficulty) > 1 {
		b.WriteString("\n| test, by difficulty | warm start | after GRPO | gain (points) | gain interval |\n| --- | --- | --- | --- | --- |\n")
		for _, ds := range st.TestByDifficulty {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | [%+.1f, %+.1f] |\n", ds.Difficulty, pts(ds.Before), pts(ds.After), pts(ds.Gain), 100*ds.Gain.Lo, 100*ds.Gain.Hi)
		}
	}
	if st.ZeroStdLate.N > 0 {
		fmt.Fprintf(&b, "\nfrac_reward_zero_std over the second half of training: %s\n", st.ZeroStdLate)
	}
	b.WriteString("\n| seed | run |")
	for _, ss := range st.Splits {
		fmt.Fprintf(&b, " %s before → after |", ss.Split)
	}
	b.WriteString(" zero-std, 2nd half | wall |\n| --- | --- |")
	b.WriteString(strings.Repeat(" --- |", len(st.Splits)+2) + "\n")
	for _, row := range st.Rows {
		fmt.Fprintf(&b, "| %d | %s |", row.Seed, row.Run)
		for _, ss := range st.Splits {
			fmt.Fprintf(&b, " %.1f%% → %.1f%% (%+.1f) |", 100*row.Before[ss.Split], 100*row.After[ss.Split], 100*(row.After[ss.Split]-row.Before[ss.Split]))
		}
		fmt.Fprintf(&b, " %.2f | %s |\n", row.ZeroStdLate, wall(row.WallSeconds))
	}
	return b.String()
}

func seedList(seeds []uint64) string {
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = fmt.Sprint(v)
	}
	return "seeds " + strings.Join(s, ", ")
}

func wall(sec float64) string {
	if sec <= 0 {
		return "–"
	}
	return fmt.Sprintf("%dm%02ds", int(sec)/60, int(sec)%60)
}
