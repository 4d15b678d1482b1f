// Package agrl trains small language-model agents, by reinforcement learning, on multi-turn
// tool-calling tasks whose rewards a program can verify. This package is the core: standard
// library only (no GoMLX, no cgo), so environments and plot-only notebook cells build fast and
// link nothing else. The learner — the GoMLX policy, sampler, trainer, SFT, checkpoints and
// learn.Build, which runs a GRPO configuration — is agrl.dev/agrl/learn.
//
// The pieces, in the order data flows through them:
//
//   - A Mix draws Tasks from an Env with fixed difficulty proportions into splits that never
//     share a prompt (Train, Dev, Test), plus an out-of-distribution split of Extreme tasks.
//   - Env.Reset starts an episode; each turn the policy writes one action in the text protocol
//     (see ParseAction), the Session answers with an observation, until an answer, a cut-off
//     or an error. Play runs that loop for any Agent and records an Episode; TurnLoop is the
//     same per-turn logic for the learner's token-level rollouts.
//   - A Rubric of named, weighted RewardFuncs turns a finished Episode into a reward with a
//     per-component breakdown.
//   - GRPO's arithmetic (GroupAdvantages, ClippedSurrogate, TokenKL, NormalizeLoss) turns the
//     rewards of groups of episodes of the same task into a training signal; the learner
//     computes the same quantities in its graph and is tested against these.
//   - Evaluate summarises episodes; LockRun (learn.Build) and OpenRun write and read run directories
//     (config.json, metrics.jsonl, eval.jsonl, trajectories, summary.json).
//
// The configuration builders live here too, as plain values whose setters return copies:
// NewGRPO (the whole run), SFT (the warm start), NewAdamW, TinyLM and SmallLM (model shapes
// and their Tokenizer). Environments live in their own packages (agrl.dev/envs/calc,
// agrl.dev/envs/multihop, agrl.dev/envs/filesearch); agrl.dev/envs lists them by name.
// docs/architecture.md draws the layers and one GRPO step's data flow.
package agrl
