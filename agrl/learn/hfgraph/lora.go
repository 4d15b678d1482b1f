package hfgraph

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"agrl.dev/agrl/llm"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// LoRA adapters as variables.
//
// Each targeted projection of each layer gets two trainable variables, named after the PEFT
// tensors without PEFT's "base_model.model." prefix and ".weight" suffix:
//
//	<scope>/lora/model.layers.<l>.<self_attn|mlp>.<module>.lora_A   [in, r]   (PEFT's lora_A [r, in], transposed)
//	<scope>/lora/model.layers.<l>.<self_attn|mlp>.<module>.lora_B   [r, out]  (PEFT's lora_B [out, r], transposed)
//
// so that the adapted projection computes y = x·W + b + (alpha/r)·((x·A)·B), the same sum as
// agrl/llm and PEFT (W x + b + (alpha/r)·B(A x)), in the same order.

// pcgStream is the second word of the PCG stream llm.Model.AddLoRA draws A from ("agrl.lor").
const pcgStream = 0x6167726c2e6c6f72

// AddLoRA adds LoRA adapters of configuration cfg to m, initialised exactly as
// llm.Model.AddLoRA initialises them for the same seed (B zero; A uniform on [−1/√in, 1/√in)
// from a PCG stream seeded by seed, layer by layer, projection by projection in
// llm.LoRAModules order, row by row), so that at first the model computes exactly what its base
// does. It fails if m has adapters already.
func (m *Model) AddLoRA(cfg llm.LoRAConfig, seed uint64) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("hfgraph: %w", err)
	}
	if m.lora != nil {
		return errors.New("hfgraph: AddLoRA: the model has adapters already (SetAdapters replaces their values)")
	}
	cfg = normalised(cfg)
	src := rand.NewPCG(seed, pcgStream)
	type pending struct {
		path string
		data []float32
		dims []int
	}
	var vars []pending
	r := cfg.Rank
	for l := range m.cfg.NumHiddenLayers {
		for _, mod := range cfg.TargetModules {
			out, in := m.moduleShape(mod)
			a := make([]float32, r*in) // PEFT's layout [r, in], row by row
			bound := 1 / math.Sqrt(float64(in))
			for i := range a {
				u := float64(src.Uint64()>>11) / (1 << 53)
				a[i] = float32((2*u - 1) * bound)
			}
			vars = append(vars,
				pending{m.loraPath(l, mod, "A"), transpose(a, r, in), []int{in, r}},
				pending{m.loraPath(l, mod, "B"), make([]float32, r*out), []int{r, out}})
		}
	}
	for _, v := range vars { // check first, so that a failure leaves nothing half made
		if m.store.GetVariable(v.path) != nil {
			return fmt.Errorf("hfgraph: AddLoRA: variable %s exists already", v.path)
		}
	}
	for _, v := range vars {
		if err := m.create(v.path, v.data, v.dims, true); err != nil {
			return err
		}
	}
	m.lora = &cfg
	return nil
}

// SetAdapters copies the values of agrl/llm adapters (from llm.Model.AddLoRA or
// llm.LoadAdapters) into m's adapter variables, creating them if m has none. Adapters already
// there must have the same rank, alpha and target modules; their values are replaced (an
// optimizer's state for them is not reset).
func (m *Model) SetAdapters(a *llm.Adapters) error {
	if a == nil {
		return errors.New("hfgraph: SetAdapters: nil adapters")
	}
	cfg := normalised(a.Config())
	if m.lora != nil && !sameLoRA(*m.lora, cfg) {
		return fmt.Errorf("hfgraph: SetAdapters: the model's adapters are r %d, alpha %v, %v; these are r %d, alpha %v, %v",
			m.lora.Rank, m.lora.Alpha, m.lora.TargetModules, cfg.Rank, cfg.Alpha, cfg.TargetModules)
	}
	params, err := m.matchParams(a, cfg)
	if err != nil {
		return fmt.Errorf("hfgraph: SetAdapters: %w", err)
	}
	for _, p := range params {
		if m.lora == nil && m.store.GetVariable(p.path) != nil {
			return fmt.Errorf("hfgraph: SetAdapters: variable %s exists already", p.path)
		}
	}
	for _, p := range params {
		data := transpose(p.Data, p.Shape[0], p.Shape[1])
		dims := []int{p.Shape[1], p.Shape[0]}
		if m.lora == nil {
			if err := m.create(p.path, data, dims, true); err != nil {
				return err
			}
			continue
		}
		if err := m.variable(p.path).SetValue(tensors.FromFlatDataAndDimensions(data, dims...)); err != nil {
			return fmt.Errorf("hfgraph: SetAdapters: %s: %w", p.path, err)
		}
	}
	if m.lora == nil {
		m.lora = &cfg
	}
	return nil
}

