package llm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"agrl.dev/agrl/hf"
	"agrl.dev/internal/parallel"
)

// The projections of a decoder layer that LoRA can adapt, in the order of loraModules.
const (
	qProj = iota
	kProj
	vProj
	oProj
	gateProj
	upProj
	downProj
	numModules
)

// loraModules are the projections' names, as PEFT's target_modules and the checkpoints' tensor
// names spell them.
var loraModules = [numModules]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// LoRAModules lists the linear layers LoRA can adapt, by the names PEFT's target_modules uses:
// q_proj, k_proj, v_proj, o_proj (attention) and gate_proj, up_proj, down_proj (MLP). This order
// is the one Adapters keep them in.
func LoRAModules() []string { return slices.Clone(loraModules[:]) }

// moduleIndex returns the index of the named projection, or -1.
func moduleIndex(name string) int { return slices.Index(loraModules[:], name) }

// moduleShape is the [out, in] shape of projection mod's weight in a model of configuration c.
func moduleShape(c hf.Config, mod int) (out, in int) {
	h, q, kv, inter := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize
	switch mod {
	case qProj:
		return q, h
	case kProj, vProj:
		return kv, h
	case oProj:
		return h, q
	case gateProj, upProj:
		return inter, h
	default: // downProj
		return h, inter
	}
}

// moduleWeight is the checkpoint name of projection mod's weight in layer l, as transformers
// writes it ("model.layers.0.self_attn.q_proj.weight").
func moduleWeight(l, mod int) string {
	group := "self_attn"
	if mod >= gateProj {
		group = "mlp"
	}
	return fmt.Sprintf("model.layers.%d.%s.%s.weight", l, group, loraModules[mod])
}

// LoRAConfig configures low-rank adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
// Language Models"), with the meaning and names of PEFT's LoraConfig. Each targeted linear
// layer W [out, in] gets A [Rank, in] and B [out, Rank], and computes
//
//	y = W x + b + (Alpha/Rank) · B (A x)
//
// The zero value is not valid: Rank, Alpha and TargetModules must be set.
type LoRAConfig struct {
	// Rank is r, the adapters' inner width, at least 1. PEFT's default is 8.
	Rank int
	// Alpha is lora_alpha, positive: the adapter's output is scaled by Alpha/Rank (PEFT's default
	// scaling; rsLoRA's Alpha/√Rank is not supported). PEFT's default is 8; Alpha = 2·Rank is common.
	Alpha float64
	// Dropout is lora_dropout, in [0, 1): the probability with which a trainer zeroes each input
	// of the adapter path. It is recorded and saved; this package's inference (Step, Logits,
	// the samplers) applies no dropout, a training trace applies what TraceOptions.Dropout
	// says.
	Dropout float64
	// TargetModules names the projections adapted in every decoder layer, from LoRAModules
	// (PEFT's target_modules; all seven is what PEFT's "all-linear" gives these models). The
	// embeddings and the LM head are never adapted.
	TargetModules []string
}

// Scale is Alpha/Rank, the factor of the adapter's output.
func (c LoRAConfig) Scale() float64 { return c.Alpha / float64(c.Rank) }

// Validate reports every problem of c in one error: a rank below 1, an alpha that is not
// positive and finite, a dropout outside [0, 1), no target modules, and target modules that are
// unknown or named twice.
func (c LoRAConfig) Validate() error {
	if errs := c.problems(); len(errs) > 0 {
		return fmt.Errorf("llm: LoRA config: %w", errors.Join(errs...))
	}
	return nil
}

// MaxLoRARank bounds a LoRA rank. Useful ranks are up to a few hundred (a rank above a
// projection's smaller side, min(in, out), adds parameters that express nothing more); the bound
// only keeps an absurd one from sizing the adapters past any memory.
const MaxLoRARank = 1 << 16

