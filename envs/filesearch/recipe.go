package filesearch

import "agrl.dev/agrl"

// Recipe returns the GRPO configuration of file search, the one `agrl train --env filesearch`
// runs with its defaults. Measured over five fresh seeds in README.md and docs/experiments.md
// ("File search: a warm start that assumes").
//
//   - Policy: TinyLM with a 512-token context (listings and file contents are long) and
//     Tokenizer's words for keys and path components.
//   - Warm start: 3000 SFT steps of 16 episodes on 16384 demonstrations, the expert alone for
//     the first half (with the former tokenizer and demonstrations, copying paths was learned
//     between steps 750 and 1600, and 1000 steps solved no task), then 40% from the expert and
//     60% from Assumer, which
//     answers the questions that LooksKnown (a name: user, host, region, team, log level) at
//     once from what it thinks it knows and searches as the expert does otherwise. The warm
//     start searches on every numeric question and on some of the others: where it skips the
//     search is a property of the tasks.
//   - GRPO: 150 steps of 2 tasks × 16 episodes at temperature 0.7, task screening over 128
//     candidates (the expert's episode and a right answer at once, agrl.GoldAnswer), learning
//     rate 1e-4, KL β 0.01, clip ε 0.2, evaluation temperature 0.3, 64 tasks per evaluation
//     split. GRPO learns to search on the questions the warm start answered from memory (test
//     tool-call rate 42–61% → 100% over seeds 701–705, test success 28.7 ± 9.3% → 49.4 ± 8.5%,
//     gain +20.6 ± 7.2 points: means ± the 95% Student-t half-width); what it does not teach is reading: the honest search fails on
//     most hard trees, where the model does not pick the right path or line, and that bounds
//     what the run can reach.
func Recipe() agrl.GRPO {
	return agrl.NewGRPO().Env(New()).Rubric(Rubric()).Policy(agrl.TinyLM().Context(512).Tokenizer(Tokenizer())).
		WarmStart(agrl.SFT().Steps(3000).Batch(16),
			agrl.Demo{Name: "expert", Agent: Expert(), Weight: 0.4},
			agrl.Demo{Name: "guess", NewAgent: Assumer, Weight: 0.6, After: 0.5}).
		DemoEpisodes(16384).
		Steps(150).Group(16).TasksPerStep(2).LR(1e-4).KL(0.01).ClipEps(0.2).
		Temperature(0.7).EvalTemperature(0.3).MaxActionTokens(80).
		Screen(128, Expert(), agrl.GoldAnswer()).
		EvalTasks(64).EvalEvery(25).Out("runs/filesearch")
}
