package llm

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"agrl.dev/agrl/hf"
)

// update rewrites the checkpoints in testdata: go test ./agrl/llm -run TestTestdata -update
// (then run scripts/llm_reference.py for their expected.json, see testdata/README.md).
var update = flag.Bool("update", false, "rewrite the random checkpoints in testdata")

// A variant is one of the checkpoints in testdata.
type variant struct {
	name   string
	cfg    hf.Config
	seed   uint64
	shards int
}

// variants are the checkpoints in testdata/<name>: one of each family, and variations.
func variants() []variant {
	llama := Tiny(hf.Llama) // Llama 3 shaped, untied, plain RoPE

	tied := Tiny(hf.Llama) // Llama 3.2 / SmolLM2 shaped: tied embeddings, llama3 RoPE scaling
	tied.TieWordEmbeddings = true
	tied.MaxPositionEmbeddings = 1024
	// With head_dim 16 and theta 500000 the wavelengths are 6.3, 33, 169, 877, ...: with these
	// factors the first is kept, the second interpolated and the rest divided by 8.
	tied.RopeScaling = hf.RopeScaling{Type: hf.Llama3Rope, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
		OriginalMaxPositionEmbeddings: 128}
	tied.EOSTokenIDs = []int{2, 3}

	// Everything the others leave out: multi-query attention (one KV head), head_dim 8, every
	// optional bias, float32 weights in two shards.
	sharded := hf.Config{
		Architecture: "LlamaForCausalLM", Family: hf.Llama,
		VocabSize: 96, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 128,
		AttentionBias: true, MLPBias: true,
		BOSTokenID: -1, EOSTokenIDs: []int{0}, TorchDType: "float32",
	}

	// YaRN as Qwen2.5 and Qwen3 document it for long contexts (factor 4, the original context
	// given, everything else default). With head_dim 16, theta 10⁶ and an original context of
	// 4096 the band runs from pair 1 (floor of 1.75) to pair 4 (ceil of 3.75): pairs 0 and 1
	// are kept, 2 and 3 blended by 1/3 and 2/3, 4 to 7 divided by 4; cos and sin are
	// multiplied by 1 + 0.1·ln 4. The context, 20480, is 5 times the original one: the factor
	// is used as given, not that ratio (as transformers does since its fix of issue 38224).
	qwenYarn := Tiny(hf.Qwen2)
	qwenYarn.MaxPositionEmbeddings = 20480
	qwenYarn.RopeScaling = hf.RopeScaling{Type: hf.YarnRope, Factor: 4, OriginalMaxPositionEmbeddings: 4096}

	// YaRN with every option: the original context left to max_position_embeddings (256),
	// betas 16 and 2 (band from pair 0.57 to 1.84, not rounded), and DeepSeek's mscale pair
	// for the attention factor (1 + 0.1·ln 8)/(1 + 0.05·ln 8).
	llamaYarn := Tiny(hf.Llama)
	llamaYarn.RopeScaling = hf.RopeScaling{Type: hf.YarnRope, Factor: 8, BetaFast: 16, BetaSlow: 2,
		Mscale: 1, MscaleAllDim: 0.5, NoTruncate: true}

	return []variant{
		{"llama", llama, 1, 1},
		{"llama3-tied", tied, 2, 1},
		{"qwen2", Tiny(hf.Qwen2), 3, 1},
		{"qwen3", Tiny(hf.Qwen3), 4, 1},
		{"llama-sharded", sharded, 5, 2},
		{"qwen2-yarn", qwenYarn, 6, 1},
		{"llama-yarn", llamaYarn, 7, 1},
	}
}

// TestTestdata checks that WriteRandom still writes the committed checkpoints byte for byte,
// so the README's command regenerates them (and -update does).
func TestTestdata(t *testing.T) {
	for _, v := range variants() {
		dir := filepath.Join("testdata", v.name)
		if *update {
			if err := WriteRandom(dir, v.cfg, v.seed, v.shards); err != nil {
				t.Fatal(err)
			}
			continue
		}
		tmp := t.TempDir()
		if err := WriteRandom(tmp, v.cfg, v.seed, v.shards); err != nil {
			t.Fatal(err)
		}
		written, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range written {
			got, _ := os.ReadFile(filepath.Join(tmp, e.Name()))
			want, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Errorf("%s: %v", v.name, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s: WriteRandom writes other bytes than the committed file (run with -update and regenerate expected.json)", v.name, e.Name())
			}
		}
	}
}
