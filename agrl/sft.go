package agrl

import (
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

// SFTConfig configures behaviour cloning on expert episodes, the warm start before RL. It is a
// value: setters return copies.
//
//	rep, err := agrl.SFT().Steps(300).Batch(32).Run(pol, expertEpisodes, env, devTasks)
type SFTConfig struct {
	steps, batch, evalEvery int
	opt                     AdamW
	seed                    uint64
	eval                    RolloutOptions
	log                     func(StepStats)
}

// SFT returns the defaults: 300 steps of 32 episodes, AdamW at peak learning rate 3e-3 with 20
// warm-up steps and a cosine decay to 3e-4 at the last step, evaluation on the dev tasks at the
// end only, greedy decoding.
func SFT() SFTConfig {
	return SFTConfig{steps: 300, batch: 32, opt: NewAdamW().LR(3e-3).Warmup(20).Schedule(CosineLR, 0, 0.1), seed: 1}
}

// Steps sets the number of optimizer steps.
func (c SFTConfig) Steps(n int) SFTConfig { c.steps = n; return c }

// Batch sets the number of episodes per step.
func (c SFTConfig) Batch(n int) SFTConfig { c.batch = n; return c }

// Optimizer sets the AdamW settings.
func (c SFTConfig) Optimizer(o AdamW) SFTConfig { c.opt = o; return c }

// Seed sets the seed that draws the batches.
func (c SFTConfig) Seed(seed uint64) SFTConfig { c.seed = seed; return c }

// EvalEvery evaluates greedy success on the dev tasks every n steps (0: at the end only).
func (c SFTConfig) EvalEvery(n int) SFTConfig { c.evalEvery = n; return c }

// Eval sets how dev episodes are played (the zero value: greedy, the env's limits, the whole
// context as budget).
func (c SFTConfig) Eval(o RolloutOptions) SFTConfig { c.eval = o; return c }

// Log sets a function called after every step (progress bars, metrics files).
func (c SFTConfig) Log(fn func(StepStats)) SFTConfig { c.log = fn; return c }

// Validate reports every problem of the settings at once, or nil.
func (c SFTConfig) Validate() error {
	var errs []error
	if c.steps <= 0 {
		errs = append(errs, fmt.Errorf("steps %d; want > 0", c.steps))
	}
	if c.batch <= 0 {
		errs = append(errs, fmt.Errorf("batch %d; want > 0", c.batch))
	}
	if c.evalEvery < 0 {
		errs = append(errs, fmt.Errorf("eval every %d; want >= 0", c.evalEvery))
	}
	if err := c.opt.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.eval.Sampling.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid SFT: %w", errors.Join(errs...))
	}
	return nil
}

// SFTReport is what a behaviour-cloning run measured.
type SFTReport struct {
	// Steps holds every step's loss, token accuracy ("accuracy" metric) and timing.
	Steps []StepStats `json:"steps"`
	// Evals holds the dev evaluations, in step order.
	Evals []EvalReport `json:"evals,omitempty"`
	// Episodes is the number of expert episodes trained on; Dropped those that did not fit
	// the context.
	Episodes, Dropped int
	// TokensPerSecond is the training throughput over all steps (target tokens).
	TokensPerSecond float64 `json:"tokens_per_second"`
}

// Final returns the last step's stats.
func (r SFTReport) Final() StepStats {
	if len(r.Steps) == 0 {
		return StepStats{}
	}
	return r.Steps[len(r.Steps)-1]
}

// Run trains the policy to imitate the expert episodes (text-level, as Play records them; each
// is tokenised once with EncodeEpisode, and only action tokens are in the loss). When env and
// dev tasks are given it evaluates greedy success on them (see EvalEvery). The optimizer state
// is kept in the policy's store under "/opt/sft".
func (c SFTConfig) Run(p *Policy, episodes []*Episode, env Env, dev []Task) (SFTReport, error) {
	return c.run(p, episodes, nil, env, dev)
}

