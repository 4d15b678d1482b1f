package nb

import (
	"encoding/base64"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	"agrl.dev/agrl"
)

// reportMetrics are the curves a report shows, when the run logged them.
var reportMetrics = []string{agrl.MetricReward, agrl.MetricSuccess, agrl.MetricKL, agrl.MetricEntropy,
	agrl.MetricResponseLength, agrl.MetricToolCallRate, agrl.MetricClipHigh, agrl.MetricFracRewardZeroStd}

// ReportHTML renders a self-contained HTML report of a run directory: the summary, the alarms
// its metrics set off at the end (agrl.CheckAlarms), the before/after table, the training curves (embedded PNG), the evaluations and a few successful
// and failed trajectories from the last saved step.
func ReportHTML(run *agrl.Run) (string, error) {
	var b strings.Builder
	title := "agrl run " + run.Name
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>\n", html.EscapeString(title))
	b.WriteString(`<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}` +
		`table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd}img{max-width:100%}</style></head><body>`)
	fmt.Fprintf(&b, "<h1>%s</h1>\n", html.EscapeString(title))
	if s := run.Summary; s != nil {
		fmt.Fprintf(&b, "<p>env <b>%s</b>, seed %d, %d steps, %s on backend %s, status %s</p>\n",
			html.EscapeString(s.Env), s.Seed, s.Steps, (time.Duration(s.WallSeconds) * time.Second).String(),
			html.EscapeString(s.Backend), html.EscapeString(s.Status))
	}
	b.WriteString(AlarmsHTML(agrl.CheckAlarms(run.Metrics, run.Evals)))
	before, after := run.BeforeAfter()
	if len(after) > 0 || len(before) > 0 {
		b.WriteString("<h2>Before (warm start) and after GRPO</h2>\n")
		b.WriteString(BeforeAfterTableHTML(before, after))
		if changed := run.BeforeAfterChanges(); len(changed) > 0 {
			fmt.Fprintf(&b, "<p>No before: the policy GRPO started from was evaluated under other settings (%s), changed when the run resumed.</p>\n",
				html.EscapeString(agrl.JoinChanges(changed)))
		}
	}
	var metrics []string
	for _, m := range reportMetrics {
		if _, v := run.Series(m); len(v) > 0 {
			metrics = append(metrics, m)
		}
	}
	if len(metrics) > 0 {
		png, err := NewChart().Smooth(5).PNG([]*agrl.Run{run}, metrics...)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "<h2>Training curves</h2>\n<p>moving average over 5 steps</p>\n<img alt=\"training curves\" src=\"data:image/png;base64,%s\">\n", base64.StdEncoding.EncodeToString(png))
	}
	if len(run.Evals) > 0 {
		b.WriteString("<h2>Evaluations</h2>\n")
		b.WriteString(EvalTableHTML(run.Evals))
	}
	eps, err := Latest(run)
	if err == nil && len(eps) > 0 {
		b.WriteString("<h2>Trajectories (last saved step)</h2>\n<h3>Successes</h3>\n")
		b.WriteString(TrajectoriesHTML(eps, Successes, 2))
		b.WriteString("<h3>Failures</h3>\n")
		b.WriteString(TrajectoriesHTML(eps, Failures, 2))
	}
	b.WriteString("</body></html>\n")
	return b.String(), nil
}

// WriteReport writes ReportHTML to report.html in the run directory and returns its path.
func WriteReport(run *agrl.Run) (string, error) {
	page, err := ReportHTML(run)
	if err != nil {
		return "", err
	}
	path := filepath.Join(run.Dir, "report.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// AlarmsHTML renders alarms as a warning box (nothing when there are none): each with the
// metric that fired it, its value and limit, what to try, and the chapter 8 entry.
func AlarmsHTML(alarms []agrl.Alarm) string {
	if len(alarms) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(`<div class="agrl-alarms" style="border-left:4px solid #e65100;background:#fff3e0;padding:4px 10px;margin:6px 0">`)
	fmt.Fprintf(&b, "<b>%d alarm(s)</b><ul style=\"margin:2px 0\">", len(alarms))
	for _, a := range alarms {
		fmt.Fprintf(&b, `<li><b>%s</b>: <code>%s</code> %.3g (limit %.3g) at step %d — %s (<a href="%s">chapter 8</a>)</li>`,
			html.EscapeString(a.Name), html.EscapeString(a.Metric), a.Value, a.Limit, a.Step, html.EscapeString(a.Message), html.EscapeString(a.Doc))
	}
	b.WriteString("</ul></div>\n")
	return b.String()
}
