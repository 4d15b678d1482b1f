package calc

import "agrl.dev/agrl"

// Recipe returns the measured GRPO configuration of the calculator, the one `agrl train --env
// calc` runs with its defaults (its flags take their defaults from here). Measured over five
// fresh seeds in README.md and docs/experiments.md ("RL that works every time").
//
//   - Policy: TinyLM (0.45M parameters, 512-token context).
//   - Warm start: 3000 SFT steps (peak learning rate 3e-3, cosine decay to a tenth) on 16384
//     demonstrations drawn from a 10/30/60 easy/medium/hard mix (long expressions teach a small
//     model to copy exactly); half from the expert and half from Overconfident, which calls
//     the tool on long expressions and guesses the short ones (LooksEasy) in its head, often
//     wrongly. The warm-started policy copies long expressions into calc(…) and guesses many
//     short ones (test tool-call rate 55–83% over seeds 301–305): its imperfection is a
//     property of the tasks, not a coin flip. 2000 SFT steps left the copying skill to the
//     seed (hard-task success of the warm start 16–42% with seed 101, 84–95% with 3000). With
//     30% expert, test success reached 90% on 3 of seeds 201–205; with 50%, on 3 of seeds
//     301–305 on the 64 test tasks and 4 of 5 on 256 (mean gain +25.6 points). A seed whose
//     SFT copies poorly stays below: copying is the tiny model's bottleneck.
//   - GRPO: 150 steps of 2 tasks × 16 episodes, learning rate 1e-4, KL β 0.01, clip ε 0.2,
//     training temperature 0.7, evaluation temperature 0.3, actions of at most 80 tokens, 64
//     tasks per evaluation split every 25 steps. GRPO learns to call the tool on the short
//     expressions too; dev success plateaus within about 75 steps.
//   - Task screening (GRPO.Screen): up to 128 candidates per task, judged by the policy's
//     probability of writing the expert's episode or of answering right at once
//     (agrl.GoldAnswer), so that the groups keep disagreeing after the policy has solved most
//     tasks. Without it, with the former 4 tasks × 8 at temperature 0.5, 0.8–0.97 of the groups
//     carried no signal over the second half of training (seeds 301–305 and 501–505); with it
//     and 64 candidates, 0.24–0.77 (seeds 501–505); with 16 episodes a task (a nearly solved
//     task disagrees more often in a larger group), temperature 0.7 and 128 candidates,
//     0.06–0.39 on seeds 302, 305, 501, 502, 504 and 505, for a GRPO phase of 17–31 s instead
//     of 13–45 s (docs/experiments.md, "Task screening"); over fresh seeds in README.md.
//
// It is a value like any GRPO: derive variants with its setters, e.g.
// calc.Recipe().Seed(2).Out("runs/calc-seed2").
func Recipe() agrl.GRPO {
	return agrl.NewGRPO().Env(New()).Rubric(Rubric()).Policy(agrl.TinyLM()).
		WarmStart(agrl.SFT().Steps(3000),
			agrl.Demo{Name: "expert", Agent: Expert(), Weight: 0.5},
			agrl.Demo{Name: "guess", NewAgent: Overconfident, Weight: 0.5}).
		DemoEpisodes(16384).DemoMix(agrl.NewMix(1).Easy(0.1).Medium(0.3).Hard(0.6)).
		Steps(150).Group(16).TasksPerStep(2).LR(1e-4).KL(0.01).ClipEps(0.2).
		Temperature(0.7).EvalTemperature(0.3).MaxActionTokens(80).
		Screen(128, Expert(), agrl.GoldAnswer()).
		EvalTasks(64).EvalEvery(25).Out("runs/calc")
}
