package calc

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"agrl.dev/agrl"
)

// meanReward plays agent on every task and returns the mean preset reward and success rate.
func meanReward(t *testing.T, tasks []agrl.Task, agent agrl.Agent) (reward, success float64) {
	t.Helper()
	rubric := Rubric()
	for _, task := range tasks {
		ep, err := agrl.Play(New(), task, agent, agrl.Limits{})
		if err != nil {
			t.Fatalf("Play(%s): %v", task.ID, err)
		}
		r, err := rubric.Score(ep)
		if err != nil {
			t.Fatal(err)
		}
		reward += r / float64(len(tasks))
		if ep.Correct {
			success += 1 / float64(len(tasks))
		}
	}
	return reward, success
}

func TestExpertSolvesEverySplit(t *testing.T) {
	mix := agrl.NewMix(1)
	for _, split := range agrl.Splits {
		tasks, err := mix.Tasks(New(), split, 200)
		if err != nil {
			t.Fatal(err)
		}
		rubric := Rubric()
		for _, task := range tasks {
			ep, err := agrl.Play(New(), task, Expert(), agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := rubric.Score(ep); err != nil || r != 1 || !ep.Correct || len(ep.Turns) != 2 {
				t.Fatalf("%s: expert scored %v (%v) on %s:\n%s", split, r, err, task.ID, ep.Transcript())
			}
		}
	}
}

func TestExpertSolvesEveryDifficulty(t *testing.T) {
	for _, d := range agrl.Difficulties {
		tasks := generate(t, 11, d, 200)
		reward, success := meanReward(t, tasks, Expert())
		if math.Abs(reward-1) > 1e-9 || math.Abs(success-1) > 1e-9 {
			t.Errorf("%s: expert reward %.3f, success %.3f", d, reward, success)
		}
	}
}

// TestEpisodeSize keeps the texts within the tiny policy's context.
func TestEpisodeSize(t *testing.T) {
	for _, d := range agrl.Difficulties {
		longest := 0
		for _, task := range generate(t, 12, d, 300) {
			ep, err := agrl.Play(New(), task, Expert(), agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			longest = max(longest, len(ep.Transcript()))
		}
		t.Logf("%-7s longest expert transcript %d bytes", d, longest)
		if (d == agrl.Easy || d == agrl.Medium) && longest > 120 || longest > 300 {
			t.Errorf("%s: expert transcript of %d bytes", d, longest)
		}
	}
}

func TestRandomBaseline(t *testing.T) {
	mix := agrl.NewMix(3)
	var total float64
	for _, split := range agrl.Splits {
		tasks, err := mix.Tasks(New(), split, 200)
		if err != nil {
			t.Fatal(err)
		}
		expert, _ := meanReward(t, tasks, Expert())
		random, success := meanReward(t, tasks, agrl.RandomAgent(5, New()))
		t.Logf("%-5s expert %.3f  random %.3f (success %.3f)", split, expert, random, success)
		if math.Abs(expert-1) > 1e-9 || random > 0.3 {
			t.Errorf("%s: expert %.3f, random %.3f: want 1 and <= 0.3", split, expert, random)
		}
		total += random / float64(len(agrl.Splits))
	}
	for _, d := range agrl.Difficulties {
		random, success := meanReward(t, generate(t, 13, d, 300), agrl.RandomAgent(5, New()))
		t.Logf("%-7s random %.3f (success %.3f)", d, random, success)
	}
	t.Logf("random mean over splits %.3f", total)
}

func TestGuesser(t *testing.T) {
	want := map[agrl.Difficulty][2]float64{ // success bounds
		agrl.Easy:    {0.85, 1},
		agrl.Medium:  {0.55, 0.8},
		agrl.Hard:    {0.15, 0.45},
		agrl.Extreme: {0, 0.1},
	}
	prev := 2.0
	for _, d := range agrl.Difficulties {
		tasks := generate(t, 14, d, 1000)
		reward, success := meanReward(t, tasks, Guesser(1))
		t.Logf("%-7s guesser success %.3f, reward %.3f", d, success, reward)
		if success < want[d][0] || success > want[d][1] || success >= prev {
			t.Errorf("%s: guesser success %.3f, want in [%.2f, %.2f] and below the easier level", d, success, want[d][0], want[d][1])
		}
		prev = success
		// It answers at once, without the tool, with a number near the value.
		for _, task := range tasks[:100] {
			ep, _ := agrl.Play(New(), task, Guesser(1), agrl.Limits{})
			g, err1 := strconv.ParseInt(ep.Answer, 10, 64)
			v, err2 := strconv.ParseInt(task.Answer, 10, 64)
			if len(ep.Turns) != 1 || err1 != nil || err2 != nil || max(g-v, v-g) > max(3, max(v, -v)/10) {
				t.Fatalf("guesser on %s: %s", task.Prompt, ep.Transcript())
			}
		}
	}
	// Deterministic for a seed and a task, different across seeds.
	tasks := generate(t, 15, agrl.Hard, 200)
	same, diff := 0, 0
	for _, task := range tasks {
		a, _ := agrl.Play(New(), task, Guesser(1), agrl.Limits{})
		b, _ := agrl.Play(New(), task, Guesser(1), agrl.Limits{})
		c, _ := agrl.Play(New(), task, Guesser(2), agrl.Limits{})
		if a.Answer == b.Answer {
			same++
		}
		if a.Answer != c.Answer {
			diff++
		}
	}
	if same != len(tasks) || diff < 50 {
		t.Errorf("guesser: %d/%d repeatable, %d differ across seeds", same, len(tasks), diff)
	}
}

func TestGuessAccuracy(t *testing.T) {
	for expr, want := range map[string]float64{"3+4": 1, "12+7": 0.9, "12+7*33-40": 0.6, "1+2+3+4+5+6+7+8+9": 0.05} {
		if got := GuessAccuracy(expr); fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", want) {
			t.Errorf("GuessAccuracy(%q) = %v, want %v", expr, got, want)
		}
	}
}

// The overconfident agent skips the tool exactly on what looks easy (the generator's easy and
// medium tasks), so its tool-call share is a property of the task mix, the same for every seed;
// there it guesses with MentalAccuracy; on the rest it solves the task as the expert does.
func TestOverconfident(t *testing.T) {
	wantSuccess := map[agrl.Difficulty][2]float64{ // within 3 binomial standard deviations of MentalAccuracy's means, 0.82 and 0.47
		agrl.Easy:   {0.77, 0.88},
		agrl.Medium: {0.41, 0.54},
	}
	for _, d := range agrl.Difficulties {
		tasks := generate(t, 16, d, 1000)
		for seed := uint64(1); seed <= 2; seed++ {
			calls, success := 0, 0
			for _, task := range tasks {
				ep, err := agrl.Play(New(), task, Overconfident(seed), agrl.Limits{})
				if err != nil {
					t.Fatal(err)
				}
				easy := LooksEasy(task.Meta["expr"])
				if easy != (d == agrl.Easy || d == agrl.Medium) {
					t.Fatalf("%s task %q: LooksEasy %v", d, task.Meta["expr"], easy)
				}
				if (ep.ToolCalls() > 0) == easy {
					t.Fatalf("%s, looks easy %v: %s", d, easy, ep.Transcript())
				}
				if !easy && (!ep.Correct || len(ep.Turns) != 2) {
					t.Fatalf("on a hard-looking task it should act as the expert: %s", ep.Transcript())
				}
				calls += min(ep.ToolCalls(), 1)
				success += int(b2i(ep.Correct))
			}
			rate := float64(success) / float64(len(tasks))
			t.Logf("%-7s seed %d: tool calls %d/%d, success %.3f", d, seed, calls, len(tasks), rate)
			if b, ok := wantSuccess[d]; ok && (rate < b[0] || rate > b[1]) {
				t.Errorf("%s seed %d: success %.3f, want in [%.2f, %.2f]", d, seed, rate, b[0], b[1])
			}
		}
	}
	for expr, want := range map[string]bool{"3+4": true, "12*7-3+40": true, "12+7-3+40-5": false, "(12+7)*3": false, "123+4": false, "99/9": true} {
		if got := LooksEasy(expr); got != want {
			t.Errorf("LooksEasy(%q) = %v", expr, got)
		}
	}
	for expr, want := range map[string]float64{"3+4": 1, "12*7": 0.7, "12*7-33/11": 0.2, "99*99*99/9": 0.05} {
		if got := MentalAccuracy(expr); math.Abs(got-want) > 1e-9 {
			t.Errorf("MentalAccuracy(%q) = %v, want %v", expr, got, want)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