// AdapterParams is the number of parameters of c's adapters on model: A [r, in] and B [out, r]
// for every targeted projection of every layer (c valid).
func (c LoRAConfig) AdapterParams(model hf.Config) int64 {
	var n int64
	for _, name := range c.TargetModules {
		out, in := moduleShape(model, moduleIndex(name))
		n += int64(c.Rank) * int64(in+out)
	}
	return n * int64(model.NumHiddenLayers)
}

func (c LoRAConfig) problems() []error {
	var errs []error
	switch {
	case c.Rank < 1:
		errs = append(errs, fmt.Errorf("rank %d is below 1", c.Rank))
	case c.Rank > MaxLoRARank:
		errs = append(errs, fmt.Errorf("rank %d is above %d", c.Rank, MaxLoRARank))
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 1) {
		errs = append(errs, fmt.Errorf("alpha %v is not a positive number", c.Alpha))
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		errs = append(errs, fmt.Errorf("dropout %v is outside [0, 1)", c.Dropout))
	}
	if len(c.TargetModules) == 0 {
		errs = append(errs, fmt.Errorf("no target modules (choose from %v)", loraModules))
	}
	seen := map[string]bool{}
	for _, name := range c.TargetModules {
		switch {
		case moduleIndex(name) < 0:
			errs = append(errs, fmt.Errorf("unknown target module %q (LoRA adapts %v)", name, loraModules))
		case seen[name]:
			errs = append(errs, fmt.Errorf("target module %q is named twice", name))
		}
		seen[name] = true
	}
	return errs
}

// targets returns whether each projection is targeted, c being valid.
func (c LoRAConfig) targets() [numModules]bool {
	var t [numModules]bool
	for _, name := range c.TargetModules {
		t[moduleIndex(name)] = true
	}
	return t
}

// Adapters are the LoRA matrices of one model: an A and a B for each targeted projection of
// each decoder layer. Make them with Model.AddLoRA or LoadAdapters, run them with
// Model.WithAdapters, save them with Save, and merge them into a model's weights with
// Model.Save. A trainer updates them in place through Params.
//
// A forward pass reads the adapters as they are when it runs: do not change them while one is
// running, and note that a Cache filled before a change holds the keys and values of the old
// weights.
type Adapters struct {
	// BaseModel is what Save writes as base_model_name_or_path, which PEFT uses to find the
	// base model: a Hub name ("Qwen/Qwen3-0.6B") or a directory. AddLoRA and LoadAdapters set
	// it to the directory the model was loaded from, as given to Load.
	BaseModel string

	cfg    LoRAConfig // valid, TargetModules in LoRAModules order
	scale  float32    // Alpha/Rank in float32, as PyTorch multiplies a float32 tensor by it
	model  hf.Config  // the configuration of the model they were made for: their shapes
	params []Param    // Params, in order
	// layers holds, per decoder layer and projection, the adapter or nil where it is not
	// targeted; their slices are params' Data.
	layers [][numModules]*adapter
}

// adapter is one projection's pair of matrices, row-major.
type adapter struct {
	out, in int
	a       []float32 // [rank, in]
	b       []float32 // [out, rank]
}

// A Param is one adapter matrix: its name in PEFT's adapter_model.safetensors, its shape, and its
// values, row-major. Data is the adapters' own storage, so writing to it changes them.
type Param struct {
	// Name is "base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_<A|B>.weight".
	Name string
	// Shape is [rank, in] for lora_A and [out, rank] for lora_B, where [out, in] is the shape of
	// the adapted weight.
	Shape []int
	Data  []float32
}

