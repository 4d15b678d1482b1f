package llm

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"agrl.dev/agrl/hf"
)

// Share makes data the model's storage of the tensor name (a checkpoint name, as Weights lists
// it) in place of the model's own copy, which the model then drops: a model and another holder
// of the same weights — a GoMLX store on a backend whose buffers live in Go memory, say — keep
// one copy between them instead of two. data must hold the tensor's values exactly, bit for
// bit: in the checkpoint's row-major layout, or, with transposed, a projection's weight
// ([out, in]) as its transpose [in, out], which the forward pass then multiplies by as it is
// (SetLinearT's kernel, or a loop that sums in the order of the [out, in] one, so the logits do
// not change in any bit). Every value is compared first; a tensor that differs, an unknown
// name, a transposed tensor that is not a projection, or one the model no longer holds in the
// asked layout is an error that changes nothing. owner, if not nil, is kept reachable for as
// long as the model is, for memory that a finalizer of owner's would otherwise free.
//
// The caller must never modify data afterwards. Weights, WeightsView and Save transpose a
// shared projection back into a new slice when they are asked for it. Share is for setting a
// model up: call it before any forward pass, never concurrently with one; views (WithAdapters),
// earlier or later ones, read the same storage.
func (m *Model) Share(name string, data []float32, transposed bool, owner any) error {
	root := m.base()
	slot, l, mod := root.slot(name)
	if slot == nil {
		return fmt.Errorf("llm: Share: the model has no tensor %s", name)
	}
	if transposed && mod < 0 {
		return fmt.Errorf("llm: Share: %s is not a projection: only projections are held transposed", name)
	}
	cur := *slot
	if cur == nil {
		return fmt.Errorf("llm: Share: %s is held transposed already", name)
	}
	if len(data) != len(cur) {
		return fmt.Errorf("llm: Share: %s has %d values; the data has %d", name, len(cur), len(data))
	}
	if transposed {
		out, in := moduleShape(root.cfg, mod)
		if i := diffTransposed(cur, data, out, in); i >= 0 {
			return fmt.Errorf("llm: Share: %s: element [%d, %d] is %v in the model and %v in the data", name, i/in, i%in, cur[i], data[(i%in)*out+i/in])
		}
		root.layers[l].t[mod] = data
		*slot = nil
	} else {
		for i, v := range cur {
			if math.Float32bits(v) != math.Float32bits(data[i]) {
				return fmt.Errorf("llm: Share: %s: element %d is %v in the model and %v in the data", name, i, v, data[i])
			}
		}
		tiedEmbed := slot == &root.embed && root.cfg.TieWordEmbeddings
		*slot = data
		if tiedEmbed {
			root.head = data
		}
	}
	if owner != nil {
		root.owners = append(root.owners, owner)
	}
	if root.shared == nil {
		root.shared = map[string]bool{}
	}
	root.shared[name] = true
	return nil
}

// FromStorage makes a model of cfg over weights that their holder keeps and updates in place
// (a trainer's variables, say): each tensor as FromWeightsTransposed takes it, the
// projections as their transposes [in, out] — the layout a GoMLX store keeps them in. The
// model reads the slices themselves and keeps nothing it derives from them (it multiplies by
// the [in, out] projections as they are, with SetLinearT's kernel, which keeps nothing of
// them, and reads the embeddings, the norms and the head in place; only SetLinear's kernel
// may keep copies, of [out, in] weights, which this model has none of), so that what the
// holder writes into them between two forward passes is the next pass's model. Writing
// during a pass is a data race, as for any shared memory. owner, if not nil, is kept
// reachable as long as the model is, for memory that a finalizer of owner's would free.
// Every tensor is Shared; Weights and Save copy them, as for Share.
func FromStorage(cfg hf.Config, dir string, weights map[string][]float32, owner any) (*Model, error) {
	m, err := FromWeightsTransposed(cfg, dir, weights)
	if err != nil {
		return nil, err
	}
	if owner != nil {
		m.owners = append(m.owners, owner)
	}
	m.shared = map[string]bool{}
	for name := range weights {
		m.shared[name] = true
	}
	return m, nil
}

