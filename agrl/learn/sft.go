package learn

import (
	"agrl.dev/agrl"

	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/gomlx/gomlx/core/graph"
)

// SFTLoss is the behaviour-cloning loss: the mean negative log-likelihood of the target tokens
// whose "mask" value is 1 (the actions of expert episodes; never prompt or observation tokens).
// It divides by the whole batch's masked token count (LossInputs.Sums). Its metrics are "nll"
// (the loss), "accuracy" (the fraction of masked targets that are the most likely token) and
// "tokens" (the masked target count).
func SFTLoss(in LossInputs) (*graph.Node, map[string]*graph.Node) {
	mask := graph.Mul(in.Values["mask"], in.Valid) // [B, T-1]
	g := mask.Graph()
	n := graph.Max(in.Sums["mask"], graph.Const(g, float32(1)))
	loss := graph.Div(graph.Neg(graph.ReduceAllSum(graph.Mul(mask, in.LogProbs))), n)
	acc := graph.Div(graph.ReduceAllSum(graph.Mul(mask, in.Top1)), n)
	return loss, map[string]*graph.Node{"nll": loss, "accuracy": acc, "tokens": graph.ReduceAllSum(mask)}
}

// SFT trains the policy to imitate the expert episodes (text-level, as Play records them; each
// is tokenised once with EncodeEpisode, and only action tokens are in the loss). When env and
// dev tasks are given it evaluates greedy success on them (see EvalEvery). The optimizer state
// is kept in the policy's store under "/opt/sft".
func (p *Policy) SFT(c agrl.SFTConfig, episodes []*agrl.Episode, env agrl.Env, dev []agrl.Task) (agrl.SFTReport, error) {
	return p.sft(sftRun{cfg: c, episodes: episodes, env: env, dev: dev})
}

// SFTContext is SFT stopped by ctx: cancelling it stops after the current step and returns the
// report so far with ctx's error.
func (p *Policy) SFTContext(ctx context.Context, c agrl.SFTConfig, episodes []*agrl.Episode, env agrl.Env, dev []agrl.Task) (agrl.SFTReport, error) {
	return p.sft(sftRun{ctx: ctx, cfg: c, episodes: episodes, env: env, dev: dev})
}

// sftRun is one behaviour-cloning run.
type sftRun struct {
	ctx      context.Context // nil: never cancelled
	cfg      agrl.SFTConfig
	episodes []*agrl.Episode
	// tools are the environment's, which a pretrained model's chat format describes in the
	// prompt of every demonstration.
	tools []agrl.Tool
	// firstStep is a curriculum: episode i is drawn only from step firstStep[i] on (nil: every
	// episode from the first step).
	firstStep []int
	env       agrl.Env
	dev       []agrl.Task
	// done is the number of steps an interrupted run already took (its optimizer state is in
	// the store): the batches of those steps are drawn and skipped, so the run continues
	// exactly as if it had not stopped.
	done int
	// after, when set, is called after every step with the step number (checkpoints).
	after func(step int) error
}

func (p *Policy) sft(run sftRun) (agrl.SFTReport, error) { return sftOn(p, run) }

