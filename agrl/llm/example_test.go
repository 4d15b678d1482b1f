package llm_test

import (
	"fmt"
	"log"
	"os"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// A tiny random Qwen3 written as transformers would save it, loaded back, and decoded
// greedily with the KV cache: the prompt in one Step, then one token per Next.
func Example() {
	dir, err := os.MkdirTemp("", "llm-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := llm.WriteRandom(dir, llm.Tiny(hf.Qwen3), 42, 1); err != nil {
		log.Fatal(err)
	}

	m, err := llm.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	cfg := m.Config()
	fmt.Println(cfg.Architecture, "vocab", cfg.VocabSize, "layers", cfg.NumHiddenLayers,
		"heads", cfg.NumAttentionHeads, "kv heads", cfg.NumKeyValueHeads, "head_dim", cfg.HeadDim)

	prompt := []int32{1, 72, 105}
	c := m.NewCache()
	logits, err := m.Next(c, prompt) // scores of the token after the prompt
	if err != nil {
		log.Fatal(err)
	}
	var out []int32
	for range 8 {
		tok := argmax(logits)
		out = append(out, tok)
		if logits, err = m.Next(c, []int32{tok}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("greedy:", out, "cache length", c.Len())

	// The same tokens come out of full recomputation.
	all, err := m.Logits(append(prompt, out[:7]...))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("last token by recomputation:", argmax(all[len(all)-1]))
	// Output:
	// Qwen3ForCausalLM vocab 256 layers 2 heads 4 kv heads 2 head_dim 32
	// greedy: [211 188 188 254 29 152 50 22] cache length 11
	// last token by recomputation: 22
}

func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}
