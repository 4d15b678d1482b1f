package hf

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Configs shaped like the published config.json of each family (trimmed of the fields
// ParseConfig does not read, which it ignores).
const (
	llama32Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}`
	qwen25Config = `{
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_size": 896,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_sliding_window": false,
  "vocab_size": 151936
}`
	qwen3Config = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_size": 1024,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 151936
}`
	smolConfig = `{
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_size": 576,
  "intermediate_size": 1536,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "rms_norm_eps": 1e-05,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 49152
}`
)

func TestParseConfigFamilies(t *testing.T) {
	for _, c := range []struct {
		name string
		json string
		want Config
	}{
		{"Llama 3.2 1B", llama32Config, Config{
			Architecture: "LlamaForCausalLM", Family: Llama,
			VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64,
			RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:           RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			MaxPositionEmbeddings: 131072, TieWordEmbeddings: true,
			BOSTokenID: 128000, EOSTokenIDs: []int{128001, 128008, 128009}, TorchDType: "bfloat16",
		}},
		{"Qwen2.5 0.5B", qwen25Config, Config{
			Architecture: "Qwen2ForCausalLM", Family: Qwen2,
			VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24,
			NumAttentionHeads: 14, NumKeyValueHeads: 2, HeadDim: 64, // 896/14
			RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 32768, TieWordEmbeddings: true,
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}, TorchDType: "bfloat16",
		}},
		{"Qwen3 0.6B", qwen3Config, Config{
			Architecture: "Qwen3ForCausalLM", Family: Qwen3,
			VocabSize: 151936, HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28,
			NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, // not 1024/16
			RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 40960, TieWordEmbeddings: true,
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}, TorchDType: "bfloat16",
		}},
		{"SmolLM2 135M", smolConfig, Config{
			Architecture: "LlamaForCausalLM", Family: Llama,
			VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536, NumHiddenLayers: 30,
			NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64,
			RMSNormEps: 1e-5, RopeTheta: 100000, MaxPositionEmbeddings: 8192, TieWordEmbeddings: true,
			BOSTokenID: 1, EOSTokenIDs: []int{2}, TorchDType: "bfloat16",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("ParseConfig =\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

// minimal is the smallest config ParseConfig accepts: the required sizes.
func minimal(arch, modelType, extra string) string {
	return `{"architectures": ["` + arch + `"], "model_type": "` + modelType + `", "vocab_size": 100,
		"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4` + extra + `}`
}

func TestParseConfigDefaults(t *testing.T) {
	for _, c := range []struct {
		name       string
		json       string
		headDim    int
		maxPos     int
		qkv, oBias bool
	}{
		{"llama", minimal("LlamaForCausalLM", "llama", ""), 16, 2048, false, false},
		{"qwen2", minimal("Qwen2ForCausalLM", "qwen2", ""), 16, 32768, true, false},
		{"qwen3 defaults head_dim to 128", minimal("Qwen3ForCausalLM", "qwen3", ""), 128, 32768, false, false},
		{"llama attention_bias", minimal("LlamaForCausalLM", "llama", `, "attention_bias": true`), 16, 2048, true, true},
		{"qwen2 ignores attention_bias", minimal("Qwen2ForCausalLM", "qwen2", `, "attention_bias": true`), 16, 32768, true, false},
		{"qwen3 attention_bias", minimal("Qwen3ForCausalLM", "qwen3", `, "attention_bias": true`), 128, 32768, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HeadDim != c.headDim || cfg.MaxPositionEmbeddings != c.maxPos || cfg.QKVBias() != c.qkv || cfg.OutputBias() != c.oBias {
				t.Errorf("head_dim %d, max_position_embeddings %d, biases qkv %v o %v; want %d, %d, %v, %v",
					cfg.HeadDim, cfg.MaxPositionEmbeddings, cfg.QKVBias(), cfg.OutputBias(), c.headDim, c.maxPos, c.qkv, c.oBias)
			}
			if cfg.NumKeyValueHeads != 4 || cfg.RMSNormEps != 1e-6 || cfg.RopeTheta != 10000 || cfg.TieWordEmbeddings ||
				cfg.BOSTokenID != -1 || cfg.EOSTokenIDs != nil || cfg.RopeScaling != (RopeScaling{}) || cfg.MLPBias {
				t.Errorf("defaults: %+v", cfg)
			}
		})
	}
}

func TestParseConfigVariants(t *testing.T) {
	// transformers 5 writes rope_theta and the scaling into rope_parameters, and dtype for
	// torch_dtype.
	v5 := minimal("LlamaForCausalLM", "llama", `, "dtype": "float32", "rope_parameters": {"rope_type": "llama3",
		"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		"original_max_position_embeddings": 8192}`)
	cfg, err := ParseConfig([]byte(v5))
	if err != nil {
		t.Fatal(err)
	}
	want := RopeScaling{Type: Llama3Rope, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	if cfg.RopeTheta != 500000 || cfg.RopeScaling != want || cfg.TorchDType != "float32" {
		t.Errorf("rope_parameters: theta %v, scaling %+v, dtype %q", cfg.RopeTheta, cfg.RopeScaling, cfg.TorchDType)
	}
	// The older "type" key, "default", nulls for optional fields, and mlp_bias.
	for _, c := range []struct{ extra, check string }{
		{`, "rope_scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}`, "type"},
		{`, "rope_scaling": {"rope_type": "default"}`, "default"},
		{`, "num_key_value_heads": null, "head_dim": null, "bos_token_id": null, "eos_token_id": null`, "nulls"},
		{`, "mlp_bias": true`, "mlp_bias"},
	} {
		cfg, err := ParseConfig([]byte(minimal("LlamaForCausalLM", "llama", c.extra)))
		if err != nil {
			t.Fatalf("%s: %v", c.check, err)
		}
		switch c.check {
		case "type":
			if cfg.RopeScaling != want {
				t.Errorf("type: %+v", cfg.RopeScaling)
			}
		case "default":
			if cfg.RopeScaling != (RopeScaling{}) {
				t.Errorf("default: %+v", cfg.RopeScaling)
			}
		case "nulls":
			if cfg.NumKeyValueHeads != 4 || cfg.HeadDim != 16 || cfg.BOSTokenID != -1 || cfg.EOSTokenIDs != nil {
				t.Errorf("nulls: %+v", cfg)
			}
		case "mlp_bias":
			if !cfg.MLPBias {
				t.Error("mlp_bias not read")
			}
		}
	}
	// mlp_bias means nothing to Qwen.
	if cfg, _ := ParseConfig([]byte(minimal("Qwen2ForCausalLM", "qwen2", `, "mlp_bias": true`))); cfg.MLPBias {
		t.Error("Qwen2 with mlp_bias: MLPBias set")
	}
	// No model_type: the architecture names the family.
	noType := `{"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}`
	if cfg, err := ParseConfig([]byte(noType)); err != nil || cfg.Family != Qwen3 {
		t.Errorf("no model_type: %v, %v", cfg.Family, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	llama := func(extra string) string { return minimal("LlamaForCausalLM", "llama", extra) }
	for _, c := range []struct {
		name string
		json string
		want []string
	}{
		{"unknown architecture", minimal("MistralForCausalLM", "mistral", ""),
			[]string{`unsupported architecture "MistralForCausalLM" (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)`}},
		{"no architecture", `{"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}`,
			[]string{"no architecture (supported: LlamaForCausalLM"}},
		{"two architectures", `{"architectures": ["LlamaForCausalLM", "Qwen2ForCausalLM"]}`, []string{"want one"}},
		{"model_type mismatch", minimal("LlamaForCausalLM", "qwen2", ""), []string{`model_type "qwen2" does not match architecture LlamaForCausalLM`}},
		{"heads do not divide hidden", llama(`, "num_attention_heads": 3`), []string{"hidden_size 64 is not a multiple of num_attention_heads 3"}},
		{"kv heads do not divide heads", llama(`, "num_key_value_heads": 3`), []string{"num_key_value_heads 3 does not divide num_attention_heads 4"}},
		{"zero vocab", llama(`, "vocab_size": 0`), []string{"vocab_size is 0; want > 0"}},
		{"negative layers", llama(`, "num_hidden_layers": -1`), []string{"num_hidden_layers is -1; want > 0"}},
		{"a hundred million layers", llama(`, "num_hidden_layers": 100000000`), []string{"num_hidden_layers is 100000000; want at most 4096"}},
		{"overflowing sizes", llama(`, "head_dim": 4611686018427387904, "vocab_size": 1000000000000, "intermediate_size": 9007199254740992`),
			[]string{"head_dim is 4611686018427387904; want at most 16384", "vocab_size is 1000000000000; want at most 16777216",
				"intermediate_size is 9007199254740992; want at most 1048576"}},
		{"zero kv heads", llama(`, "num_key_value_heads": 0`), []string{"num_key_value_heads is 0"}},
		{"zero head_dim", llama(`, "head_dim": 0`), []string{"head_dim is 0"}},
		{"odd head_dim", llama(`, "head_dim": 15`), []string{"head_dim 15 is odd"}},
		{"missing sizes", `{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}`,
			[]string{"no vocab_size", "no hidden_size", "no intermediate_size", "no num_hidden_layers", "no num_attention_heads"}},
		{"zero eps", llama(`, "rms_norm_eps": 0`), []string{"rms_norm_eps is 0"}},
		{"negative theta", llama(`, "rope_theta": -1`), []string{"rope_theta is -1"}},
		{"unsupported rope", llama(`, "rope_scaling": {"rope_type": "longrope", "factor": 4}`),
			[]string{`unsupported rope_type "longrope"`, `"llama3", "linear", "yarn"`}},
		{"dynamic rope", llama(`, "rope_scaling": {"type": "dynamic", "factor": 2}`),
			[]string{`rope_type "dynamic" is not supported`, "KV cache"}},
		{"linear rope without factor", llama(`, "rope_scaling": {"rope_type": "linear"}`), []string{"rope_scaling (linear): factor is 0; want ≥ 1"}},
		{"yarn factor below 1", llama(`, "rope_scaling": {"rope_type": "yarn", "factor": 0.5}`), []string{"rope_scaling (yarn): factor is 0.5; want ≥ 1"}},
		{"yarn zero attention_factor", llama(`, "rope_scaling": {"rope_type": "yarn", "factor": 4, "attention_factor": 0}`),
			[]string{"attention_factor is 0; want > 0"}},
		{"yarn bad options", llama(`, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_slow": -1, "mscale": -2, "original_max_position_embeddings": -5}`),
			[]string{"beta_slow is -1", "mscale is -2", "original_max_position_embeddings is -5"}},
		{"yarn inverted betas", llama(`, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 2, "beta_slow": 8}`),
			[]string{"beta_fast 2 is below beta_slow 8"}},
		{"yarn theta 1", llama(`, "rope_theta": 1, "rope_scaling": {"rope_type": "yarn", "factor": 4}`), []string{"rope_theta is 1; yarn scaling needs > 1"}},
		{"yarn overflowing mscale", llama(`, "rope_scaling": {"rope_type": "yarn", "factor": 1e308, "mscale": 1e308, "mscale_all_dim": 1}`),
			[]string{"rope_scaling (yarn) gives the attention factor +Inf; want a positive, finite number"}},
		{"linear underflowing factor", llama(`, "rope_theta": 1e300, "rope_scaling": {"rope_type": "linear", "factor": 1e300}`),
			[]string{"rope_scaling (linear) gives RoPE frequency 1 the value 0"}},
		{"llama3 rope incomplete", llama(`, "rope_scaling": {"rope_type": "llama3", "factor": 8}`),
			[]string{"low_freq_factor is 0", "high_freq_factor 0 is not above low_freq_factor 0", "original_max_position_embeddings is 0"}},
		{"llama3 rope inverted band", llama(`, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 8192}`),
			[]string{"high_freq_factor 1 is not above low_freq_factor 4"}},
		{"eos out of vocab", llama(`, "eos_token_id": [2, 100]`), []string{"token id 100 is outside the vocabulary [0, 100)"}},
		{"bos negative", llama(`, "bos_token_id": -5`), []string{"token id -5"}},
		{"eos a string", llama(`, "eos_token_id": "</s>"`), []string{"eos_token_id", "neither an integer nor a list"}},
		{"size a string", llama(`, "hidden_size": "64"`), []string{"hidden_size"}},
		{"not JSON", `{`, []string{"unexpected end of JSON input"}},
		{"gelu", llama(`, "hidden_act": "gelu"`), []string{`hidden_act "gelu" is not supported`}},
		{"sliding window", minimal("Qwen2ForCausalLM", "qwen2", `, "use_sliding_window": true`), []string{"sliding-window"}},
		{"every problem at once", llama(`, "vocab_size": 0, "num_key_value_heads": 3, "rms_norm_eps": -1`),
			[]string{"vocab_size is 0", "num_key_value_heads 3 does not divide", "rms_norm_eps is -1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.json))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append([]string{"hf: config.json: "}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	os.WriteFile(path, []byte(smolConfig), 0o644)
	cfg, err := LoadConfig(path)
	if err != nil || cfg.HiddenSize != 576 {
		t.Errorf("LoadConfig = %+v, %v", cfg, err)
	}
	os.WriteFile(path, []byte(minimal("GPT2LMHeadModel", "gpt2", "")), 0o644)
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "GPT2LMHeadModel") {
		t.Errorf("LoadConfig(gpt2) error = %v, want one naming the file and the architecture", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "absent.json")); err == nil {
		t.Error("LoadConfig(absent): no error")
	}
}

// The YaRN block Qwen2.5 and Qwen3 tell users to add for long contexts, a transformers 5
// rope_parameters one with every option, and linear scaling parse as written.
func TestParseConfigRopeScalings(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		want        RopeScaling
	}{
		{"qwen yarn", `, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}`,
			RopeScaling{Type: YarnRope, Factor: 4, OriginalMaxPositionEmbeddings: 32768}},
		{"yarn, every option", `, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40, "beta_fast": 32,
			"beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.5, "attention_factor": 1.25, "truncate": false,
			"original_max_position_embeddings": 4096}`,
			RopeScaling{Type: YarnRope, Factor: 40, OriginalMaxPositionEmbeddings: 4096, AttentionFactor: 1.25,
				BetaFast: 32, BetaSlow: 1, Mscale: 1, MscaleAllDim: 0.5, NoTruncate: true}},
		{"yarn truncate true", `, "rope_scaling": {"rope_type": "yarn", "factor": 2, "truncate": true}`,
			RopeScaling{Type: YarnRope, Factor: 2}},
		{"linear", `, "rope_scaling": {"type": "linear", "factor": 2.0}`, RopeScaling{Type: LinearRope, Factor: 2}},
	} {
		cfg, err := ParseConfig([]byte(minimal("Qwen2ForCausalLM", "qwen2", c.extra)))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if cfg.RopeScaling != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, cfg.RopeScaling, c.want)
		}
	}
}
