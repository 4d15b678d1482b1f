package agrl

// Metric names of metrics.jsonl: the GRPO trainer (agrl.dev/agrl/learn) logs every one of them at
// every step, under these stable names; notebooks and plots read them back with Run.Series.
// Rates and fractions are in 0..1; per-token quantities are means over the policy's own tokens
// (never prompt or tool output).
const (
	// MetricStep is the GRPO step, counted from 1.
	MetricStep = "step"

	// MetricReward is the mean rubric reward of the step's episodes; MetricRewardStd its
	// standard deviation. Each rubric term is logged as well, under MetricRewardTerm(name).
	MetricReward    = "reward/mean"
	MetricRewardStd = "reward/std"
	// MetricSuccess is the fraction of episodes answered correctly.
	MetricSuccess = "success"
	// MetricResponseLength is the mean number of policy tokens per episode.
	MetricResponseLength = "response_length"
	// MetricTurns is the mean number of actions per episode.
	MetricTurns = "turns"
	// MetricTruncated is the fraction of episodes cut off by the token budget.
	MetricTruncated = "truncated"
	// MetricToolCallRate is the fraction of episodes that called at least one tool (as
	// EvalResult.ToolCallRate).
	MetricToolCallRate = "tool_call_rate"
	// MetricToolErrorRate is the fraction of tool calls that failed.
	MetricToolErrorRate = "tool_error_rate"
	// MetricInvalidRate is the fraction of actions that broke the protocol.
	MetricInvalidRate = "invalid_rate"
	// MetricErrorThenQuit is the fraction of episodes whose last tool call failed and which
	// then gave up or stopped without a correct answer (ErrorThenQuit): the shape of the
	// "provoke an error and quit" reward hack, logged whatever the rubric.
	MetricErrorThenQuit = "error_then_quit"
	// MetricTokenMismatches counts, over the step's episodes, the trained token ids that differ
	// from the ids the sampler emitted (Episode.TokenMismatches): it must be 0.
	MetricTokenMismatches = "tokens/mismatch"
	// MetricFracRewardZeroStd is the fraction of groups whose rewards were all equal (they carry
	// no learning signal; TRL frac_reward_zero_std).
	MetricFracRewardZeroStd = "frac_reward_zero_std"
	// MetricRefills counts the extra rollouts of dynamic sampling; MetricDroppedGroups the
	// all-equal groups it dropped.
	MetricRefills       = "dynamic/refills"
	MetricDroppedGroups = "dynamic/dropped_groups"
	// With task screening (GRPO.Screen): MetricScreenSignal is the predicted share of the
	// step's first-round groups with signal (mean of 1 − q^G − (1 − q)^G over the chosen
	// tasks), MetricScreenPoolSignal the same over every candidate (what drawing without
	// screening would predict), MetricScreenQ the chosen tasks' mean estimated success q.
	MetricScreenSignal     = "screen/predicted_signal"
	MetricScreenPoolSignal = "screen/pool_signal"
	MetricScreenQ          = "screen/q"
	// MetricScreenCandidates is the number of candidates screening drew per task (it draws
	// learn.ScreenChunk at a time until the chosen tasks' predicted signal reaches one half).
	MetricScreenCandidates = "screen/candidates"
	// MetricEpisodes is the number of episodes trained on.
	MetricEpisodes = "episodes"

	// MetricKL is the mean per-token KL estimate to the reference policy (the configured
	// estimator), measured on the first minibatch.
	MetricKL = "kl"
	// MetricEntropy is the mean per-token entropy of the policy.
	MetricEntropy = "entropy"
	// MetricClipLow and MetricClipHigh are the fractions of tokens whose ratio was clipped
	// below 1−ε_low (negative advantage) and above 1+ε_high (positive advantage).
	MetricClipLow  = "clip/low"
	MetricClipHigh = "clip/high"
	// MetricApproxKL is the mean of (ratio − 1) − log ratio, the policy's drift within the step.
	MetricApproxKL = "approx_kl"
	// MetricRatioMean is the mean importance ratio; MetricRatioDev the mean |ratio − 1|.
	MetricRatioMean = "ratio/mean"
	MetricRatioDev  = "ratio/dev"
	// MetricPGLoss is the policy-gradient part of the loss (without the KL penalty).
	MetricPGLoss = "pg_loss"
	// MetricLoss is the loss, the mean over the step's optimizer steps (minibatches × epochs).
	MetricLoss = "loss"
	// MetricGradNorm is the global gradient norm (before clipping), the mean over the step's
	// optimizer steps; MetricGradNormMax the largest of them.
	MetricGradNorm    = "grad_norm"
	MetricGradNormMax = "grad_norm_max"
	// MetricLR is the learning rate of the step's last optimizer step.
	MetricLR = "lr"

	// MetricStepSeconds is the step's wall time; MetricRolloutSeconds and MetricUpdateSeconds
	// its sampling-and-scoring and its update parts.
	MetricStepSeconds    = "time/step_seconds"
	MetricRolloutSeconds = "time/rollout_seconds"
	MetricUpdateSeconds  = "time/update_seconds"
	// MetricTokensSampled counts the tokens the policy generated; MetricTokensTrained the
	// policy tokens in the loss.
	MetricTokensSampled = "tokens/sampled"
	MetricTokensTrained = "tokens/trained"
	// MetricTokensPerSecond is the step's throughput: tokens processed by sampling and by the
	// update, over the step's wall time.
	MetricTokensPerSecond = "tokens_per_second"
)

// MetricRewardTerm returns the metric name of one rubric term's mean value, "reward/" + name
// (e.g. "reward/format").
func MetricRewardTerm(name string) string { return "reward/" + name }
