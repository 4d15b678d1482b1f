package nb

import (
	"fmt"
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

// TestTokenAudit: every token with its id and role, the policy's highlighted with their
// log-probs, and the mismatch count — 0 for a faithful episode, flagged when the trained ids
// are not the sampled ones.
func TestTokenAudit(t *testing.T) {
	ep := &agrl.Episode{
		Tokens:   []int32{1, 10, 11, 20, 21, 30, 31, 22},
		LossMask: []uint8{0, 0, 0, 1, 1, 0, 0, 1},
		LogProbs: []float32{0, 0, 0, -0.5, -1.25, 0, 0, -0.1},
		Turns:    []agrl.Turn{{Sampled: []int32{20, 21}}, {Sampled: []int32{22}}},
	}
	if got := TokenRoles(ep); strings.Join(got, ",") != "prompt,prompt,prompt,policy,policy,observation,observation,policy" {
		t.Fatalf("roles %v", got)
	}
	decode := func(ids []int32) string { return fmt.Sprintf("t%d ", ids[0]) }
	page := TokenAuditHTML(ep, decode)
	for _, want := range []string{"8 tokens: 3 prompt, 3 policy, 2 observation; 0 sampled-vs-trained id mismatches",
		`<tr style="background:#e8f5e9"><td>4</td><td>21</td><td>t21␣</td><td>policy</td><td>-1.250</td></tr>`,
		`<td>5</td><td>30</td><td>t30␣</td><td>observation</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("audit lacks %q:\n%s", want, page)
		}
	}
	// The trajectory viewer folds the same audit in, without text (it has no tokenizer).
	view := EpisodeHTML(ep)
	for _, want := range []string{"<summary>token audit</summary>", "0 sampled-vs-trained id mismatches",
		`<td>4</td><td>21</td><td></td><td>policy</td><td>-1.250</td>`} {
		if !strings.Contains(view, want) {
			t.Errorf("EpisodeHTML lacks %q", want)
		}
	}
	long := &agrl.Episode{Tokens: make([]int32, maxAuditRows+76), LossMask: make([]uint8, maxAuditRows+76)}
	if view := EpisodeHTML(long); !strings.Contains(view, "… 76 more tokens") || !strings.Contains(TokenAuditHTML(long, nil), fmt.Sprintf("<td>%d</td>", maxAuditRows+75)) {
		t.Error("the folded audit of a long episode is not capped, or the full audit is")
	}
	ep.Tokens[7] = 23 // trained on an id the sampler did not emit
	if page := TokenAuditHTML(ep, decode); !strings.Contains(page, "1 sampled-vs-trained id mismatches") {
		t.Errorf("mismatch not flagged:\n%s", page)
	}
}
