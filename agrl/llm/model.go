package llm

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"agrl.dev/agrl/hf"
)

// A Model is a decoder's weights in float32, ready to run. Its methods are safe for
// concurrent use; a Cache is not (one per sequence). WithAdapters gives a view of a model that
// runs with LoRA adapters, sharing its weights.
type Model struct {
	cfg    hf.Config
	embed  []float32 // [vocab, hidden]
	layers []layer
	norm   []float32 // [hidden]
	head   []float32 // [vocab, hidden]; the same slice as embed when the embeddings are tied
	// invFreq holds RoPE's inverse frequencies, head_dim/2 of them (scaling applied), and
	// ropeScale the factor its cos and sin are multiplied by (1 but under YaRN).
	invFreq   []float64
	ropeScale float64

	dir string // the directory Load read, as given
	// lora are the adapters this model runs with (nil: none), and root the model WithAdapters
	// was called on (nil for one from Load): a view shares root's weights.
	lora *Adapters
	root *Model

	// owners are kept reachable for the memory of the tensors Share gave the model, and
	// shared names those tensors.
	owners []any
	shared map[string]bool
}

// layer is one decoder block. Linear weights are [out, in], row-major, as checkpoints store
// them, so a row of the weight is the input vector's partner in a dot product. A nil bias or
// q/k norm is one the family does not have.
type layer struct {
	inputNorm, postNorm []float32 // [hidden]

	wq, wk, wv, wo []float32 // [heads·head_dim, hidden], [kv·head_dim, hidden] ×2, [hidden, heads·head_dim]
	bq, bk, bv, bo []float32
	qNorm, kNorm   []float32 // Qwen3: [head_dim], shared by all heads

	gate, up, down    []float32 // [inter, hidden], [inter, hidden], [hidden, inter]
	bGate, bUp, bDown []float32

	// t holds, by module (qProj…downProj), a projection the model keeps only as its transpose
	// [in, out] (Share), whose [out, in] field above is then nil.
	t [numModules][]float32
}

// Config returns the model's configuration, as read from its config.json.
func (m *Model) Config() hf.Config {
	c := m.cfg
	c.EOSTokenIDs = slices.Clone(c.EOSTokenIDs)
	return c
}

// Load reads the model in dir: its config.json and its safetensors weights (model.safetensors,
// or model.safetensors.index.json and its shards). The checkpoint must hold exactly the
// tensors the config implies (hf.Config.Tensors), as F32, F16 or BF16; a missing, unexpected
// or mis-shaped tensor is an error naming every such tensor, and so is a weight that is NaN
// or infinite. Weights are converted to float32 (exactly, from BF16 and F16), so a model
// takes 4 bytes a parameter in memory.
func Load(dir string) (*Model, error) {
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	ck, err := hf.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	defer ck.Close()
	if err := cfg.Check(ck); err != nil {
		return nil, fmt.Errorf("llm: %s: %w", dir, err)
	}

	m, err := build(cfg, dir, ck.Float32s)
	if err != nil {
		return nil, fmt.Errorf("llm: %s: %w", dir, err)
	}
	return m, nil
}

// FromWeights makes a model of cfg from weights held in memory: every tensor cfg.Tensors()
// lists, by the name and in the row-major layout transformers saves it under (as Weights
// returns them), and none other. A missing, unexpected or mis-sized tensor, or a NaN or
// infinite weight, is an error naming it. The model keeps the slices (it does not copy them):
// the caller must not modify them afterwards. dir is the model directory the weights belong
// to, from which Save copies the tokenizer files ("" for none). It is how a trainer that
// updates every weight (full fine-tuning) hands the sampler its current weights.
func FromWeights(cfg hf.Config, dir string, weights map[string][]float32) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("llm: FromWeights: %w", err)
	}
	specs := cfg.Tensors()
	want := make(map[string]int, len(specs))
	for _, s := range specs {
		n := 1
		for _, d := range s.Shape {
			n *= d
		}
		want[s.Name] = n
	}
	var errs []error
	for _, s := range specs {
		w, ok := weights[s.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("tensor %s missing", s.Name))
		case len(w) != want[s.Name]:
			errs = append(errs, fmt.Errorf("tensor %s has %d values; its shape %v has %d", s.Name, len(w), s.Shape, want[s.Name]))
		}
	}
	for name := range weights {
		if _, ok := want[name]; !ok {
			errs = append(errs, fmt.Errorf("unexpected tensor %s", name))
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, fmt.Errorf("llm: FromWeights: %w", errors.Join(errs...))
	}
	m, err := build(cfg, dir, func(name string) ([]float32, error) { return weights[name], nil })
	if err != nil {
		return nil, fmt.Errorf("llm: FromWeights: %w", err)
	}
	return m, nil
}

