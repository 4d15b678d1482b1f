// Package learn is agrl's learner: the GoMLX language-model policy and everything that runs it
// — batched sampling with a KV cache, scoring, training with AdamW, the SFT warm start, the
// GRPO trainer, checkpoints and backend choice. It builds on the standard-library core
// (agrl.dev/agrl), which holds the protocol, environments' interface, episodes, rubrics, mixes,
// run directories, GRPO's host arithmetic and every configuration builder (agrl.NewGRPO,
// agrl.SFT, agrl.TinyLM, agrl.NewAdamW); learn turns those configurations into running code.
// Environment packages and plot-only notebook cells never need to import it.
//
// The policy language model, in one picture:
//
//	pol, err := learn.NewPolicy(agrl.TinyLM().Seed(1))   // agrl.LM (configuration) -> *Policy (weights in a GoMLX store)
//	demos, err := agrl.ExpertEpisodes(env, expert, trainTasks, agrl.Limits{})
//	rep, err := pol.SFT(agrl.SFT().Steps(300), demos, env, devTasks) // warm start; greedy dev success
//	eps, st, err := pol.Rollout(env, tasks, agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 0.8, Seed: seed}})
//	// eps[i].Tokens / LossMask / LogProbs: the sampled ids and their log-probs, never re-tokenised
//	tr, err := pol.NewTrainer("grpo", loss, []string{"mask", "adv", "old_logp"}, agrl.NewAdamW(), 0.8)
//	stats, err := tr.Step(learn.TrainBatch{Tokens: ..., Values: ...})
//	dir, err := pol.Save("runs/x/checkpoints")          // atomic; learn.LoadPolicy(dir, "") restores it
//
// and the whole GRPO loop, from one configuration value:
//
//	tr, err := learn.Build(agrl.NewGRPO().Env(env).Rubric(rubric).Out("runs/x")) // validates everything at once
//	res, err := tr.Train(ctx) // warm start, GRPO steps, evaluations, checkpoints: the run directory
//
// Files: model.go (the transformer and its graphs), score.go (Score: log-probs and entropy),
// sample.go (Decoder: batched KV-cache sampling), rollout.go (Rollout: multi-turn episodes),
// train.go (Trainer: loss, gradients, AdamW), sft.go (SFT, Evaluate), grpo_loss.go (the GRPO
// objective in the graph), grpo_train.go (GRPOTrainer: Build, Step, Train), checkpoint.go (Save,
// LoadPolicy, Clone), backend*.go (backend choice; -tags noxla builds without XLA's cgo) and
// gomlxfix.go (faster matmul gradients on the go backend, installed when this package is
// imported). On the go backend, build with GOEXPERIMENT=simd. docs/architecture.md draws the
// layers and one GRPO step's data flow.
package learn
