package agrl

import (
	"errors"
	"fmt"
	"math"
)

// AdamW configures the optimizer of a Trainer: Adam with decoupled weight decay (Loshchilov &
// Hutter 2019) on the weight matrices and embeddings (not on biases and LayerNorm gains),
// global-norm gradient clipping, a linear warm-up and a learning-rate schedule. It is a value:
// setters return copies.
type AdamW struct {
	lr, beta1, beta2, eps, decay, clip float64
	warmup                             int
	schedule                           LRSchedule
	horizon                            int     // last step of the decay; 0: set by SFT / GRPO
	floor                              float64 // final learning rate as a fraction of lr
}

// LRSchedule is the shape of the learning rate after warm-up.
type LRSchedule int

const (
	// ConstantLR keeps the peak learning rate after warm-up (the default).
	ConstantLR LRSchedule = iota
	// CosineLR decays from the peak to Floor × peak along half a cosine, ending at the horizon
	// (Loshchilov & Hutter 2017, without restarts; TRL lr_scheduler_type="cosine", verl
	// optim.lr_scheduler_type=cosine with min_lr_ratio).
	CosineLR
	// LinearLR decays linearly from the peak to Floor × peak at the horizon (TRL "linear").
	LinearLR
)

// String returns "constant", "cosine" or "linear".
func (s LRSchedule) String() string {
	switch s {
	case ConstantLR:
		return "constant"
	case CosineLR:
		return "cosine"
	case LinearLR:
		return "linear"
	}
	return fmt.Sprintf("LRSchedule(%d)", int(s))
}

// NewAdamW returns the defaults: learning rate 3e-4, betas (0.9, 0.95), epsilon 1e-8, weight
// decay 0.01, gradient clipping at global norm 1 and no warm-up.
func NewAdamW() AdamW {
	return AdamW{lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, decay: 0.01, clip: 1}
}

// AdamWSpec is every setting of an AdamW value, as the learner reads it.
type AdamWSpec struct {
	LR, Beta1, Beta2, Eps, WeightDecay, ClipNorm float64
	Warmup                                       int
	Schedule                                     LRSchedule
	Horizon                                      int
	Floor                                        float64
}

// Spec returns the settings.
func (o AdamW) Spec() AdamWSpec {
	return AdamWSpec{LR: o.lr, Beta1: o.beta1, Beta2: o.beta2, Eps: o.eps, WeightDecay: o.decay, ClipNorm: o.clip,
		Warmup: o.warmup, Schedule: o.schedule, Horizon: o.horizon, Floor: o.floor}
}

// LR sets the peak learning rate.
func (o AdamW) LR(lr float64) AdamW { o.lr = lr; return o }

// Betas sets Adam's moment decay rates.
func (o AdamW) Betas(beta1, beta2 float64) AdamW { o.beta1, o.beta2 = beta1, beta2; return o }

// Eps sets Adam's epsilon.
func (o AdamW) Eps(eps float64) AdamW { o.eps = eps; return o }

// WeightDecay sets the decoupled weight decay (0: plain Adam).
func (o AdamW) WeightDecay(wd float64) AdamW { o.decay = wd; return o }

// ClipNorm sets the global gradient norm above which gradients are scaled down (0: no clipping).
func (o AdamW) ClipNorm(c float64) AdamW { o.clip = c; return o }

// Warmup sets the number of steps over which the learning rate rises linearly to LR.
func (o AdamW) Warmup(steps int) AdamW { o.warmup = steps; return o }

// Schedule sets how the learning rate decays after warm-up: to floor × LR (floor in [0, 1]) at
// step horizon, and stays there. A horizon of 0 means "the length of the run": SFT and GRPO fill
// it with their number of optimizer steps.
//
//	agrl.NewAdamW().LR(2e-3).Warmup(20).Schedule(agrl.CosineLR, 0, 0.1)
func (o AdamW) Schedule(s LRSchedule, horizon int, floor float64) AdamW {
	o.schedule, o.horizon, o.floor = s, horizon, floor
	return o
}

// ForSteps returns o with its decay ending at step steps (the run's length), unless a horizon
// was set.
func (o AdamW) ForSteps(steps int) AdamW {
	if o.horizon == 0 {
		o.horizon = steps
	}
	return o
}

// LearningRate returns the learning rate at (1-based) step: linear warm-up, then the schedule.
func (o AdamW) LearningRate(step int) float64 {
	if o.warmup > 0 && step < o.warmup {
		return o.lr * float64(step) / float64(o.warmup)
	}
	if o.schedule == ConstantLR || o.horizon <= o.warmup {
		return o.lr
	}
	start := max(o.warmup, 1)
	frac := min(1, float64(step-start)/float64(o.horizon-start))
	var k float64 // 1 at the peak, 0 at the floor
	switch o.schedule {
	case CosineLR:
		k = 0.5 * (1 + math.Cos(math.Pi*frac))
	case LinearLR:
		k = 1 - frac
	}
	return o.lr * (o.floor + (1-o.floor)*k)
}

// minNormalFloat32 is the smallest normal float32, 2^-126 (about 1.18e-38).
const minNormalFloat32 = 0x1p-126

// Validate reports every problem of the settings at once, or nil.
func (o AdamW) Validate() error {
	var errs []error
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case bad(o.lr) || o.lr <= 0 || o.lr > 1:
		errs = append(errs, fmt.Errorf("learning rate %v; want in (0, 1]", o.lr))
	case o.lr < minNormalFloat32:
		// The update runs in float32: a smaller rate rounds to 0 or a denormal, and nothing trains.
		errs = append(errs, fmt.Errorf("learning rate %v is 0 in float32 arithmetic; want >= %.3g", o.lr, minNormalFloat32))
	}
	if bad(o.beta1) || o.beta1 < 0 || o.beta1 >= 1 || bad(o.beta2) || o.beta2 < 0 || o.beta2 >= 1 {
		errs = append(errs, fmt.Errorf("betas (%v, %v); want in [0, 1)", o.beta1, o.beta2))
	}
	if bad(o.eps) || o.eps <= 0 {
		errs = append(errs, fmt.Errorf("epsilon %v; want > 0", o.eps))
	}
	if bad(o.decay) || o.decay < 0 {
		errs = append(errs, fmt.Errorf("weight decay %v; want >= 0", o.decay))
	}
	if bad(o.clip) || o.clip < 0 {
		errs = append(errs, fmt.Errorf("clip norm %v; want >= 0", o.clip))
	}
	if o.warmup < 0 {
		errs = append(errs, fmt.Errorf("warm-up %d steps; want >= 0", o.warmup))
	}
	if o.schedule < ConstantLR || o.schedule > LinearLR {
		errs = append(errs, fmt.Errorf("unknown learning-rate schedule %v", o.schedule))
	}
	if o.horizon < 0 {
		errs = append(errs, fmt.Errorf("schedule horizon %d steps; want >= 0 (0: the run's length)", o.horizon))
	}
	if bad(o.floor) || o.floor < 0 || o.floor > 1 {
		errs = append(errs, fmt.Errorf("schedule floor %v; want in [0, 1]", o.floor))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid AdamW: %w", errors.Join(errs...))
	}
	return nil
}
