package nb

import (
	"os"

	"agrl.dev/agrl"
)

// QuickEnv names the environment variable that asks notebooks for short runs: `make notebooks`
// (and so CI) sets it, to check that every cell still runs; `make notebooks-update` leaves it
// unset to produce the committed outputs.
const QuickEnv = "AGRL_QUICK"

// Quick reports whether notebooks run in quick mode (QuickEnv set and non-empty).
func Quick() bool { return os.Getenv(QuickEnv) != "" }

// Sized returns full, or quick in quick mode: the size of a notebook's own evaluation or loop.
func Sized(full, quick int) int {
	if Quick() {
		return quick
	}
	return full
}

// Budget returns g unchanged, or in quick mode g with its budgets cut so that a notebook cell
// trains in about a minute: at most 6 GRPO steps, 100 warm-start SFT steps on 512
// demonstrations, 16 tasks per evaluation split, dev evaluations and trajectories every 3 steps.
// Only budgets change, never the recipe's settings (policy, learning rates, temperatures, group
// size, demonstration sources), so a cell reads the same in both modes.
func Budget(g agrl.GRPO) agrl.GRPO {
	if !Quick() {
		return g
	}
	s := g.Spec()
	g = g.Steps(min(s.Steps, 6)).EvalTasks(min(s.EvalTasks, 16))
	if s.EvalEvery > 0 {
		g = g.EvalEvery(min(s.EvalEvery, 3))
	}
	if s.TrajectoriesEvery > 0 {
		g = g.TrajectoriesEvery(min(s.TrajectoriesEvery, 3))
	}
	if s.SFT != nil {
		g = g.WarmStartSteps(min(s.SFT.Spec().Steps, 100)).DemoEpisodes(min(s.DemoEpisodes, 512))
	}
	return g
}