// ExportAdapters copies m's adapter values into dst, which must have the same rank, alpha and
// target modules and the shapes of m's projections (adapters that base.AddLoRA or
// llm.LoadAdapters made for the model m was loaded from). dst can then be saved as a PEFT
// adapter (llm.Adapters.Save) or merged into a checkpoint (llm.Model.Save).
func (m *Model) ExportAdapters(dst *llm.Adapters) error {
	if m.lora == nil {
		return errors.New("hfgraph: ExportAdapters: the model has no adapters")
	}
	if dst == nil {
		return errors.New("hfgraph: ExportAdapters: nil adapters")
	}
	cfg := normalised(dst.Config())
	if !sameLoRA(*m.lora, cfg) {
		return fmt.Errorf("hfgraph: ExportAdapters: the model's adapters are r %d, alpha %v, %v; dst's are r %d, alpha %v, %v",
			m.lora.Rank, m.lora.Alpha, m.lora.TargetModules, cfg.Rank, cfg.Alpha, cfg.TargetModules)
	}
	params, err := m.matchParams(dst, cfg)
	if err != nil {
		return fmt.Errorf("hfgraph: ExportAdapters: %w", err)
	}
	for _, p := range params {
		val, err := m.variable(p.path).Value()
		if err != nil {
			return fmt.Errorf("hfgraph: ExportAdapters: %s: %w", p.path, err)
		}
		data, err := tensors.CopyFlatData[float32](val)
		if err != nil {
			return fmt.Errorf("hfgraph: ExportAdapters: %s: %w", p.path, err)
		}
		copy(p.Data, transpose(data, p.Shape[1], p.Shape[0])) // [in|r, r|out] -> PEFT's [r|out, in|r]
	}
	return nil
}

// Adapters returns m's adapters as new agrl/llm adapters for base, the agrl/llm model of the
// checkpoint m was loaded from (any model of the same shapes will do): base.AddLoRA with m's
// configuration, then ExportAdapters. Their BaseModel is the directory base was loaded from.
func (m *Model) Adapters(base *llm.Model) (*llm.Adapters, error) {
	if m.lora == nil {
		return nil, errors.New("hfgraph: Adapters: the model has no adapters")
	}
	if base == nil {
		return nil, errors.New("hfgraph: Adapters: nil base model")
	}
	a, err := base.AddLoRA(*m.LoRA(), 0)
	if err != nil {
		return nil, fmt.Errorf("hfgraph: Adapters: %w", err)
	}
	if err := m.ExportAdapters(a); err != nil {
		return nil, err
	}
	return a, nil
}

// LoRA returns a copy of the adapters' configuration (target modules in llm.LoRAModules
// order), or nil if m has none. The Base view reports the shared adapters too, though its
// graphs leave them out.
func (m *Model) LoRA() *llm.LoRAConfig {
	if m.lora == nil {
		return nil
	}
	c := *m.lora
	c.TargetModules = slices.Clone(c.TargetModules)
	return &c
}

// AdapterVariables returns the adapter variables (trainable), layer by layer, the targeted
// projections in llm.LoRAModules order, A before B: the order of llm.Adapters.Params.
func (m *Model) AdapterVariables() []*model.Variable {
	if m.lora == nil {
		return nil
	}
	var vs []*model.Variable
	for l := range m.cfg.NumHiddenLayers {
		for _, mod := range m.lora.TargetModules {
			vs = append(vs, m.variable(m.loraPath(l, mod, "A")), m.variable(m.loraPath(l, mod, "B")))
		}
	}
	return vs
}

// paramRef is an llm adapter matrix and the variable that holds it.
type paramRef struct {
	llm.Param
	path string
}

