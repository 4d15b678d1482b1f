// Package envs is the registry of agrl's built-in environments, so that command-line tools and
// notebooks can pick one by name.
//
//	e, err := envs.Get("calc")
//	tasks, err := agrl.NewMix(1).Tasks(e.New(), agrl.Dev, 10)
package envs

import (
	"fmt"
	"sort"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
	"agrl.dev/envs/filesearch"
	"agrl.dev/envs/multihop"
)

// Entry describes one built-in environment.
type Entry struct {
	// Name is the name used on the command line ("calc").
	Name string
	// Doc is a one-line description.
	Doc string
	// New returns the environment with its default settings.
	New func() agrl.Env
	// Expert returns the scripted expert that solves every task.
	Expert func() agrl.Agent
	// Rubric returns the environment's preset rubric.
	Rubric func() agrl.Rubric
	// Guesser returns an agent that is imperfect where an untrained model is, and where it
	// errs is a property of the task (calc.Overconfident: guesses what looks easy;
	// multihop.Shortcut: answers country questions after the first hop; filesearch.Assumer:
	// answers questions whose answer is a name without searching): mixed into warm-start
	// demonstrations (-guess-frac) it leaves GRPO something to discover.
	Guesser func(seed uint64) agrl.Agent
	// Rubrics names the environment's other rubrics (`agrl train -rubric NAME`), such as
	// filesearch's "naive" one of the reward-hacking lesson or multihop's "process" one with a
	// per-turn component. "preset" (Rubric) is always available and is not listed.
	Rubrics map[string]func() agrl.Rubric
	// Recipe returns the environment's GRPO configuration: policy, warm start, GRPO settings
	// and evaluation, ready to train (`agrl train` takes its flag defaults from it).
	Recipe func() agrl.GRPO
	// TaskFromText, when set, makes a task of text a user typed (`agrl play`'s ":task TEXT";
	// calc: an expression).
	TaskFromText func(text string) (agrl.Task, error)
}

// Demos returns warm-start demonstrations of the environment: the expert, and, when the
// environment has a guesser, the guesser (seeded by the run's seed) with share guessFrac (0..1),
// whose episodes join the SFT batches after the fraction guessAfter (0 ≤ guessAfter < 1) of its
// steps (agrl.Demo.After).
func (e Entry) Demos(guessFrac, guessAfter float64) []agrl.Demo {
	if e.Guesser == nil || guessFrac <= 0 {
		return []agrl.Demo{{Name: "expert", Agent: e.Expert(), Weight: 1}}
	}
	return []agrl.Demo{
		{Name: "expert", Agent: e.Expert(), Weight: 1 - guessFrac},
		{Name: "guess", NewAgent: e.Guesser, Weight: guessFrac, After: guessAfter},
	}
}

var registry = []Entry{
	{
		Name:    "calc",
		Doc:     "calculator verify: evaluate an integer expression with the calc tool, answer its exact value",
		New:     func() agrl.Env { return calc.New() },
		Expert:  calc.Expert,
		Rubric:  calc.Rubric,
		Guesser: calc.Overconfident,
		Recipe:  calc.Recipe,
		TaskFromText: func(expr string) (agrl.Task, error) {
			return calc.NewTask(expr, agrl.Medium)
		},
	},
	{
		Name:    "multihop",
		Doc:     "multi-hop search QA over a synthetic knowledge base: chain search calls, answer the entity",
		New:     func() agrl.Env { return multihop.New() },
		Expert:  multihop.Expert,
		Rubric:  multihop.Rubric,
		Guesser: func(uint64) agrl.Agent { return multihop.Shortcut() },
		Rubrics: map[string]func() agrl.Rubric{"process": multihop.ProcessRubric},
		Recipe:  multihop.Recipe,
	},
	{
		Name:    "filesearch",
		Doc:     "find the file holding a fact in a virtual file tree with ls, cat and find",
		New:     func() agrl.Env { return filesearch.New() },
		Expert:  filesearch.Expert,
		Rubric:  filesearch.Rubric,
		Guesser: filesearch.Assumer,
		Rubrics: map[string]func() agrl.Rubric{"naive": filesearch.NaiveRubric},
		Recipe:  filesearch.Recipe,
	},
}

// RubricNamed returns the environment's rubric called name: "preset" (or "") is Rubric, any
// other must be in Rubrics; the error lists the names there are.
func (e Entry) RubricNamed(name string) (agrl.Rubric, error) {
	if name == "" || name == "preset" {
		return e.Rubric(), nil
	}
	if fn, ok := e.Rubrics[name]; ok {
		return fn(), nil
	}
	names := []string{"preset"}
	for n := range e.Rubrics {
		names = append(names, n)
	}
	sort.Strings(names[1:])
	return agrl.Rubric{}, fmt.Errorf("%s has no rubric %q (it has: %s)", e.Name, name, strings.Join(names, ", "))
}

// All returns every built-in environment, sorted by name.
func All() []Entry {
	out := append([]Entry(nil), registry...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the names of the built-in environments, sorted.
func Names() []string {
	var out []string
	for _, e := range All() {
		out = append(out, e.Name)
	}
	return out
}

// Get returns the environment called name, or an error that lists the known names.
func Get(name string) (Entry, error) {
	for _, e := range registry {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("unknown environment %q (known: %s)", name, strings.Join(Names(), ", "))
}
