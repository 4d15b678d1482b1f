package nb

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"agrl.dev/agrl"
)

// EvalRecords are the forms EvalTable accepts: records as read from eval.jsonl (Run.Evals),
// records or results by name (the name becomes the row's label), or results by split (as
// Run.BeforeAfter returns them).
type EvalRecords interface {
	[]agrl.EvalRecord | map[string]agrl.EvalRecord | map[string]agrl.EvalResult | map[agrl.Split]agrl.EvalResult
}

// EvalTable displays evaluation results, one row per record: success, pass@k, mean reward,
// turns, tool-call, tool-error and invalid-action rates, success per difficulty, terminations.
//
//	nb.EvalTable(run.Evals)
//	nb.EvalTable(map[string]agrl.EvalResult{"expert": e, "random": r})
//	_, after := run.BeforeAfter()
//	nb.EvalTable(after)
func EvalTable[R EvalRecords](recs R) { ShowHTML(EvalTableHTML(recs)) }

// EvalTableHTML renders what EvalTable displays. Maps are shown sorted by name, or by split.
func EvalTableHTML[R EvalRecords](recs R) string {
	var rows []agrl.EvalRecord
	switch v := any(recs).(type) {
	case []agrl.EvalRecord:
		rows = v
	case map[string]agrl.EvalRecord:
		for _, k := range sortedKeys(v) {
			r := v[k]
			r.Label = k
			rows = append(rows, r)
		}
	case map[string]agrl.EvalResult:
		for _, k := range sortedKeys(v) {
			rows = append(rows, agrl.EvalRecord{Label: k, EvalResult: v[k]})
		}
	case map[agrl.Split]agrl.EvalResult:
		splits := make([]agrl.Split, 0, len(v))
		for s := range v {
			splits = append(splits, s)
		}
		sort.Slice(splits, func(i, j int) bool { return splits[i] < splits[j] })
		for _, s := range splits {
			rows = append(rows, agrl.EvalRecord{Split: s, EvalResult: v[s]})
		}
	}
	return evalTableHTML(rows)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func evalTableHTML(rows []agrl.EvalRecord) string {
	if len(rows) == 0 {
		return fmt.Sprintf(`<p style="%s">no evaluation results</p>`, styleNote)
	}
	hasLabel, hasSplit, hasStep := false, false, false
	diffs := map[agrl.Difficulty]bool{}
	for _, r := range rows {
		hasLabel = hasLabel || r.Label != ""
		hasSplit = hasSplit || r.Split != 0
		hasStep = hasStep || r.Step != 0
		for d := range r.SuccessByDifficulty {
			diffs[d] = true
		}
	}
	t := newTable()
	if hasLabel {
		t.col("", true)
	}
	if hasSplit {
		t.col("split", true)
	}
	if hasStep {
		t.col("step", false)
	}
	t.cols(false, "tasks", "episodes", "success", "pass@k", "mean reward", "turns", "tool-call rate", "tool-error rate", "invalid rate")
	var ds []agrl.Difficulty
	for _, d := range agrl.Difficulties {
		if diffs[d] {
			ds = append(ds, d)
			t.col("success "+d.String(), false)
		}
	}
	t.col("terminations", true)
	for _, r := range rows {
		var cells []string
		if hasLabel {
			cells = append(cells, r.Label)
		}
		if hasSplit {
			cells = append(cells, splitName(r.Split))
		}
		if hasStep {
			cells = append(cells, fmt.Sprint(r.Step))
		}
		cells = append(cells, fmt.Sprint(r.Tasks), fmt.Sprint(r.N), pct(r.Success), fmt.Sprintf("%s (k=%d)", pct(r.PassAtK), r.K),
			fmt.Sprintf("%.3f", r.MeanReward), fmt.Sprintf("%.2f", r.MeanTurns), pct(r.ToolCallRate), pct(r.ToolErrorRate), pct(r.InvalidRate))
		for _, d := range ds {
			if v, ok := r.SuccessByDifficulty[d]; ok {
				cells = append(cells, pct(v))
			} else {
				cells = append(cells, "–")
			}
		}
		cells = append(cells, terminations(r.Terminations))
		t.row(cells...)
	}
	return t.html()
}

// terminations lists the non-zero counts in the order of agrl.Terminations.
func terminations(m map[agrl.Termination]int) string {
	var parts []string
	for _, t := range agrl.Terminations {
		if m[t] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, m[t]))
		}
	}
	return strings.Join(parts, ", ")
}

