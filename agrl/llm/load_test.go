package llm

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
)

// writeTiny writes a random tiny model of family f to a new temporary directory.
func writeTiny(t *testing.T, f hf.Family, shards int) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteRandom(dir, Tiny(f), 11, shards); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rewrite reads dir's model.safetensors, lets edit change its tensors, and writes it back.
func rewrite(t *testing.T, dir string, edit func(map[string]hf.Tensor)) {
	t.Helper()
	editTensors(t, filepath.Join(dir, hf.SingleFile), edit)
}

// editTensors reads the safetensors file at path, lets edit change its tensors, and writes
// them back.
func editTensors(t *testing.T, path string, edit func(map[string]hf.Tensor)) {
	t.Helper()
	f, err := hf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]hf.Tensor{}
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		data, err := f.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		tensors[name] = hf.Tensor{DType: info.DType, Shape: info.Shape, Data: data}
	}
	f.Close()
	edit(tensors)
	if err := hf.WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
}

func wantLoadError(t *testing.T, dir string, parts ...string) error {
	t.Helper()
	m, err := Load(dir)
	if err == nil {
		t.Fatalf("Load succeeded (%v), want an error containing %q", m != nil, parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q\ndoes not contain %q", err, p)
		}
	}
	return err
}

func TestLoadMissingTensor(t *testing.T) {
	dir := writeTiny(t, hf.Qwen2, 1)
	rewrite(t, dir, func(m map[string]hf.Tensor) {
		delete(m, "model.layers.1.self_attn.k_proj.bias")
		delete(m, "lm_head.weight")
	})
	err := wantLoadError(t, dir, "missing model.layers.1.self_attn.k_proj.bias [32]", "missing lm_head.weight [256 64]", dir)
	var ce *hf.CheckError
	if !errors.As(err, &ce) || len(ce.Missing) != 2 {
		t.Errorf("want a *hf.CheckError with 2 missing tensors, got %#v", err)
	}
}

func TestLoadWrongShape(t *testing.T) {
	dir := writeTiny(t, hf.Llama, 1)
	rewrite(t, dir, func(m map[string]hf.Tensor) {
		name := "model.layers.0.mlp.up_proj.weight"
		w := m[name]
		m[name] = hf.Tensor{DType: w.DType, Shape: []int{64, 128}, Data: w.Data} // transposed
	})
	wantLoadError(t, dir, "model.layers.0.mlp.up_proj.weight: shape [64 128], want [128 64]")
}

func TestLoadUnexpectedTensor(t *testing.T) {
	// A Qwen3 checkpoint claimed as Llama: q_norm and k_norm are not Llama's (and its wide heads
	// would not fit a Llama with no head_dim, but this config keeps head_dim 32).
	dir := writeTiny(t, hf.Qwen3, 1)
	cfgPath := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(cfgPath)
	data = []byte(strings.NewReplacer(`"Qwen3ForCausalLM"`, `"LlamaForCausalLM"`, `"qwen3"`, `"llama"`).Replace(string(data)))
	os.WriteFile(cfgPath, data, 0o644)
	wantLoadError(t, dir, "0 missing, 4 unexpected, 0 wrong", "unexpected model.layers.0.self_attn.q_norm.weight BF16 [32]")
}

func TestLoadUnknownArchitecture(t *testing.T) {
	dir := writeTiny(t, hf.Llama, 1)
	cfgPath := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(cfgPath)
	data = []byte(strings.NewReplacer(`"LlamaForCausalLM"`, `"MistralForCausalLM"`, `"llama"`, `"mistral"`).Replace(string(data)))
	os.WriteFile(cfgPath, data, 0o644)
	wantLoadError(t, dir, `unsupported architecture "MistralForCausalLM"`, "LlamaForCausalLM", "config.json")
}

func TestLoadNoFiles(t *testing.T) {
	dir := t.TempDir()
	wantLoadError(t, dir, "config.json")
	dir = writeTiny(t, hf.Llama, 1)
	os.Remove(filepath.Join(dir, hf.SingleFile))
	wantLoadError(t, dir, hf.IndexFile)
}