// sftOn is SFT of any trainee (the Tiny model, or a pretrained one in its own chat format) with
// a curriculum, cancellation and resumption (see sftRun). Batches draw uniformly among the
// episodes available at the step, so with every episode available from step 1 the draws are
// exactly SFT's.
func sftOn(p trainee, run sftRun) (agrl.SFTReport, error) {
	var rep agrl.SFTReport
	cfg, episodes, firstStep, env, dev := run.cfg, run.episodes, run.firstStep, run.env, run.dev
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	ctx := run.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	c := cfg.Spec()
	var seqs [][]int32
	var masks [][]float32
	var starts []int
	for i, ep := range episodes {
		tok, mask, err := p.demoTokens(run.tools, ep)
		if err != nil { // an action the policy's format cannot write: left out, and counted
			if rep.Unwritable == 0 {
				rep.UnwritableWhy = fmt.Sprintf("demonstration %d (%s): %v", i, ep.Task.ID, err)
			}
			rep.Unwritable++
			continue
		}
		if len(tok) > p.contextLen() {
			rep.Dropped++
			continue
		}
		m := make([]float32, len(mask))
		for i, v := range mask {
			m[i] = float32(v)
		}
		start := 1
		if firstStep != nil {
			start = max(firstStep[i], 1)
		}
		seqs, masks, starts = append(seqs, tok), append(masks, m), append(starts, start)
	}
	rep.Episodes = len(seqs)
	if len(seqs) == 0 {
		if rep.Unwritable > 0 {
			return rep, fmt.Errorf("agrl: SFT: none of the %d expert episodes can be trained on (%d too long for the context of %d tokens, %d not writable in the policy's format; the first: %s)",
				len(episodes), rep.Dropped, p.contextLen(), rep.Unwritable, rep.UnwritableWhy)
		}
		return rep, fmt.Errorf("agrl: SFT: none of the %d expert episodes fits the context of %d tokens", len(episodes), p.contextLen())
	}
	draws, err := newEpisodeDraws(starts, c.Seed)
	if err != nil {
		return rep, err
	}
	tr, err := p.newLearner("sft", SFTLoss, []string{"mask"}, c.Optimizer.ForSteps(c.Steps), 1)
	if err != nil {
		return rep, err
	}
	evaluate := func() error {
		if env == nil || len(dev) == 0 {
			return nil
		}
		ev, err := evaluateModel(p, env, dev, c.Eval)
		if err != nil {
			return err
		}
		rep.Evals = append(rep.Evals, agrl.EvalRecord{Step: tr.Steps(), Split: agrl.Dev, EvalResult: ev})
		return nil
	}
	for step := 1; step <= min(run.done, c.Steps); step++ {
		for range c.Batch {
			draws.next(step)
		}
	}
	var tokens int
	var seconds float64
	for step := run.done + 1; step <= c.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		b := TrainBatch{Values: map[string][][]float32{"mask": nil}}
		for range c.Batch {
			k := draws.next(step)
			b.Tokens = append(b.Tokens, seqs[k])
			b.Values["mask"] = append(b.Values["mask"], masks[k])
		}
		st, err := tr.Step(b)
		if err != nil {
			return rep, err
		}
		rep.Steps = append(rep.Steps, st)
		tokens += st.Tokens
		seconds += st.Seconds
		if c.Log != nil {
			c.Log(st)
		}
		if run.after != nil {
			if err := run.after(step); err != nil {
				return rep, err
			}
		}
		if c.EvalEvery > 0 && step%c.EvalEvery == 0 && step < c.Steps {
			if err := evaluate(); err != nil {
				return rep, err
			}
		}
	}
	if seconds > 0 {
		rep.TokensPerSecond = float64(tokens) / seconds
	}
	return rep, evaluate()
}

// Evaluate plays each task once with Rollout (batched; the zero RolloutOptions decodes
// greedily) and summarises the episodes with agrl.Evaluate: success, pass@1, turns, tool-call,
// tool-error and invalid-action rates, success by difficulty, terminations. The episodes are not
// scored by a rubric, so MeanReward is 0; EvaluatePolicy scores them.
func (p *Policy) Evaluate(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) (agrl.EvalResult, error) {
	return evaluateModel(p, env, tasks, opt)
}

// evaluateModel is Policy.Evaluate for any Model.
func evaluateModel(p Model, env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) (agrl.EvalResult, error) {
	const chunk = 64
	var eps []*agrl.Episode
	for lo := 0; lo < len(tasks); lo += chunk {
		hi := min(lo+chunk, len(tasks))
		o := opt
		o.Sampling.Seed += uint64(lo)
		got, _, err := p.Rollout(env, tasks[lo:hi], o)
		if err != nil {
			return agrl.EvalResult{}, err
		}
		eps = append(eps, got...)
	}
	return agrl.Evaluate(eps)
}

// episodeDraws draws the episodes of SFT batches: uniformly, with replacement, among those whose
// first step has come.
type episodeDraws struct {
	order     []int // episode indices by first step (stable: the identity without a curriculum)
	starts    []int // first step of each episode
	available int   // order[:available] may be drawn
	rng       *rand.Rand
}

func newEpisodeDraws(starts []int, seed uint64) (*episodeDraws, error) {
	order := make([]int, len(starts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return starts[order[a]] < starts[order[b]] })
	if len(order) == 0 || starts[order[0]] > 1 {
		return nil, errors.New("agrl: SFT: no episode is available at the first step")
	}
	return &episodeDraws{order: order, starts: starts, rng: rand.New(rand.NewPCG(seed, 0x736674))}, nil // "sft"
}

// next draws the index of one episode available at step (steps count from 1, in order).
func (d *episodeDraws) next(step int) int {
	for d.available < len(d.order) && d.starts[d.order[d.available]] <= step {
		d.available++
	}
	return d.order[d.rng.IntN(d.available)]
}
