package agrl

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// GRPO configures Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath") for a
// tool-calling agent: every step samples G episodes of each of a few tasks, scores them with a
// rubric, turns rewards into group-relative advantages and takes a clipped policy-gradient step
// with a KL penalty to a frozen reference policy.
//
// GRPO is a value: every setter returns a copy, so a sweep derives variants from one base
// without aliasing. Validate reports every problem at once; the learner (agrl.dev/agrl/learn)
// builds the trainer from it.
//
//	base := agrl.NewGRPO().Env(calc.New()).Rubric(calc.Rubric()).
//		Policy(agrl.TinyLM()).WarmStart(agrl.SFT().Steps(300), agrl.Demo{Agent: calc.Expert(), Weight: 1}).
//		Group(8).KL(0.01).Steps(150).Out("runs/calc")
//	tr, err := learn.Build(base.KL(0.04).Out("runs/calc-kl0.04"))
//	res, err := tr.Train(ctx)
type GRPO struct{ s GRPOSpec }

// GRPOSpec is every setting of a GRPO value, as the learner (agrl.dev/agrl/learn) reads it.
// GRPO.Spec fills LM with the resolved policy configuration (TinyLM unless Policy set one,
// seeded with Seed). The fields mirror the setters of the same names.
type GRPOSpec struct {
	Env    Env
	Rubric *Rubric
	Mix    Mix
	LM     LM
	lmSet  bool
	From   string
	// Pretrained, when set, is the pretrained policy trained with LoRA (LM is then unused).
	Pretrained *PretrainedLM
	// warmStartless records WarmStartSteps(n > 0) called without a warm start (an error).
	warmStartless int

	SFT          *SFTConfig
	Demos        []Demo
	DemoEpisodes int
	DemoMix      *Mix

	Group, TasksPerStep          int
	ClipLow, ClipHigh            float64
	KL                           float64
	KLEstimator                  KLEstimator
	Optimizer                    AdamW
	Epochs, Minibatches          int
	AdvantageNorm                AdvantageNorm
	LossNorm                     LossNorm
	Temperature, EvalTemperature float64
	MaxTurns, MaxTokens          int
	MaxActionTokens              int
	DynamicSampling              bool
	Curriculum                   int
	Screen                       int
	ScreenAgents                 []Agent
	Gamma                        float64
	StopOnPlateau                int
	TurnAdvantages               bool
	MaskTruncated                bool
	EvalEvery, EvalTasks         int
	TrajectoriesEvery            int
	CheckpointEvery              int
	Seed                         uint64
	Out                          string
	Fresh                        bool
	Steps                        int
	OnStep                       func(Metrics)
	OnSFTStep                    func(SFTProgress)
	Progress                     func(string)
	// ResumeWithNewSettings: see the setter (agrl/resume.go).
	ResumeWithNewSettings bool
}

// Spec returns the settings, resolved for the run's Seed: LM is the policy configuration
// (TinyLM unless Policy set one) seeded with Seed, the warm start's SFT batches are drawn with
// Seed, and each Demo with a NewAgent has its Agent built from Seed.
func (g GRPO) Spec() GRPOSpec {
	s := g.s
	s.LM = g.policyConfig()
	s.Demos = append([]Demo(nil), g.s.Demos...)
	for i, d := range s.Demos {
		if d.NewAgent != nil {
			s.Demos[i].Agent = d.NewAgent(s.Seed)
		}
	}
	if s.SFT != nil {
		sft := s.SFT.Seed(s.Seed)
		s.SFT = &sft
	}
	return s
}

