package learn

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"agrl.dev/agrl"
)

// This file holds task screening (agrl.GRPO.Screen): before a step's rollouts, the policy
// scores the screening agents' successful episodes of every candidate task, and the step keeps
// the tasks whose groups are most likely to carry signal.

// screenStats is what the first round's screening predicted, for the step's metrics.
type screenStats struct {
	on                               bool
	signal, pool, chosen, candidates float64
}

// ScreenChunk is how many candidates per task screening draws at a time, and ScreenEnough the
// predicted share of groups with signal at which it stops drawing: a step starts with
// ScreenChunk candidates per task and draws ScreenChunk more, up to GRPO.Screen, while the
// best tasks so far would leave more than half of the groups without signal. Early in
// training (many informative tasks) that costs little; once the policy solves nearly every
// task, the full pool is drawn.
const (
	ScreenChunk  = 8
	ScreenEnough = 0.5
)

// drawTasks returns the next need tasks of the stream: as drawn without screening; with it,
// the need most informative of the candidates drawn (see ScreenChunk), in stream order.
func (t *GRPOTrainer) drawTasks(stream *agrl.TaskStream, need int, sst *screenStats) ([]agrl.Task, error) {
	next := func(n int) ([]agrl.Task, error) {
		out := make([]agrl.Task, n)
		for i := range out {
			task, err := stream.Next()
			if err != nil {
				return nil, err
			}
			out[i] = task
		}
		return out, nil
	}
	if t.cfg.Screen < 2 {
		return next(need)
	}
	var cands []agrl.Task
	var q, sig []float64
	var keep []int
	chosenSig := 0.0
	for drawn := 0; drawn < t.cfg.Screen; {
		chunk := min(ScreenChunk, t.cfg.Screen-drawn)
		more, err := next(need * chunk)
		if err != nil {
			return nil, err
		}
		mq, err := t.expertSuccess(more)
		if err != nil {
			return nil, fmt.Errorf("screening: %w", err)
		}
		cands, q = append(cands, more...), append(q, mq...)
		for _, v := range mq {
			sig = append(sig, GroupSignal(v, t.cfg.Group))
		}
		drawn += chunk
		order := make([]int, len(cands))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sig[b], sig[a]) })
		keep, chosenSig = order[:need], 0
		for _, i := range keep {
			chosenSig += sig[i] / float64(need)
		}
		if chosenSig >= ScreenEnough {
			break
		}
	}
	slices.Sort(keep)
	out := make([]agrl.Task, need)
	var chosenQ, poolSig float64
	for k, i := range keep {
		out[k] = cands[i]
		chosenQ += q[i] / float64(need)
	}
	for _, v := range sig {
		poolSig += v / float64(len(sig))
	}
	if !sst.on { // the first round's prediction is the one logged
		*sst = screenStats{on: true, signal: chosenSig, pool: poolSig, chosen: chosenQ, candidates: float64(len(cands)) / float64(need)}
	}
	return out, nil
}

// GroupSignal is the probability that a group of g independent episodes, each a success with
// probability q, does not agree: 1 − q^g − (1 − q)^g.
func GroupSignal(q float64, g int) float64 {
	return max(0, 1-math.Pow(q, float64(g))-math.Pow(1-q, float64(g)))
}

// expertSuccess plays the screening agents on every task and returns, per task, the
// probability that the policy at the training temperature writes one of their successful
// episodes action token for action token: the sum over the distinct successful episodes
// (disjoint events), a lower bound of the policy's success. An episode that does not fit the
// token budget, or fails, counts nothing.
func (t *GRPOTrainer) expertSuccess(tasks []agrl.Task) ([]float64, error) {
	tok := t.policy.Tokenizer()
	lim := agrl.Limits{MaxTurns: t.cfg.MaxTurns}
	q := make([]float64, len(tasks))
	var seqs [][]int32
	var masks [][]uint8
	var at []int
	for i, task := range tasks {
		var mine [][]int32
		for _, agent := range t.cfg.ScreenAgents {
			ep, err := agrl.Play(t.env, task, agent, lim)
			if err != nil {
				return nil, fmt.Errorf("a screening agent on task %s: %w", task.ID, err)
			}
			if !ep.Correct {
				continue // a failed episode says nothing about how the policy would succeed
			}
			s, m := agrl.EncodeEpisode(tok, ep)
			if len(s) > t.resolved.MaxTokens || len(s) < 2 || slices.ContainsFunc(mine, func(o []int32) bool { return slices.Equal(o, s) }) {
				continue
			}
			mine = append(mine, s)
			seqs, masks, at = append(seqs, s), append(masks, m), append(at, i)
		}
	}
	if len(seqs) == 0 {
		return q, nil
	}
	scores, err := t.policy.Score(seqs, t.cfg.Temperature)
	if err != nil {
		return nil, err
	}
	for k, sc := range scores {
		lp := 0.0
		for j := 1; j < len(seqs[k]); j++ {
			if masks[k][j] == 1 {
				lp += float64(sc.LogProbs[j-1])
			}
		}
		q[at[k]] = min(1, q[at[k]]+math.Exp(lp))
	}
	return q, nil
}
