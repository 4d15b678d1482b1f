package hf

import (
	"fmt"
	"slices"
	"strings"
)

// A TensorSpec is one tensor a model expects: its name as transformers writes it in a
// checkpoint, and its shape (a Linear weight is [out, in]).
type TensorSpec struct {
	Name  string
	Shape []int
}

// Tensors lists the tensors a checkpoint of c holds, named and shaped as transformers saves
// them, in the order of its state_dict: model.embed_tokens.weight, then for each layer the
// attention (q, k, v, o projections, their biases where the family has them, Qwen3's q_norm
// and k_norm), the MLP (gate, up, down) and the two RMSNorms, then model.norm.weight and, unless
// the embeddings are tied, lm_head.weight. c should be valid (see Validate).
func (c Config) Tensors() []TensorSpec {
	h, q, kv := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{c.VocabSize, h}}}
	add := func(name string, shape ...int) { specs = append(specs, TensorSpec{name, shape}) }
	for i := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"self_attn.q_proj.weight", q, h) // (heads·head_dim, hidden)
		if c.QKVBias() {
			add(p+"self_attn.q_proj.bias", q)
		}
		add(p+"self_attn.k_proj.weight", kv, h) // (kv_heads·head_dim, hidden)
		if c.QKVBias() {
			add(p+"self_attn.k_proj.bias", kv)
		}
		add(p+"self_attn.v_proj.weight", kv, h)
		if c.QKVBias() {
			add(p+"self_attn.v_proj.bias", kv)
		}
		add(p+"self_attn.o_proj.weight", h, q)
		if c.OutputBias() {
			add(p+"self_attn.o_proj.bias", h)
		}
		if c.Family == Qwen3 {
			add(p+"self_attn.q_norm.weight", c.HeadDim) // one RMSNorm shared by all heads
			add(p+"self_attn.k_norm.weight", c.HeadDim)
		}
		for _, m := range []struct {
			name    string
			out, in int
		}{{"gate_proj", c.IntermediateSize, h}, {"up_proj", c.IntermediateSize, h}, {"down_proj", h, c.IntermediateSize}} {
			add(p+"mlp."+m.name+".weight", m.out, m.in)
			if c.MLPBias {
				add(p+"mlp."+m.name+".bias", m.out)
			}
		}
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
	}
	add("model.norm.weight", h)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", c.VocabSize, h)
	}
	return specs
}

// CheckError is Check's error: every way a checkpoint differs from what its config expects.
type CheckError struct {
	Missing    []TensorSpec // expected tensors the checkpoint lacks, in Tensors order
	Unexpected []TensorInfo // tensors the config does not expect, by name
	// Wrong lists tensors present under the expected name but of the wrong shape, or of a
	// dtype Float32s cannot read, one description each, in Tensors order.
	Wrong []string
}

// Error lists every problem, one per line after a summary line.
func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hf: the checkpoint does not match its config: %d missing, %d unexpected, %d wrong",
		len(e.Missing), len(e.Unexpected), len(e.Wrong))
	lines := 0
	line := func(format string, args ...any) {
		if lines < maxCheckLines {
			fmt.Fprintf(&b, "\n\t"+format, args...)
		}
		lines++
	}
	for _, s := range e.Missing {
		line("missing %s %v", s.Name, s.Shape)
	}
	for _, t := range e.Unexpected {
		line("unexpected %s %s %v", t.Name, t.DType, t.Shape)
	}
	for _, w := range e.Wrong {
		line("wrong %s", w)
	}
	if lines > maxCheckLines {
		fmt.Fprintf(&b, "\n\t… and %d more", lines-maxCheckLines)
	}
	return b.String()
}

// maxCheckLines is how many of a CheckError's tensors its message lists (the counts cover
// them all): a config of the wrong size can miss thousands.
const maxCheckLines = 40

// NumParams is the number of parameters of the model: the sum of the sizes of Tensors.
func (c Config) NumParams() int {
	n := 0
	for _, t := range c.Tensors() {
		n += TensorInfo{Shape: t.Shape}.Len()
	}
	return n
}

// Check compares the tensors of src with c.Tensors: names, shapes, and that every tensor is
// F32, F16 or BF16. It returns nil, an error from Validate, or a *CheckError listing every
// missing, unexpected and wrong tensor.
func (c Config) Check(src Source) error {
	if err := c.Validate(); err != nil {
		return err
	}
	e := &CheckError{}
	want := c.Tensors()
	expected := make(map[string]bool, len(want))
	for _, s := range want {
		expected[s.Name] = true
		t, ok := src.Info(s.Name)
		switch {
		case !ok:
			e.Missing = append(e.Missing, s)
		case !slices.Equal(t.Shape, s.Shape):
			e.Wrong = append(e.Wrong, fmt.Sprintf("%s: shape %v, want %v", s.Name, t.Shape, s.Shape))
		case !t.DType.Float():
			e.Wrong = append(e.Wrong, fmt.Sprintf("%s: dtype %s, want F32, F16 or BF16", s.Name, t.DType))
		}
	}
	for _, name := range src.Names() {
		if !expected[name] {
			t, _ := src.Info(name)
			e.Unexpected = append(e.Unexpected, t)
		}
	}
	if len(e.Missing)+len(e.Unexpected)+len(e.Wrong) == 0 {
		return nil
	}
	return e
}
