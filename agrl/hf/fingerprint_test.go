package hf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFingerprint: the same weights give the same digest wherever they lie; other values, a
// different size or another shard's bytes give another; a sharded checkpoint is read through
// its index; a directory without weights is an error.
func TestFingerprint(t *testing.T) {
	write := func(dir, file string, fill float32, n int) {
		t.Helper()
		v := make([]float32, n)
		for i := range v {
			v[i] = fill + float32(i%7)
		}
		if err := WriteFile(filepath.Join(dir, file), map[string]Tensor{"w": F32Tensor(v, n)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	digest := func(dir string) string {
		t.Helper()
		d, err := Fingerprint(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b, c, d := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	write(a, SingleFile, 1, 100000)
	write(b, SingleFile, 1, 100000)
	write(c, SingleFile, 2, 100000)
	write(d, SingleFile, 1, 100001)
	if digest(a) != digest(b) || len(digest(a)) != 32 {
		t.Errorf("two copies of one checkpoint: %s and %s", digest(a), digest(b))
	}
	if digest(a) == digest(c) || digest(a) == digest(d) {
		t.Error("other values, or one value more, gave the same digest")
	}

	// Sharded: the index's files, each once, in name order.
	s := t.TempDir()
	write(s, "model-00001-of-00002.safetensors", 1, 5000)
	write(s, "model-00002-of-00002.safetensors", 3, 7000)
	index := `{"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(s, IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	first := digest(s)
	write(s, "model-00002-of-00002.safetensors", 4, 7000)
	if digest(s) == first {
		t.Error("a changed shard gave the same digest")
	}
	if _, err := Fingerprint(t.TempDir()); err == nil || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("an empty directory: %v", err)
	}
	odd := t.TempDir()
	if err := os.Mkdir(filepath.Join(odd, SingleFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Fingerprint(odd); err == nil {
		t.Error("a directory named model.safetensors gave a digest")
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, SingleFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if digest(empty) == "" {
		t.Error("an empty file gave no digest")
	}
}
