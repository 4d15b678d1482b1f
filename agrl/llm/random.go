package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"agrl.dev/agrl/hf"
)

// Tiny returns the configuration of a tiny model of family f, for tests: vocabulary 256,
// hidden size 64, 2 layers, 4 query heads sharing 2 key-value heads of 16 dimensions, MLP
// width 128, context 256, bfloat16 weights, BOS 1 and EOS 2. The family's own traits and
// defaults are kept: Llama has rms_norm_eps 1e-5 and rope_theta 500000 (as Llama 3), Qwen2
// has q, k and v biases and rope_theta 10⁶, and Qwen3 has rope_theta 10⁶, tied embeddings
// and head_dim 32, so that its heads (4·32 = 128) are wider than the hidden size, as in the
// real Qwen3 models. f must be hf.Llama, hf.Qwen2 or hf.Qwen3; for any other the config does
// not validate.
func Tiny(f hf.Family) hf.Config {
	c := hf.Config{
		Architecture: architectures[f], Family: f,
		VocabSize: 256, HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16,
		RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 256,
		BOSTokenID: 1, EOSTokenIDs: []int{2}, TorchDType: "bfloat16",
	}
	switch f {
	case hf.Llama:
		c.RMSNormEps, c.RopeTheta = 1e-5, 500000
	case hf.Qwen3:
		c.HeadDim, c.TieWordEmbeddings = 32, true
	}
	return c
}

// architectures names the config.json architecture of each family.
var architectures = map[hf.Family]string{
	hf.Llama: "LlamaForCausalLM",
	hf.Qwen2: "Qwen2ForCausalLM",
	hf.Qwen3: "Qwen3ForCausalLM",
}

// The scale of WriteRandom's weights: large enough that attention patterns and logits are far
// from uniform in a model of width 64, small enough that nothing saturates.
const (
	randomStd     = 0.1 // matrices, embeddings and biases: N(0, randomStd²)
	randomNormStd = 0.1 // RMSNorm weights: 1 + N(0, randomNormStd²)
)

// WriteRandom writes a model of configuration cfg with seeded random weights to dir (created
// if needed), laid out as transformers saves a model: config.json, and the weights in
// model.safetensors or, with shards > 1, in that many files model-0000i-of-0000n.safetensors
// named by model.safetensors.index.json. It replaces a checkpoint of the other layout in dir.
//
// Every tensor of cfg.Tensors is drawn, in that order, from one PCG stream seeded by seed:
// RMSNorm weights 1 + N(0, 0.1²), everything else N(0, 0.1²). They are stored in the type that
// cfg.TorchDType names: "bfloat16" (or "") as BF16, "float16" as F16, "float32" as F32. The
// files are deterministic: the same arguments write the same bytes.
func WriteRandom(dir string, cfg hf.Config, seed uint64, shards int) error {
	if cfg.TorchDType == "" {
		cfg.TorchDType = "bfloat16"
	}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	var tensor func([]float32, ...int) hf.Tensor
	switch cfg.TorchDType {
	case "bfloat16":
		tensor = hf.BF16Tensor
	case "float16":
		tensor = hf.F16Tensor
	case "float32":
		tensor = hf.F32Tensor
	default:
		errs = append(errs, fmt.Errorf("torch_dtype %q is not bfloat16, float16 or float32", cfg.TorchDType))
	}
	if len(errs) > 0 {
		return fmt.Errorf("llm: WriteRandom: %w", errors.Join(errs...))
	}
	specs := cfg.Tensors()
	if shards < 1 {
		shards = 1
	}
	if shards > len(specs) {
		return fmt.Errorf("llm: WriteRandom: %d shards for %d tensors", shards, len(specs))
	}

	rng := normals{src: rand.NewPCG(seed, 0x6167726c2e6c6c6d)} // the second word spells "agrl.llm"
	tensors := make([]hf.Tensor, len(specs))
	total := 0
	for i, s := range specs {
		data := make([]float32, hf.TensorInfo{Shape: s.Shape}.Len())
		mean, std := float32(0), randomStd
		if isNormWeight(s.Name) {
			mean, std = 1, randomNormStd
		}
		for j := range data {
			data[j] = mean + float32(std*rng.next())
		}
		tensors[i] = tensor(data, s.Shape...)
		total += len(tensors[i].Data)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := writeConfig(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt"}
	if shards == 1 {
		all := make(map[string]hf.Tensor, len(specs))
		for i, s := range specs {
			all[s.Name] = tensors[i]
		}
		if err := hf.WriteFile(filepath.Join(dir, hf.SingleFile), all, meta); err != nil {
			return fmt.Errorf("llm: %w", err)
		}
		return removeIfExists(filepath.Join(dir, hf.IndexFile))
	}

	// Shards take consecutive tensors, about total/shards bytes each.
	index := struct {
		Metadata  map[string]int    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int{"total_size": total}, make(map[string]string, len(specs))}
	next, done := 0, 0
	for k := range shards {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, shards)
		part := make(map[string]hf.Tensor)
		target := total * (k + 1) / shards // the last shard's is total: it takes the rest
		// Leave at least one tensor for each later shard.
		for next < len(specs) && (len(part) == 0 || done < target) && len(specs)-next > shards-k-1 {
			part[specs[next].Name] = tensors[next]
			index.WeightMap[specs[next].Name] = file
			done += len(tensors[next].Data)
			next++
		}
		if err := hf.WriteFile(filepath.Join(dir, file), part, meta); err != nil {
			return fmt.Errorf("llm: %w", err)
		}
	}
	data, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, hf.IndexFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	return removeIfExists(filepath.Join(dir, hf.SingleFile))
}

// isNormWeight reports whether the named tensor is an RMSNorm's weight (input_layernorm,
// post_attention_layernorm, q_norm, k_norm, model.norm).
func isNormWeight(name string) bool { return strings.HasSuffix(name, "norm.weight") }

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("llm: %w", err)
	}
	return nil
}