// Demo is one source of warm-start demonstrations: an agent (an expert, or a deliberately
// imperfect one) and the share of demonstration episodes it plays.
type Demo struct {
	// Name labels the source in logs ("expert", "guess").
	Name string `json:"name"`
	// Agent plays the demonstration episodes.
	Agent Agent `json:"-"`
	// NewAgent, when set, builds the agent from the run's seed instead (a seeded agent such as
	// calc.Guesser), so that GRPO.Seed reseeds it; it takes precedence over Agent.
	NewAgent func(seed uint64) Agent `json:"-"`
	// Weight is the share of episodes (normalised over all demos).
	Weight float64 `json:"weight"`
	// After is the fraction of the warm start's SFT steps (0 ≤ After < 1) that pass before
	// this source's episodes are drawn: a curriculum. 0, the default, draws them from the first
	// step. With the expert from the start and a guesser joining at After 0.5, the model first
	// learns to use the tool reliably and only then that it sometimes answers without it, so
	// the warm-started policy is imperfect in the choice, not in the skill.
	After float64 `json:"after,omitempty"`
}

// NewGRPO returns the defaults: group size 8, 4 tasks per step, clip ε 0.2 on both sides, KL
// 0.01 (k3), AdamW at 3e-4 with gradient clipping at 1, one epoch of one minibatch (so the
// importance ratio is exactly 1), group-std advantages, token-mean loss, temperatures 0.8
// (train) and 0.3 (eval), the env's turn limit, the whole context as token budget, the default
// 20/50/30 mix, evaluation of 64 tasks every 25 steps, trajectories every 25 steps, 100 steps,
// seed 1.
//
// These are generic defaults, close to TRL's, not tuned for any environment. The measured
// configurations are the environments' recipes (calc.Recipe, multihop.Recipe, …), which start
// from NewGRPO and set everything they depend on: start from a recipe to train.
func NewGRPO() GRPO {
	return GRPO{GRPOSpec{
		Mix: NewMix(1), Group: 8, TasksPerStep: 4, ClipLow: 0.2, ClipHigh: 0.2, KL: 0.01, KLEstimator: K3,
		Optimizer: NewAdamW(), Epochs: 1, Minibatches: 1, AdvantageNorm: NormStd, LossNorm: TokenMean,
		Temperature: 0.8, EvalTemperature: 0.3, EvalEvery: 25, EvalTasks: 64, TrajectoriesEvery: 25, CheckpointEvery: 25,
		Seed: 1, Steps: 100, DemoEpisodes: 512, Gamma: 1,
	}}
}

// Env sets the environment (required).
func (g GRPO) Env(env Env) GRPO { g.s.Env = env; return g }

// Rubric sets the reward rubric (required).
func (g GRPO) Rubric(r Rubric) GRPO { g.s.Rubric = &r; return g }

// Mix sets the difficulty mix of training tasks and of the evaluation splits. Its seed is
// replaced by the trainer's (see Seed).
func (g GRPO) Mix(m Mix) GRPO { g.s.Mix = m; return g }

// Policy sets the model configuration of a fresh policy (default TinyLM); it replaces a
// pretrained policy (Pretrained).
func (g GRPO) Policy(lm LM) GRPO { g.s.LM, g.s.lmSet, g.s.Pretrained = lm, true, nil; return g }

// From starts from the policy saved in a checkpoint directory (for instance an earlier run's
// checkpoints/ folder) instead of a fresh one; its configuration replaces Policy's.
func (g GRPO) From(checkpointDir string) GRPO { g.s.From = checkpointDir; return g }

// WarmStart runs behaviour cloning before GRPO on demonstration episodes played by the demos
// (shares by weight) on training tasks. Mixing an expert with an agent that answers without
// tools gives an imperfect start that GRPO must improve on, as a base model would be. The SFT
// batches are drawn with the run's Seed (SFTConfig's own seed applies to Policy.SFT alone).
func (g GRPO) WarmStart(sft SFTConfig, demos ...Demo) GRPO {
	g.s.SFT = &sft
	g.s.Demos = append([]Demo(nil), demos...)
	return g
}

// WarmStartSteps sets the SFT steps of the warm start, keeping its demonstrations and
// optimizer (a shorter or longer warm start of the same recipe); 0 removes the warm start.
// Without a warm start it is an error reported by Validate unless n is 0.
func (g GRPO) WarmStartSteps(n int) GRPO {
	if n == 0 {
		g.s.SFT, g.s.Demos = nil, nil
		return g
	}
	if g.s.SFT == nil {
		g.s.warmStartless = n
		return g
	}
	sft := g.s.SFT.Steps(n)
	g.s.SFT = &sft
	return g
}

