package learn

import (
	"agrl.dev/agrl"

	"path/filepath"
	"testing"
)

// alarmsOf trains g and returns the names of the alarms that fired at some step, each with the
// first step it fired at.
func alarmsOf(t *testing.T, g agrl.GRPO) map[string]int {
	t.Helper()
	first := map[string]int{}
	for _, a := range agrl.FirstAlarms(train(t, g).History, nil) {
		first[a.Name] = a.Step
	}
	return first
}

// TestAlarmsOnRealRuns provokes alarms with short real runs: a learning rate of 0.1 blows the
// KL up within a few steps; a rubric that pays for the answer "0" makes the policy give it to
// every task (one answer for all).
func TestAlarmsOnRealRuns(t *testing.T) {
	dir := t.TempDir()
	got := alarmsOf(t, warm(tinyGRPO(t)).LR(1e-1).KL(0.01).Steps(12).Out(filepath.Join(dir, "lr")))
	if step, ok := got["kl-blowup"]; !ok || step > 4 {
		t.Errorf("lr 0.1: alarms %v; want kl-blowup within 4 steps", got)
	}
	answer0 := func(ep *agrl.Episode) float64 { return b2f(ep.Answer == "0") }
	expertOnly := warm(tinyGRPO(t)).WarmStart(agrl.SFT().Steps(150).Batch(16), agrl.Demo{Name: "expert", Agent: addExpert, Weight: 1}).DemoEpisodes(120)
	got = alarmsOf(t, expertOnly.Rubric(agrl.NewRubric().Add("zero", answer0, 1).Add("format", agrl.WellFormed, 0.1)).
		LR(2e-3).Steps(30).Out(filepath.Join(dir, "zero")))
	if _, ok := got["one-answer"]; !ok {
		t.Errorf("a rubric paying for the answer 0: alarms %v; want one-answer", got)
	}
}
