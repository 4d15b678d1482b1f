package llm

import (
	"fmt"
	"slices"
	"strings"

	"agrl.dev/agrl/hf"
)

// shapes are the configurations of published models (their config.json, as released), and the
// tiny test shapes, by name.
var shapes = map[string]func() hf.Config{
	"tiny-qwen3": func() hf.Config { return Tiny(hf.Qwen3) },
	"tiny-qwen2": func() hf.Config { return Tiny(hf.Qwen2) },
	"tiny-llama": func() hf.Config { return Tiny(hf.Llama) },
	// HuggingFaceTB/SmolLM2-135M
	"smollm2-135m": func() hf.Config {
		return hf.Config{Architecture: "LlamaForCausalLM", Family: hf.Llama, VocabSize: 49152, HiddenSize: 576,
			IntermediateSize: 1536, NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64,
			RMSNormEps: 1e-5, RopeTheta: 100000, MaxPositionEmbeddings: 8192, TieWordEmbeddings: true,
			BOSTokenID: 1, EOSTokenIDs: []int{2}, TorchDType: "bfloat16"}
	},
	// Qwen/Qwen3-0.6B
	"qwen3-0.6b": func() hf.Config {
		return hf.Config{Architecture: "Qwen3ForCausalLM", Family: hf.Qwen3, VocabSize: 151936, HiddenSize: 1024,
			IntermediateSize: 3072, NumHiddenLayers: 28, NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128,
			RMSNormEps: 1e-6, RopeTheta: 1000000, MaxPositionEmbeddings: 40960, TieWordEmbeddings: true,
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}, TorchDType: "bfloat16"}
	},
	// Qwen/Qwen2.5-0.5B-Instruct
	"qwen2.5-0.5b": func() hf.Config {
		return hf.Config{Architecture: "Qwen2ForCausalLM", Family: hf.Qwen2, VocabSize: 151936, HiddenSize: 896,
			IntermediateSize: 4864, NumHiddenLayers: 24, NumAttentionHeads: 14, NumKeyValueHeads: 2, HeadDim: 64,
			RMSNormEps: 1e-6, RopeTheta: 1000000, MaxPositionEmbeddings: 32768, TieWordEmbeddings: true,
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}, TorchDType: "bfloat16"}
	},
}

// ShapeNames lists the names Shape knows, sorted.
func ShapeNames() []string {
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Shape returns the configuration of a published model ("smollm2-135m", "qwen3-0.6b",
// "qwen2.5-0.5b") or of a tiny test shape ("tiny-qwen3", "tiny-qwen2", "tiny-llama", see Tiny),
// for WriteRandom: benchmarks and checks at real shapes without downloading any weights.
func Shape(name string) (hf.Config, error) {
	f, ok := shapes[strings.ToLower(name)]
	if !ok {
		return hf.Config{}, fmt.Errorf("llm: unknown shape %q; known: %s", name, strings.Join(ShapeNames(), ", "))
	}
	return f(), nil
}
