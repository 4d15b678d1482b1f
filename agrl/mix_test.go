package agrl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestMixQuotasAndDeterminism(t *testing.T) {
	mix := NewMix(7)
	tasks, err := mix.Tasks(toyEnv{}, Dev, 50)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Difficulty]int{}
	for _, task := range tasks {
		counts[task.Difficulty]++
		if SplitOf(task.Prompt, task.Difficulty) != Dev {
			t.Fatalf("%s is not a dev prompt", task.Prompt)
		}
	}
	// 20/50/30 of 50 is exactly 10/25/15.
	if counts[Easy] != 10 || counts[Medium] != 25 || counts[Hard] != 15 {
		t.Errorf("counts %v, want 10/25/15", counts)
	}
	again, _ := NewMix(7).Tasks(toyEnv{}, Dev, 50)
	if !reflect.DeepEqual(tasks, again) {
		t.Error("same seed must give the same tasks")
	}
	other, _ := NewMix(8).Tasks(toyEnv{}, Dev, 50)
	if reflect.DeepEqual(tasks, other) {
		t.Error("another seed should give other tasks")
	}
	// Largest remainder: 20/50/30 of 7 = 1.4/3.5/2.1 -> 1/4/2 (the largest remainder, .5, gets the extra).
	plan := NewMix(1).quota(7)
	got := map[Difficulty]int{}
	for _, d := range plan {
		got[d]++
	}
	if got[Easy] != 1 || got[Medium] != 4 || got[Hard] != 2 {
		t.Errorf("quota(7) = %v", got)
	}
}

func TestMixSplitsAreDisjoint(t *testing.T) {
	mix := NewMix(3).Easy(0).Medium(1).Hard(1)
	owner := map[string]Split{}
	for _, split := range Splits {
		tasks, err := mix.Tasks(toyEnv{}, split, 120)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			// Train, dev and test never share a prompt; OOD may share one with test only (both
			// are held out), when the env poses the same text at several difficulties.
			if prev, ok := owner[task.Prompt]; ok && !(prev == Test && split == OOD) {
				t.Fatalf("prompt %q in %s and %s", task.Prompt, prev, split)
			}
			owner[task.Prompt] = split
			if (split == OOD) != (task.Difficulty == Extreme) {
				t.Fatalf("%s task of difficulty %s", split, task.Difficulty)
			}
			if split != OOD && task.Difficulty == Easy {
				t.Fatal("easy weight 0 still drew an easy task")
			}
		}
	}
	// The train stream also never leaves its split.
	s, err := mix.Stream(toyEnv{}, Train)
	if err != nil {
		t.Fatal(err)
	}
	for range 500 {
		task, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if sp, ok := owner[task.Prompt]; ok && sp != Train {
			t.Fatalf("stream drew %s prompt %q", sp, task.Prompt)
		}
	}
}

// TestOODNeverSharesATrainPrompt: a prompt text that can be posed at any difficulty (as in
// filesearch, whose tree size is not in the question) still never appears in train or dev and
// in OOD.
func TestOODNeverSharesATrainPrompt(t *testing.T) {
	for i := range 5000 {
		p := fmt.Sprintf("prompt %d", i)
		in, ood := SplitOf(p, Medium), SplitOf(p, Extreme)
		if ood == OOD && in != Test {
			t.Fatalf("%q is OOD and %s", p, in)
		}
		if ood != OOD && ood != 0 {
			t.Fatalf("extreme prompt %q in %s", p, ood)
		}
	}
}

func TestSplitOfProportions(t *testing.T) {
	counts := map[Split]int{}
	for i := range 20000 {
		counts[SplitOf(fmt.Sprintf("prompt %d", i), Medium)]++
	}
	for split, want := range map[Split]float64{Train: 0.8, Dev: 0.1, Test: 0.1} {
		if f := float64(counts[split]) / 20000; math.Abs(f-want) > 0.015 {
			t.Errorf("%s fraction %.3f, want %.1f", split, f, want)
		}
	}
}