// DemoMix sets the difficulty mix of the warm start's demonstration tasks (default: the training
// mix). Long demonstrations teach a small model to copy, so a mix heavier in hard tasks than the
// training mix can make a much better warm start (on the calculator, see docs/experiments.md).
// Its seed is replaced by the trainer's.
func (g GRPO) DemoMix(m Mix) GRPO { g.s.DemoMix = &m; return g }

// DemoEpisodes sets how many demonstration episodes the warm start plays (default 512).
func (g GRPO) DemoEpisodes(n int) GRPO { g.s.DemoEpisodes = n; return g }

// Group sets G, the episodes sampled per task (TRL num_generations, verl rollout.n); default 8.
func (g GRPO) Group(n int) GRPO { g.s.Group = n; return g }

// TasksPerStep sets the distinct tasks per step; a step samples TasksPerStep × Group episodes.
func (g GRPO) TasksPerStep(n int) GRPO { g.s.TasksPerStep = n; return g }

// ClipEps sets the PPO clip range on both sides, ratio ∈ [1−ε, 1+ε] (TRL epsilon, verl
// clip_ratio); default 0.2.
func (g GRPO) ClipEps(eps float64) GRPO { g.s.ClipLow, g.s.ClipHigh = eps, eps; return g }

// ClipHigh sets the upper clip ε alone: DAPO's "clip-higher" (Yu et al. 2025) recommends 0.28
// with a lower ε of 0.2 (TRL epsilon_high, verl clip_ratio_high).
func (g GRPO) ClipHigh(eps float64) GRPO { g.s.ClipHigh = eps; return g }

// ClipLow sets the lower clip ε alone (TRL epsilon, verl clip_ratio_low).
func (g GRPO) ClipLow(eps float64) GRPO { g.s.ClipLow = eps; return g }

// KL sets β, the weight of the KL penalty to the frozen reference policy (TRL beta, verl
// kl_loss_coef); 0 disables it: the trainer then keeps no reference policy and skips its
// forward pass. Default 0.01.
func (g GRPO) KL(beta float64) GRPO { g.s.KL = beta; return g }

// KLEstimator sets the per-token KL estimate: K3 (default; verl "low_var_kl") or K1.
func (g GRPO) KLEstimator(k KLEstimator) GRPO { g.s.KLEstimator = k; return g }

// LR sets the peak learning rate (TRL learning_rate, verl actor.optim.lr); default 3e-4.
func (g GRPO) LR(lr float64) GRPO { g.s.Optimizer = g.s.Optimizer.LR(lr); return g }

// Warmup sets the learning-rate warm-up in steps (verl lr_warmup_steps); default 0.
func (g GRPO) Warmup(steps int) GRPO { g.s.Optimizer = g.s.Optimizer.Warmup(steps); return g }

// Schedule sets the learning-rate decay after warm-up (TRL lr_scheduler_type, verl
// optim.lr_scheduler_type): ConstantLR (default), CosineLR or LinearLR down to floor × LR over the
// run's optimizer steps (Steps × Epochs × Minibatches).
func (g GRPO) Schedule(s LRSchedule, floor float64) GRPO {
	g.s.Optimizer = g.s.Optimizer.Schedule(s, 0, floor)
	return g
}

// Optimizer replaces the whole AdamW configuration (weight decay, betas, gradient clipping…).
func (g GRPO) Optimizer(o AdamW) GRPO { g.s.Optimizer = o; return g }

// GradClip sets the global gradient-norm clip (TRL max_grad_norm, verl grad_clip); default 1.
func (g GRPO) GradClip(c float64) GRPO { g.s.Optimizer = g.s.Optimizer.ClipNorm(c); return g }

// Epochs sets the passes over each step's episodes (TRL num_iterations, verl ppo_epochs);
// default 1.
func (g GRPO) Epochs(n int) GRPO { g.s.Epochs = n; return g }

