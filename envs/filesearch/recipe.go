package filesearch

import "agrl.dev/agrl"

// Recipe returns the GRPO configuration of file search, the one `agrl train --env filesearch`
// runs with its defaults. Measured on seeds 1–3 (docs/experiments.md, "File search: a warm
// start that succeeds"); GRPO's gain target is not reached yet.
//
//   - Policy: TinyLM with a 512-token context (listings and file contents are long).
//   - Warm start: 3000 SFT steps of 16 episodes on 16384 demonstrations, the expert alone for
//     the first half, then 60% expert and 40% Guesser (which guesses DIR/KEY.txt instead of
//     listing, and quits when the guess fails). Copying paths is learned between steps 750 and
//     1600 (token accuracy 0.92 → 0.98); with 1000 steps the warm start solved no task. It
//     solves about half the test tasks: every easy one, half the medium ones, a few hard ones,
//     where it lists the directory but does not recognise the line that answers the question.
//   - GRPO: 150 steps of 4 tasks × 8 episodes, learning rate 1e-4, KL β 0.01, clip ε 0.2,
//     training temperature 0.5, evaluation temperature 0.3, 64 tasks per evaluation split.
//     Under Rubric the error-then-quit share falls but test success barely moves (seeds 1–3:
//     48.4 → 51.6%, 53.1 → 51.6%, 43.8 → 37.5%); under NaiveRubric the policy learns the hack.
func Recipe() agrl.GRPO {
	return agrl.NewGRPO().Env(New()).Rubric(Rubric()).Policy(agrl.TinyLM().Context(512)).
		WarmStart(agrl.SFT().Steps(3000).Batch(16),
			agrl.Demo{Name: "expert", Agent: Expert(), Weight: 0.6},
			agrl.Demo{Name: "guess", Agent: Guesser(), Weight: 0.4, After: 0.5}).
		DemoEpisodes(16384).
		Steps(150).Group(8).TasksPerStep(4).LR(1e-4).KL(0.01).ClipEps(0.2).
		Temperature(0.5).EvalTemperature(0.3).MaxActionTokens(80).
		EvalTasks(64).EvalEvery(25).Out("runs/filesearch")
}
