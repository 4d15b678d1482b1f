package envs

import (
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func TestRegistry(t *testing.T) {
	if got := strings.Join(Names(), ","); got != "calc,filesearch,multihop" {
		t.Fatalf("names %s", got)
	}
	if _, err := Get("nope"); err == nil || !strings.Contains(err.Error(), "known: calc, filesearch, multihop") {
		t.Errorf("unknown name: %v", err)
	}
	for _, e := range All() {
		env := e.New()
		if env.Name() != e.Name {
			t.Errorf("%s: env calls itself %s", e.Name, env.Name())
		}
		if err := e.Rubric().Validate(); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
		tasks, err := agrl.NewMix(9).Tasks(env, agrl.Test, 20)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			ep, err := agrl.Play(env, task, e.Expert(), agrl.Limits{})
			if err != nil || !ep.Correct {
				t.Fatalf("%s: expert failed %s: %v", e.Name, task.ID, err)
			}
		}
	}
}
