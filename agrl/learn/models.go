package learn

import (
	"agrl.dev/agrl"
)

// Model is a policy the GRPO trainer trains and evaluates: the Tiny model (*Policy) or a
// pretrained Hugging Face model with LoRA adapters (*PretrainedPolicy). Both sample episodes
// whose Tokens, LossMask and LogProbs are aligned (the ids sampled are the ids trained on) and
// score token sequences with the same contract, so one trainer, one loss and one run directory
// serve both.
type Model interface {
	// Rollout plays one episode per task (see Policy.Rollout).
	Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error)
	// Score returns the per-token log-probabilities and entropies of each sequence at the
	// temperature (entry i about token i+1; see Policy.Score).
	Score(seqs [][]int32, temperature float64) ([]TokenScores, error)
	// BackendConfig names the compute backend ("go:ops_sequential", "xla:cuda"…).
	BackendConfig() string
	// Checkpoint says which checkpoint the model was loaded from (zero when none).
	Checkpoint() CheckpointInfo
}

// learner takes optimizer steps on a trainee (*Trainer for the Tiny model).
type learner interface {
	Step(b TrainBatch) (agrl.StepStats, error)
	Steps() int
}

// microBatcher is a learner whose Step trains its batch in several micro-batches (the
// pretrained policy's) and reports each when done, with how many the step has, through the
// function it is given (nil: none).
type microBatcher interface {
	onMicroBatches(func(done, total int))
}

// trainee is what the GRPO trainer needs of a Model beyond sampling and scoring.
type trainee interface {
	Model
	// newLearner builds the optimizer (state restored from a loaded checkpoint).
	newLearner(name string, loss LossFunc, values []string, opt agrl.AdamW, temperature float64) (learner, error)
	// saveMarked writes a checkpoint recording the run's progress mark into dir.
	saveMarked(dir string, mark checkpointMark) (string, error)
	// checkFinite reports a trainable weight that holds NaN or Inf.
	checkFinite() error
	// reference returns the frozen KL reference policy: the model as GRPO started, kept in
	// dir (the Tiny model saves a copy there on first use; a LoRA model's is its base, adapters
	// off, which costs nothing; a fully fine-tuned one's a frozen copy of its weights).
	reference(dir string) (Model, error)
	// decode returns the text of token ids (the policy tokenizer's).
	decode(ids []int32) string
	// demoTokens encodes a played episode (a demonstration) for SFT: its token ids and a
	// 0/1 mask of the action tokens, as this model's rollouts lay episodes out.
	demoTokens(tools []agrl.Tool, ep *agrl.Episode) ([]int32, []uint8, error)
	// contextLen is the most tokens a sequence may have.
	contextLen() int
	// kernels names the CPU kernel set the model's sums run on (Kernels), "" where they run on
	// another backend: what its checkpoints record.
	kernels() string
}

func (p *Policy) decode(ids []int32) string { return p.tok.Decode(ids) }

func (p *Policy) demoTokens(_ []agrl.Tool, ep *agrl.Episode) ([]int32, []uint8, error) {
	tok, mask := agrl.EncodeEpisode(p.tok, ep)
	return tok, mask, nil
}

func (p *Policy) contextLen() int { return p.arch.Context }

func (p *Policy) newLearner(name string, loss LossFunc, values []string, opt agrl.AdamW, temperature float64) (learner, error) {
	return p.NewTrainer(name, loss, values, opt, temperature)
}

func (p *Policy) saveMarked(dir string, mark checkpointMark) (string, error) {
	p.mark = mark
	return p.Save(dir)
}

func (p *Policy) reference(dir string) (Model, error) {
	if len(Checkpoints(dir)) == 0 {
		if _, err := p.Save(dir); err != nil {
			return nil, err
		}
	}
	return LoadPolicy(dir, p.cfg.Spec().Backend)
}
