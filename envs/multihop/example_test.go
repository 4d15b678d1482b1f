package multihop_test

import (
	"fmt"
	"math/rand/v2"

	"agrl.dev/agrl"
	"agrl.dev/envs/multihop"
)

// A medium (2-hop) question, solved by the expert and scored with the preset rubric.
func Example() {
	env := multihop.New()
	task, err := env.Generate(rand.New(rand.NewPCG(1, 2)), agrl.Medium)
	if err != nil {
		panic(err)
	}
	ep, err := agrl.Play(env, task, multihop.Expert(), agrl.Limits{})
	if err != nil {
		panic(err)
	}
	reward, err := multihop.Rubric().Score(ep)
	if err != nil {
		panic(err)
	}
	fmt.Println(ep.Transcript())
	fmt.Printf("correct=%v reward=%.1f\n", ep.Correct, reward)
	// Output:
	// What is the country of the hq of Puzi?
	// <tool>search(Puzi based)</tool>
	// <obs>Puzi is based in Tefex.
	// Konese is based in Fune.</obs>
	// <tool>search(Tefex located)</tool>
	// <obs>Tefex is located in Zulvol.
	// Vuvun was born in Tefex.</obs>
	// <answer>Zulvol</answer>
	// correct=true reward=1.0
}

// A search that matches nothing costs 0.1 in the preset rubric, a wrong answer 0.5. With
// TopK(1), searching a bare name shows only the first fact about it in the world's order.
func ExampleEmptySearches() {
	env := multihop.New().TopK(1)
	task, _ := env.Generate(rand.New(rand.NewPCG(1, 2)), agrl.Easy)
	script := []string{
		agrl.ToolAction("search", "nothing here"),
		agrl.ToolAction("search", task.Meta["start"]),
		agrl.AnswerText("Nobody"),
	}
	agent := agrl.AgentFunc(func(ep *agrl.Episode) (string, error) { return script[len(ep.Turns)], nil })
	ep, _ := agrl.Play(env, task, agent, agrl.Limits{})
	reward, _ := multihop.Rubric().Score(ep)
	fmt.Println(ep.Transcript())
	fmt.Printf("empty searches=%v reward=%.1f\n", multihop.EmptySearches(ep), reward)
	// Output:
	// What is the country of Gisbi?
	// <tool>search(nothing here)</tool>
	// <obs>error: no fact matches</obs>
	// <tool>search(Gisbi)</tool>
	// <obs>Ritupu is based in Gisbi.</obs>
	// <answer>Nobody</answer>
	// empty searches=1 reward=-0.6
}
