package hf_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"agrl.dev/agrl/hf"
)

// A model directory from config.json to float32 weights: parse the config, open the
// checkpoint, check it holds exactly the tensors the config implies, read one.
func Example() {
	dir, err := os.MkdirTemp("", "hf-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A tiny Llama-shaped model, written the way transformers would save it.
	config := `{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
		"vocab_size": 8, "hidden_size": 4, "intermediate_size": 6, "num_hidden_layers": 1,
		"num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": true,
		"eos_token_id": [1, 2], "torch_dtype": "bfloat16"}`
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644)
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		log.Fatal(err)
	}
	tensors := make(map[string]hf.Tensor)
	for _, s := range cfg.Tensors() {
		n := hf.TensorInfo{Shape: s.Shape}.Len()
		data := make([]float32, n)
		for j := range data {
			data[j] = float32(j) / 3
		}
		tensors[s.Name] = hf.BF16Tensor(data, s.Shape...)
	}
	if err := hf.WriteFile(filepath.Join(dir, hf.SingleFile), tensors, map[string]string{"format": "pt"}); err != nil {
		log.Fatal(err)
	}

	// Loading it back.
	ck, err := hf.OpenDir(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	fmt.Println("check:", cfg.Check(ck))
	const q = "model.layers.0.self_attn.q_proj.weight"
	info, _ := ck.Info(q)
	w, err := ck.Float32s(q)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.DType, info.Shape, w[:3]) // 1/3 and 2/3 rounded to bfloat16
	fmt.Println("head_dim", cfg.HeadDim, "eos", cfg.EOSTokenIDs, "tensors", len(ck.Names()))
	// Output:
	// check: <nil>
	// BF16 [4 4] [0 0.33398438 0.66796875]
	// head_dim 2 eos [1 2] tensors 11
}

// Tensors spells out a checkpoint's contents from config.json alone.
func ExampleConfig_Tensors() {
	cfg, err := hf.ParseConfig([]byte(`{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
		"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
		"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
		"tie_word_embeddings": true}`))
	if err != nil {
		log.Fatal(err)
	}
	specs := cfg.Tensors()
	for _, s := range specs[:7] {
		fmt.Println(s.Name, s.Shape)
	}
	fmt.Println(len(specs), "tensors")
	// Output:
	// model.embed_tokens.weight [151936 1024]
	// model.layers.0.self_attn.q_proj.weight [2048 1024]
	// model.layers.0.self_attn.k_proj.weight [1024 1024]
	// model.layers.0.self_attn.v_proj.weight [1024 1024]
	// model.layers.0.self_attn.o_proj.weight [1024 2048]
	// model.layers.0.self_attn.q_norm.weight [128]
	// model.layers.0.self_attn.k_norm.weight [128]
	// 310 tensors
}

// ParseConfig reports every problem at once.
func ExampleParseConfig() {
	_, err := hf.ParseConfig([]byte(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
		"vocab_size": 100, "hidden_size": 64, "intermediate_size": 0, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 3}`))
	fmt.Println(err)
	// Output:
	// hf: config.json: intermediate_size is 0; want > 0
	// num_key_value_heads 3 does not divide num_attention_heads 4
}

func ExampleFloat32ToBF16() {
	for _, f := range []float32{1, 3.14159265, 1.00390625, 1.01171875} {
		b := hf.Float32ToBF16(f)
		fmt.Printf("%-10v -> %#04x = %v\n", f, b, hf.BF16ToFloat32(b))
	}
	// Output:
	// 1          -> 0x3f80 = 1
	// 3.1415927  -> 0x4049 = 3.140625
	// 1.0039062  -> 0x3f80 = 1
	// 1.0117188  -> 0x3f82 = 1.015625
}
