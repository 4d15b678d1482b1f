// Package agrl trains small language-model agents, by reinforcement learning, on multi-turn
// tool-calling tasks whose rewards a program can verify.
//
// The pieces, in the order data flows through them:
//
//   - A Mix draws Tasks from an Env with fixed difficulty proportions (20% easy, 50% medium,
//     30% hard by default) into splits that never share a prompt (Train, Dev, Test), plus an
//     out-of-distribution split of Extreme tasks.
//   - Env.Reset starts an episode; each turn the policy writes one action in the text protocol
//     (see ParseAction), the Session answers with an observation, until an answer, a cut-off
//     or an error. Play runs that loop for any Agent and records an Episode.
//   - A Rubric turns a finished Episode into a reward with a per-component breakdown.
//   - GRPO (GroupAdvantages, ClippedSurrogate, TokenKL, NormalizeLoss) turns the rewards of
//     groups of episodes of the same task into a training signal.
//
// Environments live in their own packages (agrl.dev/envs/calc, agrl.dev/envs/multihop,
// agrl.dev/envs/filesearch); agrl.dev/envs lists them by name.
package agrl