// Minibatches sets the optimizer steps per epoch, each on an equal share of the episodes (verl
// ppo_mini_batch_size = episodes / Minibatches); default 1.
func (g GRPO) Minibatches(n int) GRPO { g.s.Minibatches = n; return g }

// AdvantageNorm sets NormStd (default; GRPO) or NormNone (Dr. GRPO; TRL scale_rewards).
func (g GRPO) AdvantageNorm(n AdvantageNorm) GRPO { g.s.AdvantageNorm = n; return g }

// LossNorm sets TokenMean (default; DAPO), SeqMean (original GRPO) or ConstNorm (Dr. GRPO,
// dividing by the token budget) (TRL loss_type, verl loss_agg_mode).
func (g GRPO) LossNorm(n LossNorm) GRPO { g.s.LossNorm = n; return g }

// Temperature sets the sampling temperature of training rollouts (default 0.8); log-probs are
// scored at the same temperature.
func (g GRPO) Temperature(t float64) GRPO { g.s.Temperature = t; return g }

// EvalTemperature sets the sampling temperature of evaluations (default 0.3; 0 is greedy).
func (g GRPO) EvalTemperature(t float64) GRPO { g.s.EvalTemperature = t; return g }

// MaxTurns caps the actions per episode (0: the environment's limit).
func (g GRPO) MaxTurns(n int) GRPO { g.s.MaxTurns = n; return g }

// MaxTokens sets the per-episode token budget: prompt, actions and observations (0: the
// model's context). It is one budget for the whole episode, never per turn.
func (g GRPO) MaxTokens(n int) GRPO { g.s.MaxTokens = n; return g }

// MaxActionTokens caps the tokens of one action (0: only the episode budget caps it).
func (g GRPO) MaxActionTokens(n int) GRPO { g.s.MaxActionTokens = n; return g }

// DynamicSampling drops groups whose rewards are all equal (they carry no signal) and refills
// the step with new tasks, up to three extra rollouts (DAPO's dynamic sampling; TRL has none,
// verl filter_groups).
func (g GRPO) DynamicSampling(on bool) GRPO { g.s.DynamicSampling = on; return g }

// Curriculum turns on an adaptive task mix over the last window steps (0: off, the Mix as
// set): each step draws its tasks with the Mix's weights scaled by how often groups of each
// difficulty carried signal over those steps (CurriculumWeights), so that as easy tasks
// saturate the steps go to the difficulties whose groups still disagree. The weights and the
// counts they come from are logged (MetricCurriculumWeight, …). Evaluation splits keep the
// Mix's own proportions.
func (g GRPO) Curriculum(window int) GRPO { g.s.Curriculum = window; return g }

// Screen turns on task screening (0: off, the default): each step draws up to pool candidates
// for every task it needs from the training stream (a few at a time, stopping once the best
// would mostly give groups with signal: learn.ScreenChunk) and estimates, for each, how often
// the current policy would succeed: it plays the agents (the environment's expert, and any
// other agent whose successes the policy may have learned, such as a guesser) on the task, and
// sums the probabilities, at the training temperature, that the policy writes each distinct
// successful episode's actions token for token. The step keeps the candidates whose groups of G are most
// likely to disagree (largest 1 − q^G − (1 − q)^G) and rolls out only those. Solved tasks (q
// near 1) and hopeless ones (q near 0) carry no signal in a group, so this is a curriculum that
// follows the policy task by task, at the cost of one forward pass over pool × tasks short
// scripted episodes (no sampling). q is a lower bound where other action sequences also
// succeed: give every agent whose way of succeeding the policy imitates. The predicted share
// of groups with signal is logged (MetricScreenSignal); frac_reward_zero_std stays the
// measured one. It is deterministic in the weights, so a resumed run screens exactly as an
// uninterrupted one.
func (g GRPO) Screen(pool int, agents ...Agent) GRPO {
	g.s.Screen, g.s.ScreenAgents = pool, append([]Agent(nil), agents...)
	return g
}

