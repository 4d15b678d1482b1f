package learn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/learn/hfgraph"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
)

// Full fine-tuning of a pretrained policy (agrl.PretrainedLM.Full). Every base weight in the
// store is trainable and the optimizer updates them all. The sampler's host model reads them
// in place from the store where it keeps float32 in Go memory (the go backend: syncLive),
// and is made again from them after each update elsewhere (syncHost). The adapters'
// shortcuts do not hold: the base view of the store's variables is the trained model, so
// the pretrained model and GRPO's KL reference are frozen copies — their own variables under
// their own store scopes, and their own host models for rollouts.

// pretrainedFrozen is a frozen copy of a pretrained model's weights: the checkpoint's (view
// "base") or the warm-started ones (view "reference"). Its host model (agent) always exists;
// its graph — a second copy of the weights in the store, under /hf_<view> — only once
// something needs it (graphOf): decoding or scoring on the backend. Where the policy scores
// and decodes on the host (the go backend's defaults) the warm-started reference never has
// one; the checkpoint's has one from the start on backends whose buffers are Go memory,
// where its host model shares that memory (loadPretrained).
type pretrainedFrozen struct {
	p     *PretrainedPolicy
	view  string
	graph *hfgraph.Model // nil until graphOf makes it
	agent *agent.Policy
}

func (f *pretrainedFrozen) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	var g *hfgraph.Model
	if f.p.graphDecoding {
		var err error
		if g, err = f.graphOf(); err != nil {
			return nil, agrl.RolloutStats{}, err
		}
	}
	return f.p.sampler(f.agent, g, "frozen "+f.view).Rollout(env, tasks, opt)
}
func (f *pretrainedFrozen) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	var g *hfgraph.Model
	if !f.p.hostScoring() {
		var err error
		if g, err = f.graphOf(); err != nil {
			return nil, err
		}
	}
	return f.p.score(seqs, temperature, f.view, g, hostOf(f.agent))
}
func (f *pretrainedFrozen) BackendConfig() string      { return f.p.backendConfig }
func (f *pretrainedFrozen) Checkpoint() CheckpointInfo { return CheckpointInfo{} }

// graphOf is f's graph, made from its host model's weights on first use.
func (f *pretrainedFrozen) graphOf() (*hfgraph.Model, error) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if f.graph != nil {
		return f.graph, nil
	}
	g, err := hfgraph.FromLLM(f.p.store, pretrainedScope+"_"+f.view, f.agent.Model())
	if err != nil {
		return nil, fmt.Errorf("agrl: the frozen %s model: %w", f.view, err)
	}
	if err := g.SetCompute(f.p.computeDType()); err != nil {
		return nil, err
	}
	f.graph = g
	return g, nil
}

// frozenModel returns the frozen copy named view, making its host model from host's weights
// on first use (its graph waits for graphOf).
func (p *PretrainedPolicy) frozenModel(view string, host func() (*llm.Model, error)) (*pretrainedFrozen, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.frozen[view]; f != nil {
		return f, nil
	}
	m, err := host()
	if err != nil {
		return nil, err
	}
	ag, err := p.agent.WithModel(m)
	if err != nil {
		return nil, err
	}
	f := &pretrainedFrozen{p: p, view: view, agent: ag}
	p.frozen[view] = f
	return f, nil
}

// fullBase is BaseModel of a fully fine-tuned policy: the checkpoint's weights. Its rollouts
// are the policy's base agent's (the host model of the checkpoint); its scores come from the
// frozen copy in the store, made on first use.
type fullBase struct{ p *PretrainedPolicy }

func (b fullBase) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	if b.p.graphDecoding { // the store's base view is the trained model: decode the frozen copy
		f, err := b.p.frozenBase()
		if err != nil {
			return nil, agrl.RolloutStats{}, err
		}
		return f.Rollout(env, tasks, opt)
	}
	return b.p.agent.Rollout(env, tasks, opt)
}
func (b fullBase) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	f, err := b.p.frozenBase()
	if err != nil {
		return nil, err
	}
	return f.Score(seqs, temperature)
}
func (b fullBase) BackendConfig() string      { return b.p.backendConfig }
func (b fullBase) Checkpoint() CheckpointInfo { return CheckpointInfo{} }