func TestStreamFollowsWeights(t *testing.T) {
	s, err := NewMix(11).Stream(toyEnv{}, Train)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Difficulty]int{}
	const n = 4000
	for range n {
		task, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		counts[task.Difficulty]++
	}
	for d, want := range map[Difficulty]float64{Easy: 0.2, Medium: 0.5, Hard: 0.3} {
		if f := float64(counts[d]) / n; math.Abs(f-want) > 0.03 {
			t.Errorf("%s fraction %.3f, want %.1f", d, f, want)
		}
	}
}

func TestMixErrors(t *testing.T) {
	err := NewMix(1).Easy(-1).Medium(math.NaN()).Validate()
	if err == nil || !strings.Contains(err.Error(), "easy weight is -1") || !strings.Contains(err.Error(), "medium weight is NaN") {
		t.Errorf("got %v", err)
	}
	if err := NewMix(1).Weight(Extreme, 1).Validate(); err == nil || !strings.Contains(err.Error(), "cannot weight extreme") {
		t.Errorf("extreme weight: %v", err)
	}
	if f := NewMix(1).Only(Hard).Fractions(); f[Hard] != 1 || f[Easy] != 0 {
		t.Errorf("Only(Hard) = %v", f)
	}
	if err := NewMix(1).Easy(0).Medium(0).Hard(0).Validate(); err == nil {
		t.Error("all-zero weights must be an error")
	}
	if _, err := NewMix(1).Tasks(nil, Dev, 1); err == nil {
		t.Error("nil env")
	}
	if _, err := NewMix(1).Tasks(toyEnv{}, Dev, -1); err == nil {
		t.Error("negative n")
	}
	// The toy env has only 10 easy prompts, about one of them in dev: asking for 5 must fail
	// with a clear error rather than loop forever.
	_, err = NewMix(1).Easy(1).Medium(0).Hard(0).Tasks(toyEnv{tiny: true}, Dev, 5)
	if err == nil || !strings.Contains(err.Error(), "task space is too small") {
		t.Errorf("small task space: %v", err)
	}
	if _, err := NewMix(1).Tasks(badEnv{}, Dev, 1); err == nil || !strings.Contains(err.Error(), "empty prompt") {
		t.Errorf("invalid generated task: %v", err)
	}
}

type badEnv struct{ toyEnv }

func (badEnv) Generate(*rand.Rand, Difficulty) (Task, error) { return Task{Env: "bad"}, nil }

func TestDifficultyText(t *testing.T) {
	for _, d := range Difficulties {
		b, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Difficulty
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("%s: %v %v", d, back, err)
		}
	}
	if _, err := ParseDifficulty("impossible"); err == nil {
		t.Error("unknown difficulty")
	}
	if _, err := Difficulty(0).MarshalText(); err == nil {
		t.Error("zero difficulty must not marshal")
	}
	if NormalizeAnswer("  Vell. ") != "vell" || NormalizeAnswer("+12") != "12" || NormalizeAnswer("\u22125") != "-5" || NormalizeAnswer("New   York") != "new york" {
		t.Error("NormalizeAnswer")
	}
}

func ExampleMix() {
	mix := NewMix(42) // 20% easy, 50% medium, 30% hard
	dev, err := mix.Tasks(toyEnv{}, Dev, 10)
	if err != nil {
		panic(err)
	}
	count := map[Difficulty]int{}
	for _, task := range dev {
		count[task.Difficulty]++
	}
	fmt.Println("easy", count[Easy], "medium", count[Medium], "hard", count[Hard])
	ood, _ := mix.Tasks(toyEnv{}, OOD, 2)
	fmt.Println(ood[0].Difficulty, ood[1].Difficulty)
	// Output:
	// easy 2 medium 5 hard 3
	// extreme extreme
}