// StopOnPlateau ends GRPO early, before Steps, once dev success has not improved for patience
// periodic evaluations in a row (agrl.Plateaued over the warm start's dev success and every
// EvalEvery-step evaluation; 0: off, the default). The final evaluation and summary follow as
// usual; summary.json says why it stopped. It needs EvalEvery > 0.
func (g GRPO) StopOnPlateau(patience int) GRPO { g.s.StopOnPlateau = patience; return g }

// Gamma sets the discount γ (0 < γ ≤ 1; default 1) of the returns that advantages are computed
// from (Rubric.Returns): with γ < 1 a reward counts less the more turns lie between the action
// and it, so shorter solutions earn more. With γ = 1 and no per-turn rubric components the
// returns are the episode rewards, as in plain GRPO.
func (g GRPO) Gamma(gamma float64) GRPO { g.s.Gamma = gamma; return g }

// TurnAdvantages gives each turn's tokens the advantage of its own return (from that turn on,
// Rubric.Returns) against the group's baseline (agrl.GroupTurnAdvantages), instead of one
// advantage per episode: turn-level credit, which only changes anything with per-turn rubric
// components (Rubric.AddTurn) or γ < 1.
func (g GRPO) TurnAdvantages(on bool) GRPO { g.s.TurnAdvantages = on; return g }

// MaskTruncated leaves episodes cut off by the token budget out of the loss instead of training
// on their (penalised) reward (DAPO's overlong filtering).
func (g GRPO) MaskTruncated(on bool) GRPO { g.s.MaskTruncated = on; return g }

// EvalEvery evaluates on the dev split every n steps (0: only before and after training).
func (g GRPO) EvalEvery(n int) GRPO { g.s.EvalEvery = n; return g }

// EvalTasks sets the number of tasks of each evaluation split (dev, test, OOD); default 64.
func (g GRPO) EvalTasks(n int) GRPO { g.s.EvalTasks = n; return g }

// TrajectoriesEvery saves sampled episodes (successes and failures) every n steps (0: never).
func (g GRPO) TrajectoriesEvery(n int) GRPO { g.s.TrajectoriesEvery = n; return g }

// CheckpointEvery saves a checkpoint every n steps (0: only at the end); default 25.
func (g GRPO) CheckpointEvery(n int) GRPO { g.s.CheckpointEvery = n; return g }

// Seed seeds everything: model initialisation, task draws, sampling.
func (g GRPO) Seed(seed uint64) GRPO { g.s.Seed = seed; return g }

// Out sets the run directory (required; learn.Build locks it, see LockRun, and resumes the run
// it holds, see ResumeWithNewSettings).
func (g GRPO) Out(dir string) GRPO { g.s.Out = dir; return g }

// Fresh starts the run afresh: Build first empties the run directory (ClearRun, which refuses
// a directory that is not a run) instead of resuming the run it holds. For notebooks that train
// again each time they run. Default false: an existing run is resumed, or refused.
func (g GRPO) Fresh(on bool) GRPO { g.s.Fresh = on; return g }

// Steps sets the number of GRPO steps; default 100.
func (g GRPO) Steps(n int) GRPO { g.s.Steps = n; return g }

// OnStep sets a callback that receives every step's metrics (for live plots).
func (g GRPO) OnStep(fn func(Metrics)) GRPO { g.s.OnStep = fn; return g }

// OnSFTStep sets a callback that receives every warm-start SFT step's progress (the warm start
// is most of a run's time on a CPU: progress bars with a time estimate, live loss curves).
func (g GRPO) OnSFTStep(fn func(SFTProgress)) GRPO { g.s.OnSFTStep = fn; return g }

// Progress sets a callback that receives one-line progress messages (SFT, evaluation,
// checkpoints); nil is silent.
func (g GRPO) Progress(fn func(string)) GRPO { g.s.Progress = fn; return g }

