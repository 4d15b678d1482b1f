package agrl

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// alarmNames returns the names of alarms.
func alarmNames(alarms []Alarm) []string {
	var names []string
	for _, a := range alarms {
		names = append(names, a.Name)
	}
	return names
}

// everyStep returns the first step each alarm fired at (FirstAlarms).
func everyStep(r *Run) map[string]int {
	first := map[string]int{}
	for _, a := range FirstAlarms(r.Metrics, r.Evals) {
		first[a.Name] = a.Step
	}
	return first
}

func openRecorded(t *testing.T, dir string) *Run {
	t.Helper()
	r, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAlarmsQuietOnAHealthyRun: the calculator recipe's run (dev success 0.61 → 0.98) sets off
// no alarm at any step.
func TestAlarmsQuietOnAHealthyRun(t *testing.T) {
	r := openRecorded(t, filepath.Join("testdata", "alarms", "calc-healthy"))
	if len(r.Metrics) != 150 {
		t.Fatalf("%d steps of metrics", len(r.Metrics))
	}
	if got := everyStep(r); len(got) > 0 {
		t.Errorf("alarms on a healthy run: %v", got)
	}
	for _, k := range []string{MetricTokenMismatches, MetricTopAnswerShare, MetricRepeatedToolCalls} {
		if _, ok := r.Metrics[len(r.Metrics)-1][k]; !ok {
			t.Errorf("the recorded run lacks %s: the rules reading it were not exercised", k)
		}
	}
}

// TestAlarmsOnTheRewardHack: chapter 8's recorded reward hack (filesearch with the naive
// rubric, seed 1) sets off what it shows — groups without signal, the entropy collapsed, the
// error-then-quit share high, tool calls failing, and the reward up while dev success is down —
// each naming its metric and chapter 8; the same env with the preset rubric (seed 1) ends with
// none of the hack's alarms.
func TestAlarmsOnTheRewardHack(t *testing.T) {
	hack := openRecorded(t, filepath.Join("..", "tutorials", "recorded", "filesearch-hack", "rubric=naive,seed=1"))
	alarms := CheckAlarms(hack.Metrics, hack.Evals)
	want := map[string]string{"no-signal": MetricFracRewardZeroStd, "entropy-collapse": MetricEntropy,
		"error-then-quit": MetricErrorThenQuit, "hacking": MetricReward, "tool-errors": MetricToolErrorRate}
	if got := alarmNames(alarms); len(got) != len(want) {
		t.Errorf("alarms %v, want %v", got, want)
	}
	for _, a := range alarms {
		if m, ok := want[a.Name]; !ok || a.Metric != m {
			t.Errorf("alarm %s on %s", a.Name, a.Metric)
		}
		if a.Step != 150 || !strings.HasPrefix(a.Doc, "tutorials/08-troubleshooting.ipynb#") || a.Message == "" {
			t.Errorf("alarm %+v", a)
		}
	}
	fair := openRecorded(t, filepath.Join("..", "tutorials", "recorded", "filesearch-hack", "rubric=preset,seed=1"))
	if got := alarmNames(CheckAlarms(fair.Metrics, fair.Evals)); len(got) > 0 {
		t.Errorf("the preset rubric's run ends with alarms %v", got)
	}
	// The KL of the preset run of seed 3 grows to 0.28 nats from 0.002: the drift alarm.
	drift := openRecorded(t, filepath.Join("..", "tutorials", "recorded", "filesearch-hack", "rubric=preset,seed=3"))
	if got := alarmNames(CheckAlarms(drift.Metrics, drift.Evals)); !slices.Contains(got, "kl-blowup") {
		t.Errorf("seed 3's drift: alarms %v, want kl-blowup", got)
	}
}

// history makes n steps of metrics, step i (from 0) with f(i).
func history(n int, f func(i int) Metrics) []Metrics {
	var h []Metrics
	for i := range n {
		m := f(i)
		m[MetricStep] = float64(i + 1)
		h = append(h, m)
	}
	return h
}

// TestAlarmRulesOnConstructedHistories: the rules no recorded run here provokes — responses
// collapsing or growing, turns collapsing, repeated tool calls — on constructed histories,
// each beside one just inside its threshold; too short a history sets off nothing but a KL
// spike.
func TestAlarmRulesOnConstructedHistories(t *testing.T) {
	healthy := func(i int) Metrics {
		return Metrics{MetricResponseLength: 40, MetricTurns: 2.5, MetricEntropy: 0.1, MetricKL: 0.01, MetricReward: 0.5,
			MetricFracRewardZeroStd: 0.2, MetricToolCallRate: 1, MetricToolErrorRate: 0.05, MetricSuccess: 0.6}
	}
	with := func(k string, early, late float64) func(int) Metrics {
		return func(i int) Metrics {
			m := healthy(i)
			m[k] = early
			if i >= 10 {
				m[k] = late
			}
			return m
		}
	}
	for _, c := range []struct {
		name  string
		h     []Metrics
		fires bool
	}{
		{"length-collapse", history(20, with(MetricResponseLength, 40, 11)), true},
		{"length-collapse", history(20, with(MetricResponseLength, 40, 13)), false},
		{"length-growth", history(20, with(MetricResponseLength, 40, 130)), true},
		{"length-growth", history(20, with(MetricResponseLength, 40, 110)), false},
		{"turns-collapse", history(20, with(MetricTurns, 2.5, 1)), true},
		{"turns-collapse", history(20, with(MetricTurns, 2.5, 1.2)), false},
		{"repeated-calls", history(10, with(MetricRepeatedToolCalls, 0.4, 0.4)), true},
		{"repeated-calls", history(10, with(MetricRepeatedToolCalls, 0.25, 0.25)), false},
		{"kl-blowup", history(3, with(MetricKL, 1.5, 1.5)), true},
		{"token-mismatch", history(1, with(MetricTokenMismatches, 2, 2)), true},
		{"token-mismatch", history(12, with(MetricTokenMismatches, 0, 0)), false},
		{"no-signal", history(9, with(MetricFracRewardZeroStd, 1, 1)), false}, // too young to judge
		{"no-signal", history(12, with(MetricFracRewardZeroStd, 1, 1)), true},
		{"no-signal", history(12, func(i int) Metrics { // dynamic sampling refilled the batch
			m := with(MetricFracRewardZeroStd, 1, 1)(i)
			m[MetricRefills] = 2
			return m
		}), false},
	} {
		got := slices.Contains(alarmNames(CheckAlarms(c.h, nil)), c.name)
		if got != c.fires {
			t.Errorf("%s on %v...: fired %v, want %v", c.name, c.h[len(c.h)-1], got, c.fires)
		}
	}
	if got := CheckAlarms(history(30, healthy), nil); len(got) > 0 {
		t.Errorf("a steady history sets off %v", alarmNames(got))
	}
}

// TestTopAnswerShare: the share of tasks whose most common answer is one shared wrong answer.
func TestTopAnswerShare(t *testing.T) {
	ep := func(task, gold, answer string) *Episode {
		return &Episode{Task: Task{ID: task, Answer: gold}, Answer: answer, Correct: answer == gold}
	}
	for _, c := range []struct {
		eps  []*Episode
		want float64
	}{
		{[]*Episode{ep("a", "84", "84"), ep("b", "12", "13"), ep("b", "12", "13")}, 0},                 // two tasks, different answers
		{[]*Episode{ep("a", "1", "0"), ep("b", "2", "0"), ep("c", "3", "0"), ep("d", "0", "0")}, 0.75}, // three share the wrong "0"
		{[]*Episode{ep("a", "7", "7"), ep("b", "7", "7")}, 0},                                          // a shared right answer
		{[]*Episode{ep("a", "1", "0"), ep("b", "2", "5")}, 0},                                          // wrong, not shared
		{[]*Episode{ep("a", "1", "0"), ep("a", "1", "0"), ep("b", "2", "0"), ep("b", "2", "2")}, 1},    // both tasks' modal answer
		{[]*Episode{ep("a", "1", ""), ep("b", "2", ""), ep("c", "3", "")}, 0},                          // no answers
	} {
		if got := TopAnswerShare(c.eps); got != c.want {
			t.Errorf("TopAnswerShare = %v, want %v", got, c.want)
		}
	}
}
