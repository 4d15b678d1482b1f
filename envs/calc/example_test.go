package calc_test

import (
	"fmt"
	"math/rand/v2"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
)

// The expert solves a hand-written task: one calc call, then the answer.
func Example() {
	task, err := calc.NewTask("12+7*(3-5)", agrl.Medium)
	if err != nil {
		panic(err)
	}
	ep, err := agrl.Play(calc.New(), task, calc.Expert(), agrl.Limits{})
	if err != nil {
		panic(err)
	}
	reward, _ := calc.Rubric().Score(ep)
	fmt.Println(ep.Transcript())
	fmt.Printf("reward %.1f\n", reward)
	// Output:
	// Compute: 12+7*(3-5)
	// <tool>calc(12+7*(3-5))</tool>
	// <obs>-2</obs>
	// <answer>-2</answer>
	// reward 1.0
}

// Division truncates toward zero; unsupported operators are errors.
func ExampleEval() {
	for _, expr := range []string{"2+3*4", "7/2", "-7/2", "9**9**9", "1/0"} {
		v, err := calc.Eval(expr)
		if err != nil {
			fmt.Printf("%s: error: %v\n", expr, err)
			continue
		}
		fmt.Printf("%s = %d\n", expr, v)
	}
	// Output:
	// 2+3*4 = 14
	// 7/2 = 3
	// -7/2 = -3
	// 9**9**9: error: unsupported operator ** at 2
	// 1/0: error: division by zero
}

// Each difficulty draws longer expressions with bigger operands.
func ExampleEnv_Generate() {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range agrl.Difficulties {
		task, err := calc.New().Generate(rng, d)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-7s %s = %s\n", d, task.Prompt, task.Answer)
	}
	// Output:
	// easy    Compute: 3+5 = 8
	// medium  Compute: 50-90/45 = 48
	// hard    Compute: (72+66-(902+845))*364 = -585676
	// extreme Compute: (598*8357+8713)*(494/247)+6683+259-358 = 10018982
}

// The guesser answers without the tool, sometimes wrongly; the rubric gives it format and
// answer credit only.
func ExampleGuesser() {
	task, _ := calc.NewTask("12+7", agrl.Easy)
	ep, _ := agrl.Play(calc.New(), task, calc.Guesser(1), agrl.Limits{})
	reward, _ := calc.Rubric().Score(ep)
	fmt.Println(ep.Transcript())
	fmt.Printf("correct %v, reward %.1f\n", ep.Correct, reward)
	// Output:
	// Compute: 12+7
	// <answer>19</answer>
	// correct true, reward 0.7
}

// The overconfident agent guesses what looks easy and calls the tool on the rest: here a wrong
// guess at a product, and a long expression solved with the tool.
func ExampleOverconfident() {
	for _, expr := range []string{"47*83-12", "(12+7)*3-40/8"} {
		task, _ := calc.NewTask(expr, agrl.Medium)
		ep, _ := agrl.Play(calc.New(), task, calc.Overconfident(4), agrl.Limits{})
		reward, _ := calc.Rubric().Score(ep)
		fmt.Printf("looks easy %v, mental accuracy %.2f\n%s\ncorrect %v, reward %.1f\n\n", calc.LooksEasy(expr), calc.MentalAccuracy(expr), ep.Transcript(), ep.Correct, reward)
	}
	// Output:
	// looks easy true, mental accuracy 0.55
	// Compute: 47*83-12
	// <answer>3887</answer>
	// correct false, reward 0.2
	//
	// looks easy false, mental accuracy 0.05
	// Compute: (12+7)*3-40/8
	// <tool>calc((12+7)*3-40/8)</tool>
	// <obs>52</obs>
	// <answer>52</answer>
	// correct true, reward 1.0
}
