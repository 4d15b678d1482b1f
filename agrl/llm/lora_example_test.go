package llm_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// LoRA adapters on a tiny random Qwen3: the policy is the base model's view with adapters, the
// reference policy the base model itself (no second copy of the weights). Fresh adapters
// change nothing; after an update the policy moves away from the reference; then the adapters
// are saved for PEFT and merged into a model directory for transformers or vLLM.
func ExampleModel_WithAdapters() {
	dir, err := os.MkdirTemp("", "llm-lora-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := llm.WriteRandom(filepath.Join(dir, "base"), llm.Tiny(hf.Qwen3), 42, 1); err != nil {
		log.Fatal(err)
	}
	ref, err := llm.Load(filepath.Join(dir, "base"))
	if err != nil {
		log.Fatal(err)
	}
	lora, err := ref.AddLoRA(llm.LoRAConfig{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}}, 1)
	if err != nil {
		log.Fatal(err)
	}
	policy, err := ref.WithAdapters(lora)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(lora.Params()), "adapter matrices,", lora.NumParams(), "parameters")

	ids := []int32{1, 72, 105}
	p, _ := policy.Next(policy.NewCache(), ids)
	r, _ := ref.Next(ref.NewCache(), ids)
	fmt.Printf("fresh adapters: policy %.3f, reference %.3f\n", p[0], r[0])

	// What a trainer's update does: change B in place.
	for _, m := range lora.Params() {
		if strings.HasSuffix(m.Name, "lora_B.weight") {
			for i := range m.Data {
				m.Data[i] = 0.05
			}
		}
	}
	p, _ = policy.Next(policy.NewCache(), ids)
	r, _ = ref.Next(ref.NewCache(), ids)
	fmt.Printf("after an update: policy %.3f, reference %.3f\n", p[0], r[0])

	if err := lora.Save(filepath.Join(dir, "adapter")); err != nil {
		log.Fatal(err)
	}
	if err := ref.Save(filepath.Join(dir, "merged"), lora, hf.F32); err != nil {
		log.Fatal(err)
	}
	merged, err := llm.Load(filepath.Join(dir, "merged"))
	if err != nil {
		log.Fatal(err)
	}
	q, _ := merged.Next(merged.NewCache(), ids)
	fmt.Printf("merged and reloaded: %.3f\n", q[0])
	// Output:
	// 8 adapter matrices, 5120 parameters
	// fresh adapters: policy -0.532, reference -0.532
	// after an update: policy -0.773, reference -0.532
	// merged and reloaded: -0.773
}
