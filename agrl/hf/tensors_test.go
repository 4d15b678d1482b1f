package hf

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tiny is a one-layer config whose sizes are all different, so that a swapped dimension
// shows: vocab 10, hidden 8, intermediate 12, 4 heads of 4 (16 ≠ hidden), 2 KV heads.
func tiny(arch Family, edit func(*Config)) Config {
	archs := map[Family]string{Llama: "LlamaForCausalLM", Qwen2: "Qwen2ForCausalLM", Qwen3: "Qwen3ForCausalLM"}
	c := Config{
		Architecture: archs[arch], Family: arch,
		VocabSize: 10, HiddenSize: 8, IntermediateSize: 12, NumHiddenLayers: 1,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 4,
		RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 64, BOSTokenID: -1,
	}
	if edit != nil {
		edit(&c)
	}
	return c
}

func specs(list ...any) []TensorSpec {
	var s []TensorSpec
	for i := 0; i < len(list); i += 2 {
		s = append(s, TensorSpec{list[i].(string), list[i+1].([]int)})
	}
	return s
}

func TestTensors(t *testing.T) {
	const l = "model.layers.0."
	for _, c := range []struct {
		name string
		cfg  Config
		want []TensorSpec
	}{
		{"llama", tiny(Llama, nil), specs(
			"model.embed_tokens.weight", []int{10, 8},
			l+"self_attn.q_proj.weight", []int{16, 8},
			l+"self_attn.k_proj.weight", []int{8, 8},
			l+"self_attn.v_proj.weight", []int{8, 8},
			l+"self_attn.o_proj.weight", []int{8, 16},
			l+"mlp.gate_proj.weight", []int{12, 8},
			l+"mlp.up_proj.weight", []int{12, 8},
			l+"mlp.down_proj.weight", []int{8, 12},
			l+"input_layernorm.weight", []int{8},
			l+"post_attention_layernorm.weight", []int{8},
			"model.norm.weight", []int{8},
			"lm_head.weight", []int{10, 8},
		)},
		{"llama with biases, tied", tiny(Llama, func(c *Config) { c.AttentionBias, c.MLPBias, c.TieWordEmbeddings = true, true, true }), specs(
			"model.embed_tokens.weight", []int{10, 8},
			l+"self_attn.q_proj.weight", []int{16, 8},
			l+"self_attn.q_proj.bias", []int{16},
			l+"self_attn.k_proj.weight", []int{8, 8},
			l+"self_attn.k_proj.bias", []int{8},
			l+"self_attn.v_proj.weight", []int{8, 8},
			l+"self_attn.v_proj.bias", []int{8},
			l+"self_attn.o_proj.weight", []int{8, 16},
			l+"self_attn.o_proj.bias", []int{8},
			l+"mlp.gate_proj.weight", []int{12, 8},
			l+"mlp.gate_proj.bias", []int{12},
			l+"mlp.up_proj.weight", []int{12, 8},
			l+"mlp.up_proj.bias", []int{12},
			l+"mlp.down_proj.weight", []int{8, 12},
			l+"mlp.down_proj.bias", []int{8},
			l+"input_layernorm.weight", []int{8},
			l+"post_attention_layernorm.weight", []int{8},
			"model.norm.weight", []int{8},
		)},
		{"qwen2", tiny(Qwen2, func(c *Config) { c.TieWordEmbeddings = true }), specs(
			"model.embed_tokens.weight", []int{10, 8},
			l+"self_attn.q_proj.weight", []int{16, 8},
			l+"self_attn.q_proj.bias", []int{16},
			l+"self_attn.k_proj.weight", []int{8, 8},
			l+"self_attn.k_proj.bias", []int{8},
			l+"self_attn.v_proj.weight", []int{8, 8},
			l+"self_attn.v_proj.bias", []int{8},
			l+"self_attn.o_proj.weight", []int{8, 16},
			l+"mlp.gate_proj.weight", []int{12, 8},
			l+"mlp.up_proj.weight", []int{12, 8},
			l+"mlp.down_proj.weight", []int{8, 12},
			l+"input_layernorm.weight", []int{8},
			l+"post_attention_layernorm.weight", []int{8},
			"model.norm.weight", []int{8},
		)},
		{"qwen3", tiny(Qwen3, nil), specs(
			"model.embed_tokens.weight", []int{10, 8},
			l+"self_attn.q_proj.weight", []int{16, 8},
			l+"self_attn.k_proj.weight", []int{8, 8},
			l+"self_attn.v_proj.weight", []int{8, 8},
			l+"self_attn.o_proj.weight", []int{8, 16},
			l+"self_attn.q_norm.weight", []int{4},
			l+"self_attn.k_norm.weight", []int{4},
			l+"mlp.gate_proj.weight", []int{12, 8},
			l+"mlp.up_proj.weight", []int{12, 8},
			l+"mlp.down_proj.weight", []int{8, 12},
			l+"input_layernorm.weight", []int{8},
			l+"post_attention_layernorm.weight", []int{8},
			"model.norm.weight", []int{8},
			"lm_head.weight", []int{10, 8},
		)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := c.cfg.Tensors(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Tensors =\n%v\nwant\n%v", got, c.want)
			}
		})
	}
	three := tiny(Llama, func(c *Config) { c.NumHiddenLayers = 3 }).Tensors()
	if len(three) != 1+3*9+2 || three[len(three)-3].Name != "model.layers.2.post_attention_layernorm.weight" {
		t.Errorf("3 layers: %d tensors, third from last %q", len(three), three[len(three)-3].Name)
	}
}