// Validate reports every problem of the configuration at once, or nil.
func (g GRPO) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	if g.s.Env == nil {
		add("no environment (call Env)")
	}
	if g.s.Rubric == nil {
		add("no rubric (call Rubric)")
	} else if err := g.s.Rubric.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := g.s.Mix.Validate(); err != nil {
		errs = append(errs, err)
	}
	if g.s.DemoMix != nil {
		if err := g.s.DemoMix.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("demo mix: %w", err))
		}
	}
	errs = append(errs, g.pretrainedProblems()...)
	if g.s.From == "" && g.s.Pretrained == nil {
		if err := g.policyConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if _, err := os.Stat(g.s.From); err != nil && g.s.From != "" {
		add("checkpoint to start from: %v", err)
	}
	if g.s.SFT != nil {
		if err := g.s.SFT.Validate(); err != nil {
			errs = append(errs, err)
		}
		if len(g.s.Demos) == 0 {
			add("warm start without demonstrations (pass at least one Demo)")
		}
		for i, d := range g.s.Demos {
			if d.Agent == nil && d.NewAgent == nil {
				add("demo %d (%q) has no agent", i, d.Name)
			}
			if bad(d.Weight) || d.Weight < 0 {
				add("demo %d (%q) has weight %v", i, d.Name, d.Weight)
			}
			if bad(d.After) || d.After < 0 || d.After >= 1 {
				add("demo %d (%q) joins after %v of the SFT steps; want 0 <= after < 1", i, d.Name, d.After)
			}
		}
		if len(g.s.Demos) > 0 && !slices.ContainsFunc(g.s.Demos, func(d Demo) bool { return d.After == 0 && d.Weight > 0 }) {
			add("no demonstration source with a positive weight starts at the first SFT step (after = 0)")
		}
		if g.s.DemoEpisodes < 1 {
			add("demo episodes %d; want >= 1", g.s.DemoEpisodes)
		}
	}
	if g.s.warmStartless > 0 {
		add("WarmStartSteps(%d) without a warm start (call WarmStart first)", g.s.warmStartless)
	}
	if g.s.Group < 2 {
		add("group size %d; GRPO needs >= 2 samples per task", g.s.Group)
	}
	if g.s.TasksPerStep < 1 {
		add("tasks per step %d; want >= 1", g.s.TasksPerStep)
	}
	if bad(g.s.ClipLow) || g.s.ClipLow <= 0 || g.s.ClipLow >= 1 {
		add("clip ε low %v; want in (0, 1)", g.s.ClipLow)
	}
	if bad(g.s.ClipHigh) || g.s.ClipHigh <= 0 {
		add("clip ε high %v; want > 0", g.s.ClipHigh)
	}
	if bad(g.s.KL) || g.s.KL < 0 {
		add("KL coefficient %v; want >= 0", g.s.KL)
	}
	if g.s.KLEstimator != K1 && g.s.KLEstimator != K3 {
		add("unknown KL estimator %d", g.s.KLEstimator)
	}
	if err := g.s.Optimizer.Validate(); err != nil {
		errs = append(errs, err)
	}
	if g.s.Epochs < 1 {
		add("epochs %d; want >= 1", g.s.Epochs)
	}
	if g.s.Minibatches < 1 || g.s.Minibatches > g.s.Group*g.s.TasksPerStep {
		add("minibatches %d; want 1..%d (the episodes per step)", g.s.Minibatches, g.s.Group*g.s.TasksPerStep)
	}
	if g.s.AdvantageNorm != NormStd && g.s.AdvantageNorm != NormNone {
		add("unknown advantage normalisation %d", g.s.AdvantageNorm)
	}
	if g.s.LossNorm != TokenMean && g.s.LossNorm != SeqMean && g.s.LossNorm != ConstNorm {
		add("unknown loss normalisation %d", g.s.LossNorm)
	}
	if bad(g.s.Temperature) || g.s.Temperature <= 0 {
		add("train temperature %v; want > 0 (GRPO needs sampling)", g.s.Temperature)
	}
	if bad(g.s.EvalTemperature) || g.s.EvalTemperature < 0 {
		add("eval temperature %v; want >= 0", g.s.EvalTemperature)
	}
	if !(g.s.Gamma > 0 && g.s.Gamma <= 1) {
		add("discount γ %v; want 0 < γ <= 1", g.s.Gamma)
	}
	if g.s.StopOnPlateau < 0 || g.s.StopOnPlateau > 0 && g.s.EvalEvery <= 0 {
		add("stop on plateau after %d evaluations; want >= 0, and evaluations (EvalEvery > 0) to watch", g.s.StopOnPlateau)
	}
	if g.s.Curriculum < 0 {
		add("curriculum window %d; want >= 0 steps (0: off)", g.s.Curriculum)
	}
	if g.s.Screen < 0 || g.s.Screen == 1 {
		add("screening pool %d; want 0 (off) or >= 2 candidates per task", g.s.Screen)
	}
	if g.s.Screen > 1 && (len(g.s.ScreenAgents) == 0 || slices.Contains(g.s.ScreenAgents, nil)) {
		add("screening needs agents (the environment's expert) to score, and no nil one")
	}
	if g.s.MaxTurns < 0 || g.s.MaxTokens < 0 || g.s.MaxActionTokens < 0 {
		add("negative turn or token limits (%d, %d, %d)", g.s.MaxTurns, g.s.MaxTokens, g.s.MaxActionTokens)
	}
	if g.s.LossNorm == ConstNorm && g.s.MaxTokens == 0 && g.s.From == "" && g.s.Pretrained == nil && g.policyConfig().ContextLen() <= 0 {
		add("dr-grpo loss normalisation needs a token budget")
	}
	if g.s.EvalEvery < 0 || g.s.TrajectoriesEvery < 0 || g.s.CheckpointEvery < 0 {
		add("negative EvalEvery, TrajectoriesEvery or CheckpointEvery")
	}
	if g.s.EvalTasks < 1 {
		add("eval tasks %d; want >= 1", g.s.EvalTasks)
	}
	if g.s.Steps < 0 {
		add("steps %d; want >= 0", g.s.Steps)
	}
	if strings.TrimSpace(g.s.Out) == "" {
		add("no run directory (call Out)")
	}
	if err := g.freshProblem(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid GRPO configuration: %w", errors.Join(errs...))
	}
	return nil
}