// newAdapters returns zero adapters of configuration cfg (valid) for a model of configuration
// model.
func newAdapters(model hf.Config, cfg LoRAConfig, base string) *Adapters {
	t := cfg.targets()
	cfg.TargetModules = nil
	for mod, on := range t {
		if on {
			cfg.TargetModules = append(cfg.TargetModules, loraModules[mod])
		}
	}
	a := &Adapters{BaseModel: base, cfg: cfg, scale: float32(cfg.Scale()), model: model}
	a.model.EOSTokenIDs = slices.Clone(model.EOSTokenIDs)
	r := cfg.Rank
	a.layers = make([][numModules]*adapter, model.NumHiddenLayers)
	for l := range a.layers {
		for mod, on := range t {
			if !on {
				continue
			}
			out, in := moduleShape(model, mod)
			p := &adapter{out: out, in: in, a: make([]float32, r*in), b: make([]float32, out*r)}
			a.layers[l][mod] = p
			prefix := "base_model.model." + moduleWeight(l, mod)
			prefix = prefix[:len(prefix)-len("weight")]
			a.params = append(a.params,
				Param{prefix + "lora_A.weight", []int{r, in}, p.a},
				Param{prefix + "lora_B.weight", []int{out, r}, p.b})
		}
	}
	return a
}

// AddLoRA returns new adapters of configuration cfg for m's layers, initialised as PEFT
// initialises them by default, so that the adapted model computes exactly what m does:
//
//   - B is zero;
//   - A is uniform on [−1/√in, 1/√in), where in is the adapted weight's input width: the
//     bound of PyTorch's kaiming_uniform_ with a = √5, which PEFT applies to A (and nn.Linear
//     to its weights). The values come from one PCG stream seeded by seed: for each layer in
//     order, for each targeted projection in LoRAModules order, A's elements row by row, each
//     (2u − 1)/√in with u = the stream's next Uint64 >> 11, divided by 2⁵³.
//
// m itself is unchanged: run the adapters with m.WithAdapters. The adapters' BaseModel is the
// directory m was loaded from.
func (m *Model) AddLoRA(cfg LoRAConfig, seed uint64) (*Adapters, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root := m.base()
	a := newAdapters(root.cfg, cfg, root.dir)
	src := rand.NewPCG(seed, 0x6167726c2e6c6f72) // the second word spells "agrl.lor"
	for l := range a.layers {
		for _, p := range a.layers[l] {
			if p == nil {
				continue
			}
			bound := 1 / math.Sqrt(float64(p.in))
			for i := range p.a {
				u := float64(src.Uint64()>>11) / (1 << 53)
				p.a[i] = float32((2*u - 1) * bound)
			}
		}
	}
	return a, nil
}

// Config returns the adapters' configuration, target modules in LoRAModules order.
func (a *Adapters) Config() LoRAConfig {
	c := a.cfg
	c.TargetModules = slices.Clone(c.TargetModules)
	return c
}

// Params lists the adapter matrices: layer by layer, the targeted projections in LoRAModules
// order, lora_A before lora_B. Their Data are the adapters' storage.
func (a *Adapters) Params() []Param {
	out := make([]Param, len(a.params))
	for i, p := range a.params {
		out[i] = Param{p.Name, slices.Clone(p.Shape), p.Data}
	}
	return out
}

// Param returns the named adapter matrix (see Params); false if there is none.
func (a *Adapters) Param(name string) (Param, bool) {
	for _, p := range a.params {
		if p.Name == name {
			return Param{p.Name, slices.Clone(p.Shape), p.Data}, true
		}
	}
	return Param{}, false
}

// NumParams is the number of adapter values: the parameters a trainer updates.
func (a *Adapters) NumParams() int {
	n := 0
	for _, p := range a.params {
		n += len(p.Data)
	}
	return n
}

// Clone returns an independent copy of a (say, the old policy of a PPO or GRPO step).
func (a *Adapters) Clone() *Adapters {
	d := newAdapters(a.model, a.cfg, a.BaseModel)
	for i, p := range a.params {
		copy(d.params[i].Data, p.Data)
	}
	return d
}