// TestTensorsParameterCounts checks Tensors against the published parameter counts of real
// checkpoints: every name and shape has to be right for the sums to come out.
func TestTensorsParameterCounts(t *testing.T) {
	for _, c := range []struct {
		name, json string
		params     int
	}{
		{"Llama 3.2 1B", llama32Config, 1_235_814_400},
		{"Qwen2.5 0.5B", qwen25Config, 494_032_768},
		{"Qwen3 0.6B", qwen3Config, 596_049_920},
		{"SmolLM2 135M", smolConfig, 134_515_008},
	} {
		cfg, err := ParseConfig([]byte(c.json))
		if err != nil {
			t.Fatal(err)
		}
		if n := cfg.NumParams(); n != c.params {
			t.Errorf("%s: %d parameters, want %d", c.name, cfg.NumParams(), c.params)
		}
	}
}

// writeCheckpoint writes a checkpoint of zeros with the given tensors into a new directory.
func writeCheckpoint(t *testing.T, specs []TensorSpec, edit func(map[string]Tensor)) *Checkpoint {
	t.Helper()
	tensors := make(map[string]Tensor)
	for _, s := range specs {
		tensors[s.Name] = BF16Tensor(make([]float32, TensorInfo{Shape: s.Shape}.Len()), s.Shape...)
	}
	if edit != nil {
		edit(tensors)
	}
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, SingleFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCheck(t *testing.T) {
	cfg := tiny(Qwen3, func(c *Config) { c.NumHiddenLayers = 2 })
	if err := cfg.Check(writeCheckpoint(t, cfg.Tensors(), nil)); err != nil {
		t.Fatalf("a matching checkpoint: %v", err)
	}

	broken := writeCheckpoint(t, cfg.Tensors(), func(m map[string]Tensor) {
		delete(m, "model.norm.weight")
		delete(m, "model.layers.1.self_attn.k_norm.weight")
		m["model.layers.0.self_attn.rotary_emb.inv_freq"] = F32Tensor(make([]float32, 2))
		m["model.layers.0.self_attn.q_proj.weight"] = BF16Tensor(make([]float32, 128), 8, 16) // transposed
		m["model.layers.1.mlp.up_proj.weight"] = Tensor{DType: I8, Shape: []int{12, 8}, Data: make([]byte, 96)}
	})
	err := cfg.Check(broken)
	var ce *CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want a *CheckError", err)
	}
	if len(ce.Missing) != 2 || ce.Missing[0].Name != "model.layers.1.self_attn.k_norm.weight" || ce.Missing[1].Name != "model.norm.weight" {
		t.Errorf("Missing = %v", ce.Missing)
	}
	if len(ce.Unexpected) != 1 || ce.Unexpected[0].Name != "model.layers.0.self_attn.rotary_emb.inv_freq" {
		t.Errorf("Unexpected = %v", ce.Unexpected)
	}
	if len(ce.Wrong) != 2 {
		t.Errorf("Wrong = %q", ce.Wrong)
	}
	for _, w := range []string{
		"2 missing, 1 unexpected, 2 wrong",
		"missing model.layers.1.self_attn.k_norm.weight [4]",
		"missing model.norm.weight [8]",
		"unexpected model.layers.0.self_attn.rotary_emb.inv_freq F32 [2]",
		"wrong model.layers.0.self_attn.q_proj.weight: shape [8 16], want [16 8]",
		"wrong model.layers.1.mlp.up_proj.weight: dtype I8, want F32, F16 or BF16",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}

	// A config of far more layers than its checkpoint: the message counts every missing
	// tensor and lists the first maxCheckLines.
	deep := cfg
	deep.NumHiddenLayers = 1000
	err = deep.Check(writeCheckpoint(t, cfg.Tensors(), nil))
	if !errors.As(err, &ce) || len(ce.Missing) != 998*11 {
		t.Fatalf("a 1000-layer config on a 2-layer checkpoint: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "10978 missing, 0 unexpected, 0 wrong") ||
		strings.Count(msg, "\n\tmissing ") != maxCheckLines || !strings.HasSuffix(msg, fmt.Sprintf("\n\t… and %d more", 10978-maxCheckLines)) {
		t.Errorf("the message lists %d lines: %.300q…", strings.Count(msg, "\n"), msg)
	}

	// A tied config rejects an lm_head; an untied one misses it.
	tied := tiny(Llama, func(c *Config) { c.TieWordEmbeddings = true })
	untied := tiny(Llama, nil)
	ck := writeCheckpoint(t, untied.Tensors(), nil)
	if err := tied.Check(ck); !errors.As(err, &ce) || len(ce.Unexpected) != 1 || ce.Unexpected[0].Name != "lm_head.weight" {
		t.Errorf("tied config, untied checkpoint: %v", err)
	}
	if err := untied.Check(writeCheckpoint(t, tied.Tensors(), nil)); !errors.As(err, &ce) || len(ce.Missing) != 1 {
		t.Errorf("untied config, tied checkpoint: %v", err)
	}

	bad := tiny(Llama, func(c *Config) { c.NumKeyValueHeads = 3 })
	if err := bad.Check(ck); err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "invalid config") {
		t.Errorf("Check with an invalid config = %v", err)
	}
}