// frozenBase is the frozen copy of the checkpoint's weights.
func (p *PretrainedPolicy) frozenBase() (*pretrainedFrozen, error) {
	return p.frozenModel("base", func() (*llm.Model, error) { return p.base, nil })
}

// fullReference is GRPO's KL reference under full fine-tuning: a frozen copy of the
// checkpoint's weights, or after a warm start of the warm-started ones, saved in dir on first
// use (a Hugging Face model directory, float32, written whole before it is renamed into place)
// and read back from there on resume.
func (p *PretrainedPolicy) fullReference(dir string) (Model, error) {
	var f *pretrainedFrozen
	var err error
	if p.warm {
		f, err = p.frozenModel("reference", func() (*llm.Model, error) { return p.warmWeights(dir) })
	} else {
		f, err = p.frozenBase()
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// warmWeights are the warm-started weights of the KL reference: read from dir, or saved there
// on first use (p.mu held).
func (p *PretrainedPolicy) warmWeights(dir string) (*llm.Model, error) {
	{
		if _, err := os.Stat(dir); err == nil {
			m, err := p.readFullWeights(dir)
			if err != nil {
				return nil, fmt.Errorf("agrl: the KL reference (the warm-started weights) in %s: %w", dir, err)
			}
			return m, nil
		}
		if p.loaded.Stage == StageGRPO && p.loaded.Step > 0 {
			return nil, fmt.Errorf("agrl: the KL reference (the warm-started weights) is missing from %s, and this run resumes at GRPO step %d, whose weights are not the warm start's: restore the directory, or resume from the warm start's checkpoint", dir, p.loaded.Step)
		}
		m, err := p.ownModel() // p.mu is held by frozenModel
		if err != nil {
			return nil, err
		}
		if err := saveModelDir(dir, m); err != nil {
			return nil, fmt.Errorf("agrl: saving the KL reference (the warm-started weights): %w", err)
		}
		return m, nil
	}
}

// saveModelDir writes m (float32) as a Hugging Face model directory at dir, which must not
// exist: into a temporary directory beside it first, renamed into place once complete, so that
// an interrupted save leaves no directory at dir.
func saveModelDir(dir string, m *llm.Model) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), tmpPrefix)
	if err != nil {
		return err
	}
	if err := m.Save(tmp, nil, hf.F32); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}

// readFullWeights reads the weights of a fully fine-tuned model from dir (a checkpoint or the
// reference: a Hugging Face model directory of this policy's shapes) into a host model that
// keeps the model directory's tokenizer files for saving.
func (p *PretrainedPolicy) readFullWeights(dir string) (*llm.Model, error) {
	ck, err := hf.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if err := p.cfg.Check(ck); err != nil {
		return nil, fmt.Errorf("its weights are not %s's: %w", p.spec.Dir, err)
	}
	w := map[string][]float32{}
	for _, spec := range p.cfg.Tensors() {
		if w[spec.Name], err = ck.Float32s(spec.Name); err != nil {
			return nil, err
		}
	}
	return llm.FromWeights(p.cfg, p.spec.Dir, w)
}

// restoreFull reads the weights of a full fine-tuning checkpoint into the store and the
// sampler (p.mu not held; restore runs before the policy is shared).
func (p *PretrainedPolicy) restoreFull(ckdir string) error {
	m, err := p.readFullWeights(ckdir)
	if err != nil {
		return err
	}
	if err := p.graph.SetBaseWeights(m.WeightsView()); err != nil {
		return err
	}
	cur, err := p.agent.WithModel(m)
	if err != nil {
		return err
	}
	// Stale: the first use makes the host model again from the store, in the layout syncHost
	// gives it after every update ([in, out] projections), so that a resumed run's host
	// steps multiply in the uninterrupted run's layout (the same bits).
	p.cur, p.live, p.stale = cur, nil, true
	return nil
}

// checkKind reports a checkpoint of the other kind of training (LoRA or full fine-tuning).
func (p *PretrainedPolicy) checkKind(full bool) error {
	switch {
	case full && !p.full:
		return errors.New("a checkpoint of a fully fine-tuned model, not of LoRA adapters (train it with agrl.PretrainedLM.Full)")
	case !full && p.full:
		return errors.New("a checkpoint of LoRA adapters, not of a fully fine-tuned model (train it without agrl.PretrainedLM.Full)")
	}
	return nil
}