// fits reports why a cannot run on a model of configuration c: its adapters' shapes differ.
func (a *Adapters) fits(c hf.Config) error {
	if c.NumHiddenLayers != len(a.layers) {
		return fmt.Errorf("llm: the adapters are for %d layers, the model has %d", len(a.layers), c.NumHiddenLayers)
	}
	for mod := range numModules {
		if a.layers[0][mod] == nil {
			continue
		}
		aOut, aIn := moduleShape(a.model, mod)
		out, in := moduleShape(c, mod)
		if aOut != out || aIn != in {
			return fmt.Errorf("llm: the adapters' %s is for a [%d %d] weight, the model's is [%d %d]",
				loraModules[mod], aOut, aIn, out, in)
		}
	}
	return nil
}

// add adds scale·B(A x) of layer l's projection mod, if adapted, to y ([rows, out]) for x
// ([rows, in]), and returns A x ([rows, rank]; nil where mod is not adapted). A zero term is
// skipped, so adapters with B = 0 leave y bit for bit as it was.
func (a *Adapters) add(l, mod int, y, x []float32, rows int) []float32 {
	p := a.layers[l][mod]
	if p == nil {
		return nil
	}
	r := a.cfg.Rank
	var u, d []float32
	if productKernel != nil { // its products spread over the cores themselves
		u = product(x, rows, p.in, p.a, r)  // [rows, r]
		d = product(u, rows, r, p.b, p.out) // [rows, out]
	} else {
		u, d = make([]float32, rows*r), make([]float32, rows*p.out)
		parallel.Rows(rows, func(lo, hi int) { // each row as alone, over the cores
			copy(u[lo*r:hi*r], linearLoop(x[lo*p.in:hi*p.in], hi-lo, p.in, p.a, r, nil))
			copy(d[lo*p.out:hi*p.out], linearLoop(u[lo*r:hi*r], hi-lo, r, p.b, p.out, nil))
		})
	}
	for i, di := range d {
		if v := float32(a.scale * di); v != 0 {
			y[i] += v
		}
	}
	PutFloats(d)
	return u
}

// merged returns w + scale·B·A for p's weight w, the product summed and scaled in float64 and
// rounded once to float32.
func (p *adapter) merged(w []float32, scale float64) []float32 {
	r := len(p.a) / p.in
	out := make([]float32, len(w))
	row := make([]float64, p.in)
	for o := range p.out {
		clear(row)
		for k := range r {
			bk := float64(p.b[o*r+k])
			if bk == 0 {
				continue
			}
			for i, ak := range p.a[k*p.in : (k+1)*p.in] {
				row[i] += bk * float64(ak)
			}
		}
		wo := w[o*p.in : (o+1)*p.in]
		for i, s := range row {
			out[o*p.in+i] = wo[i] + float32(scale*s)
		}
	}
	return out
}

// WithAdapters returns a view of m that runs with the adapters a: W x + (Alpha/Rank)·B(A x) at
// every targeted projection. The view shares m's weights (it costs a few words, not a copy of
// the model) and reads a's matrices live, so a trainer's updates to them apply to its next
// forward pass. With a nil a it returns the model without adapters, the one m is a view of if
// it is one: the reference policy of GRPO is policy.WithAdapters(nil).
//
// Caches are per view: one made by m's NewCache cannot be used with the view, nor the other way
// round. a must fit m's shapes (adapters made for m, or for a model of the same sizes).
func (m *Model) WithAdapters(a *Adapters) (*Model, error) {
	root := m.base()
	if a == nil {
		return root, nil
	}
	if err := a.fits(root.cfg); err != nil {
		return nil, err
	}
	v := *root
	v.lora, v.root = a, root
	return &v, nil
}

// Adapters returns the adapters m runs with: nil for a model from Load, a for
// WithAdapters(a).
func (m *Model) Adapters() *Adapters { return m.lora }

// base is the model m is a view of, or m.
func (m *Model) base() *Model {
	if m.root != nil {
		return m.root
	}
	return m
}