// run is Run with a curriculum: episode i is drawn only from step firstStep[i] on (nil: every
// episode from the first step). Batches draw uniformly among the episodes available at the
// step, so with every episode available from step 1 the draws are exactly Run's.
func (c SFTConfig) run(p *Policy, episodes []*Episode, firstStep []int, env Env, dev []Task) (SFTReport, error) {
	var rep SFTReport
	if err := c.Validate(); err != nil {
		return rep, err
	}
	var seqs [][]int32
	var masks [][]float32
	var starts []int
	for i, ep := range episodes {
		tok, mask := EncodeEpisode(p.tok, ep)
		if len(tok) > p.cfg.context {
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
		return rep, fmt.Errorf("agrl: SFT: none of the %d expert episodes fits the context of %d tokens", len(episodes), p.cfg.context)
	}
	draws, err := newEpisodeDraws(starts, c.seed)
	if err != nil {
		return rep, err
	}
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, c.opt.withHorizon(c.steps), 1)
	if err != nil {
		return rep, err
	}
	evaluate := func() error {
		if env == nil || len(dev) == 0 {
			return nil
		}
		ev, err := p.Evaluate(env, dev, c.eval)
		if err != nil {
			return err
		}
		ev.Step = tr.Steps()
		rep.Evals = append(rep.Evals, ev)
		return nil
	}
	var tokens int
	var seconds float64
	for step := 1; step <= c.steps; step++ {
		b := TrainBatch{Values: map[string][][]float32{"mask": nil}}
		for range c.batch {
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
		if c.log != nil {
			c.log(st)
		}
		if c.evalEvery > 0 && step%c.evalEvery == 0 && step < c.steps {
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

// ExpertEpisodes plays every task with a text-level agent (an environment's expert) through
// Play and returns the episodes that ended with a correct answer, the material for SFT.
func ExpertEpisodes(env Env, expert Agent, tasks []Task, lim Limits) ([]*Episode, error) {
	var out []*Episode
	for _, t := range tasks {
		ep, err := Play(env, t, expert, lim)
		if err != nil {
			return nil, err
		}
		if ep.Correct {
			out = append(out, ep)
		}
	}
	if len(out) == 0 && len(tasks) > 0 {
		return nil, fmt.Errorf("agrl: the expert solved none of %d %s tasks", len(tasks), env.Name())
	}
	return out, nil
}

// EvalReport summarises the policy on a set of tasks.
type EvalReport struct {
	Step     int     `json:"step"`
	Episodes int     `json:"episodes"`
	Success  float64 `json:"success"` // fraction answered correctly
	// MeanTurns is the mean number of actions; InvalidRate the fraction of actions that broke
	// the protocol; ToolCallRate the mean tool calls per episode.
	MeanTurns    float64             `json:"mean_turns"`
	InvalidRate  float64             `json:"invalid_rate"`
	ToolCallRate float64             `json:"tool_call_rate"`
	Terminations map[Termination]int `json:"terminations"`
	Stats        RolloutStats        `json:"rollout"`
}

// Evaluate plays the tasks with Rollout (batched; the zero RolloutOptions decodes greedily)
// and summarises success, turns, invalid actions, tool calls and terminations.
func (p *Policy) Evaluate(env Env, tasks []Task, opt RolloutOptions) (EvalReport, error) {
	rep := EvalReport{Terminations: map[Termination]int{}}
	const chunk = 64
	turns, invalid, tools := 0, 0, 0
	for lo := 0; lo < len(tasks); lo += chunk {
		hi := min(lo+chunk, len(tasks))
		o := opt
		o.Sampling.Seed += uint64(lo)
		eps, st, err := p.Rollout(env, tasks[lo:hi], o)
		if err != nil {
			return rep, err
		}
		rep.Stats.Episodes += st.Episodes
		rep.Stats.Steps += st.Steps
		rep.Stats.Tokens += st.Tokens
		rep.Stats.Generated += st.Generated
		rep.Stats.Seconds += st.Seconds
		for _, ep := range eps {
			rep.Episodes++
			if ep.Correct {
				rep.Success++
			}
			turns += len(ep.Turns)
			invalid += ep.InvalidActions()
			tools += ep.ToolCalls()
			rep.Terminations[ep.Termination]++
		}
	}
	if rep.Episodes > 0 {
		n := float64(rep.Episodes)
		rep.Success /= n
		rep.MeanTurns = float64(turns) / n
		rep.ToolCallRate = float64(tools) / n
	}
	if turns > 0 {
		rep.InvalidRate = float64(invalid) / float64(turns)
	}
	return rep, nil
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
