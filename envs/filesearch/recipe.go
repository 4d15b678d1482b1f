package filesearch

import "agrl.dev/agrl"

// Recipe returns the starting GRPO configuration of file search. Unlike the calculator's and
// multihop's it is not a measured result yet: it takes their GRPO settings (learning rate 1e-4,
// training temperature 0.5, 300 steps of 4 tasks × 8 episodes) and an expert-only warm start of
// 1000 SFT steps of 16 episodes on 4096 demonstrations, with the Tiny policy's 512-token context
// (file listings are long). `agrl train --env filesearch` runs it with its defaults.
func Recipe() agrl.GRPO {
	return agrl.NewGRPO().Env(New()).Rubric(Rubric()).Policy(agrl.TinyLM().Context(512)).
		WarmStart(agrl.SFT().Steps(1000).Batch(16), agrl.Demo{Name: "expert", Agent: Expert(), Weight: 1}).
		DemoEpisodes(4096).
		Steps(300).Group(8).TasksPerStep(4).LR(1e-4).KL(0.01).ClipEps(0.2).
		Temperature(0.5).EvalTemperature(0.3).MaxActionTokens(80).
		EvalTasks(64).EvalEvery(25).Out("runs/filesearch")
}