func (g GRPO) policyConfig() LM {
	if g.s.lmSet {
		return g.s.LM.Seed(g.s.Seed)
	}
	return TinyLM().Seed(g.s.Seed)
}

// GRPOConfig is the resolved configuration of a GRPO run, as written to config.json and read
// back by OpenRun (Run.Config). Every field is typed; the JSON is the same as when the nested
// parts were generic maps (see LMRecord).
type GRPOConfig struct {
	Env             string                 `json:"env"`
	EnvTools        []Tool                 `json:"env_tools"`
	Rubric          []RewardTerm           `json:"rubric"`
	Mix             map[Difficulty]float64 `json:"mix"`
	Policy          LMRecord               `json:"policy"`
	Pretrained      *PretrainedRecord      `json:"pretrained,omitempty"`
	From            string                 `json:"from,omitempty"`
	WarmStart       *WarmStartRecord       `json:"warm_start,omitempty"`
	Group           int                    `json:"group"`
	TasksPerStep    int                    `json:"tasks_per_step"`
	ClipLow         float64                `json:"clip_low"`
	ClipHigh        float64                `json:"clip_high"`
	KL              float64                `json:"kl"`
	KLEstimator     KLEstimator            `json:"kl_estimator"`
	Optimizer       OptimizerRecord        `json:"optimizer"`
	Epochs          int                    `json:"epochs"`
	Minibatches     int                    `json:"minibatches"`
	AdvantageNorm   AdvantageNorm          `json:"advantage_norm"`
	LossNorm        LossNorm               `json:"loss_norm"`
	Temperature     float64                `json:"temperature"`
	EvalTemperature float64                `json:"eval_temperature"`
	MaxTurns        int                    `json:"max_turns"`
	MaxTokens       int                    `json:"max_tokens"`
	MaxActionTokens int                    `json:"max_action_tokens"`
	DynamicSampling bool                   `json:"dynamic_sampling"`
	Curriculum      int                    `json:"curriculum,omitempty"`
	Screen          int                    `json:"screen,omitempty"`
	Gamma           float64                `json:"gamma,omitempty"` // omitted when 1
	StopOnPlateau   int                    `json:"stop_on_plateau,omitempty"`
	TurnAdvantages  bool                   `json:"turn_advantages,omitempty"`
	MaskTruncated   bool                   `json:"mask_truncated"`
	EvalEvery       int                    `json:"eval_every"`
	EvalTasks       int                    `json:"eval_tasks"`
	Trajectories    int                    `json:"trajectories_every"`
	CheckpointEvery int                    `json:"checkpoint_every"`
	Seed            uint64                 `json:"seed"`
	Steps           int                    `json:"steps"`
	Out             string                 `json:"out"`
}