// diffTransposed returns the first index of w ([out, in]) whose value differs in any bit from
// its place in wt ([in, out]), or -1; it walks both in 16×16 tiles.
func diffTransposed(w, wt []float32, out, in int) int {
	const b = 16
	first := -1
	for o0 := 0; o0 < out; o0 += b {
		for i0 := 0; i0 < in; i0 += b {
			for o := o0; o < min(out, o0+b); o++ {
				for i := i0; i < min(in, i0+b); i++ {
					if math.Float32bits(w[o*in+i]) != math.Float32bits(wt[i*out+o]) && (first < 0 || o*in+i < first) {
						first = o*in + i
					}
				}
			}
		}
	}
	return first
}

// transposeOf returns the [cols, rows] transpose of the row-major [rows, cols] matrix a.
func transposeOf(a []float32, rows, cols int) []float32 {
	t := make([]float32, len(a))
	transposeInto(t, rows, a, rows, cols, cols)
	return t
}

// slot returns where m keeps the tensor name, and for a projection its layer and module (mod
// -1 otherwise); nil for a name the model has no tensor under. The slot of a projection held
// transposed (Share) holds nil: its values are in the layer's t.
func (m *Model) slot(name string) (p *[]float32, l, mod int) {
	switch name {
	case "model.embed_tokens.weight":
		return &m.embed, -1, -1
	case "model.norm.weight":
		return &m.norm, -1, -1
	case "lm_head.weight":
		if m.cfg.TieWordEmbeddings {
			return nil, -1, -1
		}
		return &m.head, -1, -1
	}
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return nil, -1, -1
	}
	num, field, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	if !ok || err != nil || l < 0 || l >= len(m.layers) || strconv.Itoa(l) != num {
		return nil, -1, -1
	}
	ly := &m.layers[l]
	mod = -1
	switch field {
	case "input_layernorm.weight":
		p = &ly.inputNorm
	case "post_attention_layernorm.weight":
		p = &ly.postNorm
	case "self_attn.q_proj.weight":
		p, mod = &ly.wq, qProj
	case "self_attn.k_proj.weight":
		p, mod = &ly.wk, kProj
	case "self_attn.v_proj.weight":
		p, mod = &ly.wv, vProj
	case "self_attn.o_proj.weight":
		p, mod = &ly.wo, oProj
	case "mlp.gate_proj.weight":
		p, mod = &ly.gate, gateProj
	case "mlp.up_proj.weight":
		p, mod = &ly.up, upProj
	case "mlp.down_proj.weight":
		p, mod = &ly.down, downProj
	case "self_attn.q_proj.bias":
		p = &ly.bq
	case "self_attn.k_proj.bias":
		p = &ly.bk
	case "self_attn.v_proj.bias":
		p = &ly.bv
	case "self_attn.o_proj.bias":
		p = &ly.bo
	case "self_attn.q_norm.weight":
		p = &ly.qNorm
	case "self_attn.k_norm.weight":
		p = &ly.kNorm
	case "mlp.gate_proj.bias":
		p = &ly.bGate
	case "mlp.up_proj.bias":
		p = &ly.bUp
	case "mlp.down_proj.bias":
		p = &ly.bDown
	default:
		return nil, -1, -1
	}
	if *p == nil && (mod < 0 || ly.t[mod] == nil) { // a bias or norm the family does not have
		return nil, -1, -1
	}
	return p, l, mod
}

// tensor returns the tensor name in the checkpoint's layout: the model's own slice, or for a
// projection held transposed (Share) a new slice transposed back; false for a name the model
// has no tensor under.
func (m *Model) tensor(name string) ([]float32, bool) {
	p, l, mod := m.slot(name)
	switch {
	case p == nil:
		return nil, false
	case *p == nil:
		out, in := moduleShape(m.cfg, mod)
		return transposeOf(m.layers[l].t[mod], in, out), true
	}
	return *p, true
}

// Shared lists the tensors the model holds in another owner's memory (Share), in
// hf.Config.Tensors order.
func (m *Model) Shared() []string {
	root := m.base()
	var names []string
	for _, name := range root.names() {
		if root.shared[name] {
			names = append(names, name)
		}
	}
	return names
}

// names lists the model's tensors, in hf.Config.Tensors order.
func (m *Model) names() []string {
	specs := m.cfg.Tensors()
	n := make([]string, len(specs))
	for i, s := range specs {
		n[i] = s.Name
	}
	return n
}