// BeforeAfterTable displays evaluation results before and after training, per split (as
// Run.BeforeAfter returns them): success, pass@k, mean reward and tool-call rate, before →
// after with the change.
//
//	before, after := run.BeforeAfter()
//	nb.BeforeAfterTable(before, after)
func BeforeAfterTable(before, after map[agrl.Split]agrl.EvalResult) {
	ShowHTML(BeforeAfterTableHTML(before, after))
}

// BeforeAfterTableHTML renders what BeforeAfterTable displays. Splits appear in the order
// train, dev, test, ood (then any other key, in numeric order); a split missing on one side
// shows "–".
func BeforeAfterTableHTML(before, after map[agrl.Split]agrl.EvalResult) string {
	seen := map[agrl.Split]bool{}
	var splits []agrl.Split
	for _, s := range agrl.Splits {
		_, b := before[s]
		_, a := after[s]
		if a || b {
			splits, seen[s] = append(splits, s), true
		}
	}
	var others []agrl.Split
	for _, m := range []map[agrl.Split]agrl.EvalResult{before, after} {
		for k := range m {
			if !seen[k] {
				others, seen[k] = append(others, k), true
			}
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	splits = append(splits, others...)
	if len(splits) == 0 {
		return fmt.Sprintf(`<p style="%s">no evaluation results</p>`, styleNote)
	}
	t := newTable()
	t.col("split", true)
	t.cols(false, "success before", "success after", "Δ success", "pass@k before", "pass@k after",
		"reward before", "reward after", "Δ reward", "tool calls before", "tool calls after")
	for _, s := range splits {
		b, okB := before[s]
		a, okA := after[s]
		side := func(ok bool, v float64, f func(float64) string) string {
			if !ok {
				return "–"
			}
			return f(v)
		}
		delta := func(vb, va float64, f func(float64) string) string {
			if !okA || !okB {
				return "–"
			}
			return f(va - vb)
		}
		r3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
		d3 := func(v float64) string { return fmt.Sprintf("%+.3f", v) }
		dp := func(v float64) string { return fmt.Sprintf("%+.1f pt", 100*v) }
		t.row(splitName(s),
			side(okB, b.Success, pct), side(okA, a.Success, pct), delta(b.Success, a.Success, dp),
			side(okB, b.PassAtK, pct), side(okA, a.PassAtK, pct),
			side(okB, b.MeanReward, r3), side(okA, a.MeanReward, r3), delta(b.MeanReward, a.MeanReward, d3),
			side(okB, b.ToolCallRate, pct), side(okA, a.ToolCallRate, pct))
	}
	return t.html()
}

// SweepRow is one configuration of a sweep and its results.
type SweepRow struct {
	// Name labels the row (e.g. the run's name).
	Name string
	// Config holds the settings that vary across the sweep.
	Config map[string]any
	// Results holds the numbers to compare (e.g. "dev_success").
	Results map[string]float64
}

// SweepTable displays a sweep: one row per configuration, the settings (columns sorted by name)
// then the results (sorted by name; the best value of each column is not guessed, since lower
// is better for some metrics).
func SweepTable(rows []SweepRow) { ShowHTML(SweepTableHTML(rows)) }

// SweepTableHTML renders what SweepTable displays. A missing value shows "–".
func SweepTableHTML(rows []SweepRow) string {
	if len(rows) == 0 {
		return fmt.Sprintf(`<p style="%s">no sweep results</p>`, styleNote)
	}
	cfg, res := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		for k := range r.Config {
			cfg[k] = true
		}
		for k := range r.Results {
			res[k] = true
		}
	}
	cfgKeys, resKeys := sortedKeys(cfg), sortedKeys(res)
	t := newTable()
	t.col("run", true)
	t.cols(true, cfgKeys...)
	t.cols(false, resKeys...)
	for _, r := range rows {
		cells := []string{r.Name}
		for _, k := range cfgKeys {
			if v, ok := r.Config[k]; ok {
				cells = append(cells, formatAny(v))
			} else {
				cells = append(cells, "–")
			}
		}
		for _, k := range resKeys {
			if v, ok := r.Results[k]; ok {
				cells = append(cells, formatFloat(v))
			} else {
				cells = append(cells, "–")
			}
		}
		t.row(cells...)
	}
	return t.html()
}

// RunRow builds a SweepRow from a run directory: the named settings of config.json (a dotted
// path such as "grpo.kl" reaches into nested objects) and the run's results: summary.json's
// final and SFT numbers when the run finished ("dev_success", "sft/dev_success", …,
// "wall_seconds"), else the last evaluation of each split ("dev/success", "dev/mean_reward").
func RunRow(run *agrl.Run, configKeys ...string) SweepRow {
	row := SweepRow{Config: map[string]any{}, Results: map[string]float64{}}
	if run == nil {
		return row
	}
	row.Name = run.Name
	for _, k := range configKeys {
		if v, ok := run.Setting(k); ok {
			row.Config[k] = v
		}
	}
	if s := run.Summary; s != nil {
		add := func(prefix string, ss *agrl.SplitSummary) {
			if ss == nil {
				return
			}
			row.Results[prefix+"dev_success"] = ss.DevSuccess
			row.Results[prefix+"test_success"] = ss.TestSuccess
			row.Results[prefix+"ood_success"] = ss.OODSuccess
			row.Results[prefix+"mean_reward"] = ss.MeanReward
		}
		add("", s.Final)
		add("sft/", s.SFT)
		row.Results["wall_seconds"] = s.WallSeconds
		return row
	}
	for _, e := range run.Evals { // later records overwrite earlier ones
		row.Results[splitName(e.Split)+"/success"] = e.Success
		row.Results[splitName(e.Split)+"/mean_reward"] = e.MeanReward
	}
	return row
}

// splitName is the split's name, "" for the zero Split (no split).
func splitName(s agrl.Split) string {
	if s == 0 {
		return ""
	}
	return s.String()
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func formatFloat(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 0.01 && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// formatAny shows a setting as written (0.0003, not 0.000).
func formatAny(v any) string { return fmt.Sprint(v) }

// table builds an HTML table whose cells are escaped text.
type table struct {
	heads []string
	left  []bool
	rows  [][]string
}

func newTable() *table { return &table{} }

func (t *table) col(head string, left bool) {
	t.heads, t.left = append(t.heads, head), append(t.left, left)
}

func (t *table) cols(left bool, heads ...string) {
	for _, h := range heads {
		t.col(h, left)
	}
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) html() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<table class="agrl-table" style="%s"><tr>`, styleTable)
	for i, h := range t.heads {
		fmt.Fprintf(&b, `<th style="%s">%s</th>`, t.style(i), esc(h))
	}
	b.WriteString(`</tr>`)
	for _, r := range t.rows {
		b.WriteString(`<tr>`)
		for i, c := range r {
			fmt.Fprintf(&b, `<td style="%s">%s</td>`, t.style(i), esc(c))
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</table>`)
	return b.String()
}

func (t *table) style(i int) string {
	if i < len(t.left) && t.left[i] {
		return styleCellL
	}
	return styleCell
}

// SeedTable displays the statistics of runs that differ only in their seed (agrl.CompareSeeds):
// per split, success before and after GRPO and the gain as mean ± the 95% interval's
// half-width, then one row per seed.
func SeedTable(st agrl.SeedStats) { ShowHTML(SeedTableHTML(st)) }

// SeedTableHTML renders what SeedTable displays.
func SeedTableHTML(st agrl.SeedStats) string {
	iv := func(x agrl.Interval) string {
		if x.N < 2 {
			return fmt.Sprintf("%.1f", 100*x.Mean)
		}
		return fmt.Sprintf("%.1f ± %.1f", 100*x.Mean, 100*x.HalfWidth)
	}
	t := newTable()
	t.col("split", true)
	t.cols(false, "warm start (%)", "after GRPO (%)", "gain (points)", "gain 95% interval", "tool calls before → after")
	for _, ss := range st.Splits {
		t.row(splitName(ss.Split), iv(ss.Before), iv(ss.After), iv(ss.Gain), fmt.Sprintf("[%+.1f, %+.1f]", 100*ss.Gain.Lo, 100*ss.Gain.Hi),
			pct(ss.ToolCallsBefore.Mean)+" → "+pct(ss.ToolCallsAfter.Mean))
	}
	for _, ds := range st.TestByDifficulty {
		t.row("test, "+ds.Difficulty.String(), iv(ds.Before), iv(ds.After), iv(ds.Gain), fmt.Sprintf("[%+.1f, %+.1f]", 100*ds.Gain.Lo, 100*ds.Gain.Hi), "")
	}
	rows := newTable()
	rows.cols(true, "seed", "run")
	for _, ss := range st.Splits {
		rows.col(splitName(ss.Split)+" before → after", false)
	}
	rows.cols(false, "zero-std, 2nd half", "wall")
	for _, r := range st.Rows {
		cells := []string{fmt.Sprint(r.Seed), r.Run}
		for _, ss := range st.Splits {
			cells = append(cells, pct(r.Before[ss.Split])+" → "+pct(r.After[ss.Split]))
		}
		cells = append(cells, formatFloat(r.ZeroStdLate), seconds(r.WallSeconds))
		rows.row(cells...)
	}
	return fmt.Sprintf("<p>%s: %d seeds; mean ± half-width of the 95%% Student-t interval</p>", esc(st.Name), len(st.Rows)) + t.html() + rows.html()
}
