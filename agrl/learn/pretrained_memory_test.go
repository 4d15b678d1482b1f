package learn

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/internal/hubtest"
)

// TestModelFits: a model whose float32 weights (LoRA) or five copies of them (full
// fine-tuning on the go backend) exceed the usable memory is refused with the sizes named,
// and LoadPretrained refuses it before reading a single weight; at the bound it is accepted.
func TestModelFits(t *testing.T) {
	dir := tinyFamily(t, hf.Qwen3)
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	weights := int64(cfg.NumParams()) * 4
	lora, full := agrl.Pretrained(dir).LoRA(4, 8).Spec(), agrl.Pretrained(dir).Full().Spec()
	adapters := lora.LoRA.AdapterParams(cfg) * 16 // float32 adapters, gradients and two moments
	huge := agrl.Pretrained(dir).LoRA(60000, 8).Spec()
	gpuFull := agrl.Pretrained(dir).Full().Backend("xla:cuda").Spec()
	for _, c := range []struct {
		name   string
		spec   agrl.PretrainedSpec
		usable int64
		ok     bool
	}{
		{"lora at its weights and adapters", lora, weights + adapters, true},
		{"lora below its weights and adapters", lora, weights + adapters - 1, false},
		{"rank 60000 below its adapters", huge, weights + huge.LoRA.AdapterParams(cfg)*16 - 1, false},
		{"rank 4 with the room rank 60000 lacks", lora, weights + huge.LoRA.AdapterParams(cfg)*16 - 1, true},
		{"full at five copies", full, 5 * weights, true},
		{"full below five copies", full, 5*weights - 1, false},
		{"full on another backend: the host's copy", gpuFull, weights, true},
		{"unknown memory", full, 0, true},
	} {
		err := checkModelFits(dir, c.spec, c.usable)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), "GiB") || strings.Contains(err.Error(), "LoRA adapters instead") != c.spec.Full ||
			strings.Contains(err.Error(), fmt.Sprintf("LoRA adapters at rank %d", c.spec.LoRA.Rank)) == c.spec.Full) {
			t.Errorf("%s: %v does not name the sizes and the way out", c.name, err)
		}
	}

	// Before the weights are read: a model directory whose safetensors file is garbage is
	// refused for its size, not for the file.
	bad := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if err := os.WriteFile(filepath.Join(bad, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(bad, "model.safetensors"), []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(f func() int64) { usableMemory = f }(usableMemory)
	usableMemory = func() int64 { return weights }
	_, err = LoadPretrained(agrl.Pretrained(bad).Full(), 1)
	if err == nil || !strings.Contains(err.Error(), "does not fit this machine's memory") {
		t.Errorf("LoadPretrained of a model too large for full fine-tuning: %v", err)
	}
	usableMemory = func() int64 { return 6 * weights }
	if _, err = LoadPretrained(agrl.Pretrained(bad).Full(), 1); err == nil || strings.Contains(err.Error(), "memory") {
		t.Errorf("LoadPretrained with room: %v, want the broken weights' error", err)
	}

	// A hub id: refused once its config.json is there, before the weights are downloaded
	// (the download is not marked complete); with room, downloaded and loaded.
	srv := hubtest.Serve(t, map[string]string{"agrl/tiny": dir})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("AGRL_HUB_CACHE", t.TempDir())
	usableMemory = func() int64 { return weights }
	_, err = LoadPretrained(agrl.Pretrained("agrl/tiny").Full(), 1)
	if err == nil || !strings.HasPrefix(err.Error(), "agrl: ") || !strings.Contains(err.Error(), "does not fit this machine's memory") {
		t.Errorf("LoadPretrained of a hub model too large: %v", err)
	}
	if _, ok := hf.Cached("agrl/tiny", hf.HubOptions{}); ok {
		t.Error("the refused hub model's download is marked complete")
	}
	usableMemory = func() int64 { return 6 * weights }
	if _, err = LoadPretrained(agrl.Pretrained("agrl/tiny").Full(), 1); err != nil {
		t.Errorf("LoadPretrained of the hub model with room: %v", err)
	}
}