// FromWeightsTransposed is FromWeights with every projection (the q, k, v, o, gate, up and
// down weights) given as its transpose [in, out], the layout the forward pass multiplies by
// directly (SetLinearT; a projection Share made transposed): the layout a GoMLX store keeps
// (hfgraph.Model.StoredBaseWeights), taken without transposing back and forth. The model
// computes, bit for bit, what FromWeights computes from the [out, in] weights they transpose.
func FromWeightsTransposed(cfg hf.Config, dir string, weights map[string][]float32) (*Model, error) {
	m, err := FromWeights(cfg, dir, weights)
	if err != nil {
		return nil, fmt.Errorf("%w (projections given as [in, out])", err)
	}
	for _, name := range m.names() {
		if p, l, mod := m.slot(name); mod >= 0 {
			m.layers[l].t[mod], *p = *p, nil
		}
	}
	return m, nil
}

// build assembles a model of cfg from the tensors get returns by name (checked finite).
func build(cfg hf.Config, dir string, get func(name string) ([]float32, error)) (*Model, error) {
	var readErr error
	read := func(name string) []float32 {
		if readErr != nil {
			return nil
		}
		w, err := get(name)
		if err != nil {
			readErr = err
			return nil
		}
		for i, v := range w {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				readErr = fmt.Errorf("tensor %s: element %d is %v", name, i, v)
				return nil
			}
		}
		return w
	}
	opt := func(has bool, name string) []float32 {
		if !has {
			return nil
		}
		return read(name)
	}

	m := &Model{cfg: cfg, invFreq: cfg.InvFreq(), ropeScale: cfg.RopeAttentionFactor(), dir: dir}
	m.embed = read("model.embed_tokens.weight")
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		qkvBias, oBias, qwen3 := cfg.QKVBias(), cfg.OutputBias(), cfg.Family == hf.Qwen3
		m.layers = append(m.layers, layer{
			inputNorm: read(p + "input_layernorm.weight"),
			postNorm:  read(p + "post_attention_layernorm.weight"),
			wq:        read(p + "self_attn.q_proj.weight"),
			wk:        read(p + "self_attn.k_proj.weight"),
			wv:        read(p + "self_attn.v_proj.weight"),
			wo:        read(p + "self_attn.o_proj.weight"),
			bq:        opt(qkvBias, p+"self_attn.q_proj.bias"),
			bk:        opt(qkvBias, p+"self_attn.k_proj.bias"),
			bv:        opt(qkvBias, p+"self_attn.v_proj.bias"),
			bo:        opt(oBias, p+"self_attn.o_proj.bias"),
			qNorm:     opt(qwen3, p+"self_attn.q_norm.weight"),
			kNorm:     opt(qwen3, p+"self_attn.k_norm.weight"),
			gate:      read(p + "mlp.gate_proj.weight"),
			up:        read(p + "mlp.up_proj.weight"),
			down:      read(p + "mlp.down_proj.weight"),
			bGate:     opt(cfg.MLPBias, p+"mlp.gate_proj.bias"),
			bUp:       opt(cfg.MLPBias, p+"mlp.up_proj.bias"),
			bDown:     opt(cfg.MLPBias, p+"mlp.down_proj.bias"),
		})
	}
	m.norm = read("model.norm.weight")
	if cfg.TieWordEmbeddings {
		m.head = m.embed
	} else {
		m.head = read("lm_head.weight")
	}
	if readErr != nil {
		return nil, readErr
	}
	return m, nil
}