// matchParams pairs a's matrices with m's adapter variable paths, checking names and shapes.
func (m *Model) matchParams(a *llm.Adapters, cfg llm.LoRAConfig) ([]paramRef, error) {
	params := a.Params()
	if want := 2 * m.cfg.NumHiddenLayers * len(cfg.TargetModules); len(params) != want {
		return nil, fmt.Errorf("the adapters have %d matrices, the model's configuration needs %d", len(params), want)
	}
	var problems []string
	refs := make([]paramRef, 0, len(params))
	for _, p := range params {
		l, mod, ab, ok := parsePEFTName(p.Name)
		if !ok || l >= m.cfg.NumHiddenLayers {
			problems = append(problems, "unexpected "+p.Name)
			continue
		}
		out, in := m.moduleShape(mod)
		want := []int{cfg.Rank, in}
		if ab == "B" {
			want = []int{out, cfg.Rank}
		}
		if !slices.Equal(p.Shape, want) {
			problems = append(problems, fmt.Sprintf("%s: shape %v, the model's is %v", p.Name, p.Shape, want))
			continue
		}
		refs = append(refs, paramRef{p, m.loraPath(l, mod, ab)})
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return refs, nil
}

// parsePEFTName splits "base_model.model.model.layers.<l>.<group>.<module>.lora_<A|B>.weight".
func parsePEFTName(name string) (layer int, module, ab string, ok bool) {
	rest, found := strings.CutPrefix(name, "base_model.model.model.layers.")
	if !found {
		return 0, "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 || parts[4] != "weight" || (parts[3] != "lora_A" && parts[3] != "lora_B") {
		return 0, "", "", false
	}
	l, err := strconv.Atoi(parts[0])
	if err != nil || l < 0 || parts[1] != moduleGroup(parts[2]) || !slices.Contains(llm.LoRAModules(), parts[2]) {
		return 0, "", "", false
	}
	return l, parts[2], parts[3][len("lora_"):], true
}

// loraPath is the variable holding matrix ab ("A" or "B") of projection mod in layer l.
func (m *Model) loraPath(l int, mod, ab string) string {
	dir := "lora"
	if m.frozen != "" {
		dir = m.frozen
	}
	return fmt.Sprintf("%s/%s/model.layers.%d.%s.%s.lora_%s", m.scope, dir, l, moduleGroup(mod), mod, ab)
}

// Frozen returns a view of m whose graphs use a frozen copy of adapters a in place of m's own:
// non-trainable variables under Scope()+"/"+name, created on the first call and overwritten on
// later ones. a must have m's rank, alpha and target modules. It is GRPO's reference after a
// warm start (the base with the warm start's adapters), which costs one copy of the adapters,
// not of the model. The view shares every other variable with m; its AdapterVariables are the
// frozen copies.
func (m *Model) Frozen(name string, a *llm.Adapters) (*Model, error) {
	switch {
	case m.lora == nil:
		return nil, errors.New("hfgraph: Frozen: the model has no adapters")
	case a == nil:
		return nil, errors.New("hfgraph: Frozen: nil adapters")
	case name == "" || name == "lora" || name == "base" || strings.ContainsAny(name, "/ "):
		return nil, fmt.Errorf("hfgraph: Frozen: %q is not a usable scope name (not lora or base, no / or space)", name)
	}
	cfg := normalised(a.Config())
	if !sameLoRA(*m.lora, cfg) {
		return nil, fmt.Errorf("hfgraph: Frozen: the model's adapters are r %d, alpha %v, %v; these are r %d, alpha %v, %v",
			m.lora.Rank, m.lora.Alpha, m.lora.TargetModules, cfg.Rank, cfg.Alpha, cfg.TargetModules)
	}
	view := &Model{state: m.state, frozen: name}
	params, err := view.matchParams(a, cfg)
	if err != nil {
		return nil, fmt.Errorf("hfgraph: Frozen: %w", err)
	}
	for _, p := range params {
		data := transpose(p.Data, p.Shape[0], p.Shape[1])
		dims := []int{p.Shape[1], p.Shape[0]}
		if v := m.store.GetVariable(p.path); v != nil {
			if v.Trainable {
				return nil, fmt.Errorf("hfgraph: Frozen: %s exists and is trainable", p.path)
			}
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(data, dims...)); err != nil {
				return nil, fmt.Errorf("hfgraph: Frozen: %s: %w", p.path, err)
			}
			continue
		}
		if err := m.create(p.path, data, dims, false); err != nil {
			return nil, err
		}
	}
	return view, nil
}

// moduleGroup is the checkpoint group of a projection: "self_attn" or "mlp".
func moduleGroup(mod string) string {
	switch mod {
	case "gate_proj", "up_proj", "down_proj":
		return "mlp"
	}
	return "self_attn"
}

// moduleShape is the [out, in] shape of projection mod's weight, as the checkpoint stores it.
func (m *Model) moduleShape(mod string) (out, in int) {
	c := m.cfg
	h, q, kv, inter := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize
	switch mod {
	case "q_proj":
		return q, h
	case "k_proj", "v_proj":
		return kv, h
	case "o_proj":
		return h, q
	case "gate_proj", "up_proj":
		return inter, h
	default: // down_proj
		return h, inter
	}
}

// normalised returns cfg with its target modules in llm.LoRAModules order.
func normalised(cfg llm.LoRAConfig) llm.LoRAConfig {
	var mods []string
	for _, name := range llm.LoRAModules() {
		if slices.Contains(cfg.TargetModules, name) {
			mods = append(mods, name)
		}
	}
	cfg.TargetModules = mods
	return cfg
}

// sameLoRA reports whether two normalised configurations give adapters of the same shapes
// and scale (dropout aside).
func sameLoRA(a, b llm.LoRAConfig) bool {
	return a.Rank == b.Rank && a.Alpha == b.Alpha && slices.Equal(a.TargetModules, b.TargetModules)
}

// targets reports whether projection mod is adapted.
func (s *state) targets(mod string) bool {
	return s.lora != nil && slices.Contains(s.lora.TargetModules, mod)
}