// A corrupted checkpoint fails with an error, never a panic or a model: a truncated file, a
// scrambled header, a shard missing from a sharded checkpoint, and weights that decode to NaN.
func TestLoadCorrupted(t *testing.T) {
	t.Run("truncated", func(t *testing.T) {
		dir := writeTiny(t, hf.Llama, 1)
		path := filepath.Join(dir, hf.SingleFile)
		st, _ := os.Stat(path)
		os.Truncate(path, st.Size()-100)
		wantLoadError(t, dir, hf.SingleFile)
	})
	t.Run("header", func(t *testing.T) {
		dir := writeTiny(t, hf.Qwen3, 1)
		path := filepath.Join(dir, hf.SingleFile)
		data, _ := os.ReadFile(path)
		n := binary.LittleEndian.Uint64(data)
		for i := 8 + n/3; i < 8+n/3+40; i++ {
			data[i] = 'x'
		}
		os.WriteFile(path, data, 0o644)
		wantLoadError(t, dir, hf.SingleFile)
	})
	t.Run("header length", func(t *testing.T) {
		dir := writeTiny(t, hf.Qwen2, 1)
		path := filepath.Join(dir, hf.SingleFile)
		data, _ := os.ReadFile(path)
		binary.LittleEndian.PutUint64(data, math.MaxUint64/2)
		os.WriteFile(path, data, 0o644)
		wantLoadError(t, dir, hf.SingleFile)
	})
	t.Run("shard", func(t *testing.T) {
		dir := writeTiny(t, hf.Llama, 2)
		os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		wantLoadError(t, dir, "model-00002-of-00002.safetensors", "missing")
	})
	t.Run("NaN", func(t *testing.T) {
		dir := writeTiny(t, hf.Llama, 1)
		rewrite(t, dir, func(m map[string]hf.Tensor) {
			w := m["model.layers.1.self_attn.v_proj.weight"]
			data := slices.Clone(w.Data)
			binary.LittleEndian.PutUint16(data[2*5:], 0x7fc0) // a bfloat16 NaN at element 5
			m["model.layers.1.self_attn.v_proj.weight"] = hf.Tensor{DType: w.DType, Shape: w.Shape, Data: data}
		})
		wantLoadError(t, dir, "model.layers.1.self_attn.v_proj.weight: element 5 is NaN")
	})
}

// However many shards hold them, the same weights give the same logits, bit for bit.
func TestWriteRandomShards(t *testing.T) {
	ids := []int32{1, 100, 7, 250, 3}
	var ref [][]float32
	for _, shards := range []int{1, 2, 5} {
		dir := writeTiny(t, hf.Qwen3, shards)
		if shards > 1 {
			ck, err := hf.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(ck.Shards()); got != shards {
				t.Errorf("%d shards written, want %d", got, shards)
			}
			ck.Close()
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = got
			continue
		}
		for i := range got {
			if !slices.Equal(got[i], ref[i]) {
				t.Fatalf("%d shards: logits at %d differ from one file's", shards, i)
			}
		}
	}
	// Rewriting a directory in the other layout replaces the old one.
	dir := writeTiny(t, hf.Qwen3, 3)
	if err := WriteRandom(dir, Tiny(hf.Qwen3), 11, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, hf.IndexFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the index is still there: %v", err)
	}
}

func TestWriteRandomErrors(t *testing.T) {
	cfg := Tiny(hf.Llama)
	cfg.TorchDType = "int8"
	cfg.HiddenSize = 0
	err := WriteRandom(t.TempDir(), cfg, 1, 1)
	if err == nil || !strings.Contains(err.Error(), `torch_dtype "int8"`) || !strings.Contains(err.Error(), "hidden_size is 0") {
		t.Errorf("error %v, want both problems", err)
	}
	if err := WriteRandom(t.TempDir(), Tiny(hf.Llama), 1, 1000); err == nil {
		t.Error("1000 shards: no error")
	}
	if err := WriteRandom(t.TempDir(), Tiny("gpt2"), 1, 1); err == nil || !strings.Contains(err.Error(), "architecture") {
		t.Errorf("unknown family: error %v", err)
	}
}

// Every dtype WriteRandom writes loads, and F16 and F32 weights give logits close to BF16's
// (they are the same draws, rounded differently).
func TestWriteRandomDTypes(t *testing.T) {
	ids := []int32{5, 6, 7}
	var logits [][]float32
	for _, dt := range []string{"float32", "float16", "bfloat16"} {
		cfg := Tiny(hf.Qwen2)
		cfg.TorchDType = dt
		dir := t.TempDir()
		if err := WriteRandom(dir, cfg, 3, 1); err != nil {
			t.Fatal(err)
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, got[len(got)-1])
	}
	if d := maxDiff32(logits[0], logits[1]); d > 0.01 {
		t.Errorf("float16 vs float32 weights: logits differ by %g", d)
	}
	if d := maxDiff32(logits[0], logits[2]); d > 0.1 || d == 0 {
		t.Errorf("bfloat16 vs float32 weights: logits differ by %g", d)
	}
}
