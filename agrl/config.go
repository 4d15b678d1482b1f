package agrl

import "fmt"

// The records below are the typed parts of GRPOConfig, the config.json of a run. Their fields
// are in the alphabetical order of their JSON names: config.json is written exactly as it was
// when these parts were generic maps (encoding/json sorts map keys), so run directories written
// before and after read back the same.

// LMRecord is the model configuration in config.json ("policy").
type LMRecord struct {
	// Backend is the compute backend configuration ("" means the learner's default).
	Backend string `json:"backend"`
	// Context is the context length in tokens.
	Context int `json:"context"`
	// Heads is the number of attention heads.
	Heads int `json:"heads"`
	// Layers is the number of transformer blocks.
	Layers int `json:"layers"`
	// MLP is the hidden width of the feed-forward blocks.
	MLP int `json:"mlp"`
	// Params is the number of trainable parameters.
	Params int `json:"params"`
	// Positions is the position encoding.
	Positions Positions `json:"positions"`
	// Seed seeds the initialisation.
	Seed uint64 `json:"seed"`
	// Vocab is the vocabulary size (the tokenizer's).
	Vocab int `json:"vocab"`
	// Width is the model width (embedding size).
	Width int `json:"width"`
}

// OptimizerRecord is an AdamW configuration in config.json ("optimizer", and the warm start's
// "sft"."optimizer").
type OptimizerRecord struct {
	// Beta1 and Beta2 are Adam's moment decays.
	Beta1 float64 `json:"beta1"`
	Beta2 float64 `json:"beta2"`
	// Eps is Adam's ε.
	Eps float64 `json:"eps"`
	// Floor is the final learning rate of a decaying schedule, as a fraction of LR.
	Floor float64 `json:"floor"`
	// GradClip is the global gradient-norm clip (0: none).
	GradClip float64 `json:"grad_clip"`
	// Horizon is the schedule's length in optimizer steps (0: the whole run).
	Horizon int `json:"horizon"`
	// LR is the peak learning rate.
	LR float64 `json:"lr"`
	// Name is "adamw".
	Name string `json:"name"`
	// Schedule is the learning-rate decay after warm-up.
	Schedule LRSchedule `json:"schedule"`
	// Warmup is the linear warm-up in optimizer steps.
	Warmup int `json:"warmup"`
	// WeightDecay is AdamW's decoupled weight decay.
	WeightDecay float64 `json:"weight_decay"`
}

// SFTRecord is the warm start's behaviour-cloning configuration in config.json.
type SFTRecord struct {
	// Batch is the number of episodes per step.
	Batch int `json:"batch"`
	// Optimizer is the SFT optimizer.
	Optimizer OptimizerRecord `json:"optimizer"`
	// Seed draws the batches.
	Seed uint64 `json:"seed"`
	// Steps is the number of SFT steps.
	Steps int `json:"steps"`
}

// DemoRecord is one source of warm-start demonstrations in config.json (a Demo without its agent).
type DemoRecord struct {
	// After is the fraction of the SFT steps before this source's episodes are drawn.
	After float64 `json:"after,omitempty"`
	// Name labels the source.
	Name string `json:"name"`
	// Weight is the source's share of the episodes (before normalisation).
	Weight float64 `json:"weight"`
}

// WarmStartRecord is the warm start in config.json ("warm_start"; absent without one).
type WarmStartRecord struct {
	// Demos lists the demonstration sources.
	Demos []DemoRecord `json:"demos"`
	// Episodes is the number of demonstration episodes played.
	Episodes int `json:"episodes"`
	// Mix is the demonstration tasks' difficulty mix (fractions); nil when it is the training
	// mix.
	Mix map[Difficulty]float64 `json:"mix,omitempty"`
	// SFT is the behaviour-cloning configuration.
	SFT SFTRecord `json:"sft"`
}

// TaskMix returns the training mix that the configuration records, seeded with its seed: the
// mix that drew the run's training and evaluation tasks.
func (c GRPOConfig) TaskMix() Mix { return mixOf(c.Mix, c.Seed) }

// mixOf builds a Mix from fractions by difficulty.
func mixOf(fr map[Difficulty]float64, seed uint64) Mix {
	m := NewMix(seed).Easy(0).Medium(0).Hard(0)
	for d, f := range fr {
		m = m.Weight(d, f)
	}
	return m
}

// record returns the optimizer settings for config.json.
func (o AdamW) record() OptimizerRecord {
	return OptimizerRecord{Name: "adamw", LR: o.lr, Beta1: o.beta1, Beta2: o.beta2, Eps: o.eps,
		WeightDecay: o.decay, GradClip: o.clip, Warmup: o.warmup, Schedule: o.schedule, Horizon: o.horizon, Floor: o.floor}
}

// record returns the model settings for config.json.
func (c LM) record() LMRecord {
	vocab := 0
	if c.tok != nil {
		vocab = c.Vocab()
	}
	return LMRecord{Vocab: vocab, Width: c.width, Layers: c.layers, Heads: c.heads, Context: c.context, MLP: c.mlp,
		Positions: c.positions, Backend: c.backend, Seed: c.seed, Params: c.Params()}
}

// record returns the SFT settings for config.json.
func (c SFTConfig) record() SFTRecord {
	return SFTRecord{Steps: c.steps, Batch: c.batch, Seed: c.seed, Optimizer: c.opt.record()}
}

// The configuration enums are written to JSON by name, as String writes them.

// MarshalText writes "std" or "none".
func (n AdvantageNorm) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// UnmarshalText reads "std" or "none".
func (n *AdvantageNorm) UnmarshalText(b []byte) error {
	return unmarshalEnum(b, "advantage normalisation", []AdvantageNorm{NormStd, NormNone}, n)
}

// MarshalText writes "k3" or "k1".
func (k KLEstimator) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads "k3" or "k1".
func (k *KLEstimator) UnmarshalText(b []byte) error {
	return unmarshalEnum(b, "KL estimator", []KLEstimator{K3, K1}, k)
}

// MarshalText writes "token-mean", "seq-mean" or "dr-grpo".
func (n LossNorm) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// UnmarshalText reads "token-mean", "seq-mean" or "dr-grpo".
func (n *LossNorm) UnmarshalText(b []byte) error {
	return unmarshalEnum(b, "loss normalisation", []LossNorm{TokenMean, SeqMean, ConstNorm}, n)
}

// MarshalText writes "constant", "cosine" or "linear".
func (s LRSchedule) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads "constant", "cosine" or "linear".
func (s *LRSchedule) UnmarshalText(b []byte) error {
	return unmarshalEnum(b, "learning-rate schedule", []LRSchedule{ConstantLR, CosineLR, LinearLR}, s)
}

// MarshalText writes "learned" or "rope".
func (p Positions) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads "learned" or "rope".
func (p *Positions) UnmarshalText(b []byte) error {
	return unmarshalEnum(b, "position encoding", []Positions{Learned, RoPE}, p)
}

// unmarshalEnum sets *v to the value among vals whose String is b.
func unmarshalEnum[T fmt.Stringer](b []byte, what string, vals []T, v *T) error {
	for _, x := range vals {
		if x.String() == string(b) {
			*v = x
			return nil
		}
	}
	return fmt.Errorf("agrl: unknown %s %q", what, b)
}