// writeConfig writes cfg as transformers writes a config.json: the fields the family's
// configuration class saves, keys sorted, indented by two spaces.
func writeConfig(path string, cfg hf.Config) error {
	var rope any // null: plain RoPE
	if s := cfg.RopeScaling; s.Type != "" {
		r := map[string]any{"rope_type": s.Type, "factor": s.Factor}
		switch s.Type {
		case hf.Llama3Rope:
			r["low_freq_factor"] = s.LowFreqFactor
			r["high_freq_factor"] = s.HighFreqFactor
			r["original_max_position_embeddings"] = s.OriginalMaxPositionEmbeddings
		case hf.YarnRope: // the optional fields only where set, as the config had them
			for key, v := range map[string]float64{
				"attention_factor": s.AttentionFactor,
				"beta_fast":        s.BetaFast,
				"beta_slow":        s.BetaSlow,
				"mscale":           s.Mscale,
				"mscale_all_dim":   s.MscaleAllDim,
			} {
				if v != 0 {
					r[key] = v
				}
			}
			if s.OriginalMaxPositionEmbeddings != 0 {
				r["original_max_position_embeddings"] = s.OriginalMaxPositionEmbeddings
			}
			if s.NoTruncate {
				r["truncate"] = false
			}
		}
		rope = r
	}
	var bos, eos any
	if cfg.BOSTokenID >= 0 {
		bos = cfg.BOSTokenID
	}
	switch len(cfg.EOSTokenIDs) {
	case 0:
	case 1:
		eos = cfg.EOSTokenIDs[0]
	default:
		eos = cfg.EOSTokenIDs
	}
	j := map[string]any{
		"architectures":           []string{cfg.Architecture},
		"model_type":              string(cfg.Family),
		"vocab_size":              cfg.VocabSize,
		"hidden_size":             cfg.HiddenSize,
		"intermediate_size":       cfg.IntermediateSize,
		"num_hidden_layers":       cfg.NumHiddenLayers,
		"num_attention_heads":     cfg.NumAttentionHeads,
		"num_key_value_heads":     cfg.NumKeyValueHeads,
		"hidden_act":              "silu",
		"max_position_embeddings": cfg.MaxPositionEmbeddings,
		"rms_norm_eps":            cfg.RMSNormEps,
		"rope_theta":              cfg.RopeTheta,
		"rope_scaling":            rope,
		"tie_word_embeddings":     cfg.TieWordEmbeddings,
		"torch_dtype":             cfg.TorchDType,
		"bos_token_id":            bos,
		"eos_token_id":            eos,
		"initializer_range":       randomStd,
		"attention_dropout":       0.0,
		"use_cache":               true,
	}
	switch cfg.Family {
	case hf.Llama:
		j["head_dim"] = cfg.HeadDim
		j["attention_bias"] = cfg.AttentionBias
		j["mlp_bias"] = cfg.MLPBias
		j["pretraining_tp"] = 1
	case hf.Qwen2, hf.Qwen3:
		if cfg.Family == hf.Qwen3 {
			j["head_dim"] = cfg.HeadDim
			j["attention_bias"] = cfg.AttentionBias
		}
		j["use_sliding_window"] = false
		j["sliding_window"] = nil
		j["max_window_layers"] = cfg.NumHiddenLayers
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	return nil
}

// normals draws standard normal variates from a PCG stream by the Box–Muller transform, so
// that the values depend on nothing but the seed (not on math/rand's algorithms).
type normals struct {
	src    *rand.PCG
	spare  float64
	hasOne bool
}

func (n *normals) next() float64 {
	if n.hasOne {
		n.hasOne = false
		return n.spare
	}
	// u1 in (0, 1], u2 in [0, 1): 53-bit uniforms.
	u1 := (float64(n.src.Uint64()>>11) + 1) / (1 << 53)
	u2 := float64(n.src.Uint64()>>11) / (1 << 53)
	r := math.Sqrt(-2 * math.Log(u1))
	n.spare, n.hasOne = r*math.Sin(2*math.Pi*u2), true
	return r * math.Cos(2*math.Pi*u2)
}
