package agrl

import (
	"errors"
	"fmt"
	"time"
)

// SFTConfig configures behaviour cloning on expert episodes, the warm start before RL. It is a
// value: setters return copies.
//
//	rep, err := pol.SFT(agrl.SFT().Steps(300).Batch(32), expertEpisodes, env, devTasks) // pol: a *learn.Policy
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

// SFTSpec is every setting of an SFTConfig, as the learner reads it.
type SFTSpec struct {
	Steps, Batch, EvalEvery int
	Optimizer               AdamW
	Seed                    uint64
	Eval                    RolloutOptions
	Log                     func(StepStats)
}

// Spec returns the settings.
func (c SFTConfig) Spec() SFTSpec {
	return SFTSpec{Steps: c.steps, Batch: c.batch, EvalEvery: c.evalEvery, Optimizer: c.opt, Seed: c.seed, Eval: c.eval, Log: c.log}
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
	// Evals holds the dev evaluations (Split Dev, Step the SFT step), in step order. The
	// episodes are not scored by a rubric: MeanReward is 0.
	Evals []EvalRecord `json:"evals,omitempty"`
	// Episodes is the number of expert episodes trained on; Dropped those that did not fit
	// the context; Unwritable those the policy's format cannot write (a pretrained model's
	// chat format has no form for an empty answer, a guesser's giving up), with the first
	// such reason.
	Episodes, Dropped, Unwritable int
	UnwritableWhy                 string `json:",omitempty"`
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

// StepStats reports one optimizer step.
type StepStats struct {
	Step     int                `json:"step"`
	Loss     float64            `json:"loss"`
	GradNorm float64            `json:"grad_norm"`
	LR       float64            `json:"lr"`
	Tokens   int                `json:"tokens"` // real (unpadded) target tokens in the batch
	Seconds  float64            `json:"seconds"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
}

// StepPhase says where a GRPO step is while it runs, for progress displays whose steps take
// long (a pretrained model's rollouts and updates on a CPU take minutes): the learner's
// GRPOTrainer.OnPhase reports each phase as it starts (nb.Live.UpdatePhase shows them).
type StepPhase struct {
	Step int
	// What is the phase in words: "rollouts: 16 episodes" (then "rollouts: 3 of 16 episodes
	// done" as each ends), "reference log-probs: 16 episodes", "update 1/2", and, for a
	// pretrained policy, "update 1/2: micro-batch 3 of 8 done" after each of its
	// micro-batches; during the evaluations of a run (before training, every EvalEvery steps
	// and after it), "evaluation before training, dev: 3 of 64 episodes done" as each episode ends,
	// Step then the step evaluated after (0 before training).
	What string
	// Evaluation is set for an evaluation's phases.
	Evaluation bool
	// Elapsed is the time since the step began (for an evaluation's phases, since the split's
	// evaluation began).
	Elapsed time.Duration
}

// SFTProgress is the progress of a warm start after one of its SFT steps (see GRPO.OnSFTStep).
type SFTProgress struct {
	// Stats is the step's loss, token accuracy ("accuracy" metric), learning rate and timing;
	// Stats.Step counts from 1 to Steps.
	Stats StepStats
	// Steps is the warm start's number of SFT steps.
	Steps int
	// Elapsed is the wall time since this process started (or resumed) the SFT, over the
	// steps Stats.Step−Resumed.
	Elapsed time.Duration
	// Resumed is the number of steps done before this process took over (0 unless resumed).
	Resumed int
}

// ETA estimates the time left: the remaining steps at the mean step time so far (0 when no
// step has been timed yet).
func (p SFTProgress) ETA() time.Duration {
	done := p.Stats.Step - p.Resumed
	if done <= 0 || p.Steps <= p.Stats.Step {
		return 0
	}
	return p.Elapsed / time.Duration(done) * time.Duration(p.Steps-p.Stats.Step)
}

// Metrics returns the step as a line of metrics ("step", "loss", "accuracy", "lr",
// "tokens_per_second"), for displays of training metrics such as nb.Live.
func (p SFTProgress) Metrics() Metrics {
	m := Metrics{MetricStep: float64(p.Stats.Step), MetricLoss: p.Stats.Loss, MetricLR: p.Stats.LR}
	if acc, ok := p.Stats.Metrics["accuracy"]; ok {
		m["accuracy"] = acc
	}
	if p.Stats.Seconds > 0 {
		m[MetricTokensPerSecond] = float64(p.Stats.Tokens) / p.Stats.Seconds
	}
	return m
}
