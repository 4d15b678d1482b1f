package nb

import (
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// TestReportShowsAlarms: report.html of chapter 8's recorded reward hack lists its alarms with
// their metrics and a link to chapter 8; a healthy run's report has none.
func TestReportShowsAlarms(t *testing.T) {
	hack, err := agrl.OpenRun(filepath.Join("..", "..", "tutorials", "recorded", "filesearch-hack", "rubric=naive,seed=1"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := ReportHTML(hack)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"5 alarm(s)", "<b>hacking</b>", "<code>frac_reward_zero_std</code>", `href="tutorials/08-troubleshooting.ipynb#3.-Reward-hacking"`} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	healthy, err := agrl.OpenRun(filepath.Join("..", "testdata", "alarms", "calc-healthy"))
	if err != nil {
		t.Fatal(err)
	}
	if page, _ := ReportHTML(healthy); strings.Contains(page, "alarm(s)") {
		t.Error("a healthy run's report shows alarms")
	}
}

// TestLiveShowsAlarms: the live view shows an alarm once the GRPO metrics set it off.
func TestLiveShowsAlarms(t *testing.T) {
	l := NewLive(12)
	l.show = func(string, string) {}
	for i := 1; i <= 12; i++ {
		l.Update(agrl.Metrics{agrl.MetricStep: float64(i), agrl.MetricReward: 0, agrl.MetricFracRewardZeroStd: 1})
	}
	if a := l.Alarms(); len(a) != 1 || a[0].Name != "no-signal" || !strings.Contains(l.HTML(), "no-signal") {
		t.Errorf("alarms %v", a)
	}
}
