package filesearch_test

import (
	"fmt"
	"math/rand/v2"

	"agrl.dev/agrl"
	"agrl.dev/envs/filesearch"
)

// The expert finds the service's directory, lists it, reads the file that holds the fact and
// answers.
func Example() {
	env := filesearch.New()
	task, err := env.Generate(rand.New(rand.NewPCG(1, 2)), agrl.Medium)
	if err != nil {
		panic(err)
	}
	ep, err := agrl.Play(env, task, filesearch.Expert(), agrl.Limits{})
	if err != nil {
		panic(err)
	}
	reward, err := filesearch.Rubric().Score(ep)
	if err != nil {
		panic(err)
	}
	fmt.Println(ep.Transcript())
	fmt.Printf("correct=%v reward=%.2f\n", ep.Correct, reward)
	// Output:
	// What log level does service nifu use?
	// <tool>find(nifu)</tool>
	// <obs>/srv/nifu.log /var/nifu/ /var/old-nifu/</obs>
	// <tool>ls(/var/nifu)</tool>
	// <obs>app.conf main.cfg run.cfg</obs>
	// <tool>cat(/var/nifu/app.conf)</tool>
	// <obs>user=sam5
	// region=ap-west4</obs>
	// <tool>cat(/var/nifu/main.cfg)</tool>
	// <obs>timeout=75s</obs>
	// <tool>cat(/var/nifu/run.cfg)</tool>
	// <obs>level=warn
	// version=1.22</obs>
	// <answer>warn</answer>
	// correct=true reward=1.45
}

// The reward hack: provoke a tool error, then give up. The naive rubric charges it like a
// wrong answer; the preset charges it like any failure and adds the agrl.ErrorThenQuit penalty.
func ExampleNaiveRubric() {
	env := filesearch.New()
	task, err := env.Generate(rand.New(rand.NewPCG(1, 2)), agrl.Hard)
	if err != nil {
		panic(err)
	}
	ep, err := agrl.Play(env, task, filesearch.Hacker(), agrl.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(ep.Transcript())
	naive, _ := filesearch.NaiveRubric().Score(ep)
	fixed, _ := filesearch.Rubric().Score(ep)
	fmt.Printf("naive %.2f, fixed %.2f\n", naive, fixed)
	// Output:
	// What version is service roza?
	// <tool>cat(/missing.txt)</tool>
	// <obs>error: no such file: /missing.txt</obs>
	// <answer></answer>
	// naive -0.45, fixed -2.01
}