// Resolved returns the configuration with every default filled in, as config.json records it.
func (g GRPO) Resolved() GRPOConfig {
	c := GRPOConfig{
		Group: g.s.Group, TasksPerStep: g.s.TasksPerStep, ClipLow: g.s.ClipLow, ClipHigh: g.s.ClipHigh,
		KL: g.s.KL, KLEstimator: g.s.KLEstimator, Optimizer: g.s.Optimizer.record(), Epochs: g.s.Epochs,
		Minibatches: g.s.Minibatches, AdvantageNorm: g.s.AdvantageNorm, LossNorm: g.s.LossNorm,
		Temperature: g.s.Temperature, EvalTemperature: g.s.EvalTemperature, MaxTurns: g.s.MaxTurns,
		MaxTokens: g.s.MaxTokens, MaxActionTokens: g.s.MaxActionTokens, DynamicSampling: g.s.DynamicSampling,
		Curriculum: g.s.Curriculum, Screen: g.s.Screen, TurnAdvantages: g.s.TurnAdvantages, StopOnPlateau: g.s.StopOnPlateau,
		MaskTruncated: g.s.MaskTruncated, EvalEvery: g.s.EvalEvery, EvalTasks: g.s.EvalTasks,
		Trajectories: g.s.TrajectoriesEvery, CheckpointEvery: g.s.CheckpointEvery, Seed: g.s.Seed, Steps: g.s.Steps,
		Out: g.s.Out, From: g.s.From,
	}
	if g.s.Env != nil {
		c.Env, c.EnvTools = g.s.Env.Name(), g.s.Env.Tools()
		if c.MaxTurns == 0 {
			c.MaxTurns = g.s.Env.MaxTurns()
		}
	}
	if g.s.Rubric != nil {
		for _, name := range g.s.Rubric.Names() {
			c.Rubric = append(c.Rubric, RewardTerm{Name: name, Weight: g.s.Rubric.Weights()[name]})
		}
	}
	if g.s.Gamma != 1 {
		c.Gamma = g.s.Gamma
	}
	c.Mix = g.s.Mix.Fractions()
	if g.s.Pretrained != nil {
		c.Pretrained = g.s.Pretrained.record()
		c.Policy = LMRecord{Backend: g.s.Pretrained.backend} // no Tiny model; MaxTokens 0 is the model's context
	} else {
		c.Policy = g.policyConfig().record()
		if c.MaxTokens == 0 {
			c.MaxTokens = g.policyConfig().ContextLen()
		}
	}
	if g.s.SFT != nil {
		ws := &WarmStartRecord{SFT: g.s.SFT.record(), Episodes: g.s.DemoEpisodes}
		for _, d := range g.s.Demos {
			ws.Demos = append(ws.Demos, DemoRecord{Name: d.Name, Weight: d.Weight, After: d.After})
		}
		if g.s.DemoMix != nil {
			ws.Mix = g.s.DemoMix.Fractions()
		}
		c.WarmStart = ws
	}
	return c
}
