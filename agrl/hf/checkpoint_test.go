package hf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeDir writes shards (file name -> tensors) and, if index is not "", the index file.
func writeDir(t *testing.T, shards map[string]map[string]Tensor, index string) string {
	t.Helper()
	dir := t.TempDir()
	for name, tensors := range shards {
		if err := WriteFile(filepath.Join(dir, name), tensors, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	if index != "" {
		if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

// twoShards puts x and y in the first shard and z in the second.
func twoShards() map[string]map[string]Tensor {
	return map[string]map[string]Tensor{
		shard1: {"x": F32Tensor([]float32{1}), "y": BF16Tensor([]float32{2, 3})},
		shard2: {"z": F32Tensor([]float32{4, 5, 6})},
	}
}

const goodIndex = `{"metadata": {"total_size": 20}, "weight_map": {
	"x": "model-00001-of-00002.safetensors",
	"y": "model-00001-of-00002.safetensors",
	"z": "model-00002-of-00002.safetensors"}}`

func TestOpenDirSharded(t *testing.T) {
	c, err := OpenDir(writeDir(t, twoShards(), goodIndex))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Names(); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Errorf("Names = %q", got)
	}
	if got := c.Shards(); !slices.Equal(got, []string{shard1, shard2}) {
		t.Errorf("Shards = %q", got)
	}
	if c.Shard("y") != shard1 || c.Shard("z") != shard2 || c.Shard("w") != "" {
		t.Errorf("Shard(y, z, w) = %q, %q, %q", c.Shard("y"), c.Shard("z"), c.Shard("w"))
	}
	if got, err := c.Float32s("z"); err != nil || !slices.Equal(got, []float32{4, 5, 6}) {
		t.Errorf("Float32s(z) = %v, %v", got, err)
	}
	if got, err := c.Float32s("y"); err != nil || !slices.Equal(got, []float32{2, 3}) {
		t.Errorf("Float32s(y) = %v, %v", got, err)
	}
	if info, ok := c.Info("y"); !ok || info.DType != BF16 {
		t.Errorf("Info(y) = %+v, %v", info, ok)
	}
	if b, err := c.Bytes("x"); err != nil || string(b) != "\x00\x00\x80\x3f" {
		t.Errorf("Bytes(x) = %q, %v", b, err)
	}
	if _, err := c.Float32s("w"); err == nil || !strings.Contains(err.Error(), `no tensor "w"`) {
		t.Errorf("Float32s(w) error = %v", err)
	}
}

func TestOpenDirSingle(t *testing.T) {
	// model.safetensors wins over an index, as in transformers.
	shards := map[string]map[string]Tensor{SingleFile: {"w": F32Tensor([]float32{7})}}
	c, err := OpenDir(writeDir(t, shards, `not even JSON`))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Float32s("w"); err != nil || !slices.Equal(got, []float32{7}) {
		t.Errorf("Float32s(w) = %v, %v", got, err)
	}
	if c.Shard("w") != SingleFile || !slices.Equal(c.Names(), []string{"w"}) {
		t.Errorf("Shard(w) = %q, Names = %q", c.Shard("w"), c.Names())
	}
}

func TestOpenDirErrors(t *testing.T) {
	withoutShard2 := twoShards()
	delete(withoutShard2, shard2)
	zInBoth := twoShards()
	zInBoth[shard1]["z"] = F32Tensor([]float32{4, 5, 6})
	noY := twoShards()
	delete(noY[shard1], "y")
	for _, c := range []struct {
		name   string
		shards map[string]map[string]Tensor
		index  string
		want   []string
	}{
		{"empty dir", nil, "", []string{"holds neither model.safetensors nor model.safetensors.index.json"}},
		{"missing shard", withoutShard2, goodIndex, []string{IndexFile, "shard " + shard2 + " is missing", `"z"`}},
		{"tensor absent from its shard", noY, goodIndex, []string{`tensor "y" is not in its shard ` + shard1}},
		{"tensor in two shards", zInBoth, goodIndex, []string{`tensor "z" is in both ` + shard1 + " and " + shard2}},
		{"tensor not in the index", twoShards(), `{"weight_map": {"x": "` + shard1 + `", "z": "` + shard2 + `"}}`,
			[]string{"shard " + shard1 + ` holds tensor "y", which the index does not list`}},
		{"tensor in the wrong shard", twoShards(), `{"weight_map": {"x": "` + shard1 + `", "y": "` + shard2 + `", "z": "` + shard2 + `"}}`,
			[]string{`holds tensor "y", which the index puts in ` + shard2, `tensor "y" is not in its shard ` + shard2}},
		{"path in the index", twoShards(), `{"weight_map": {"x": "../model.safetensors"}}`, []string{`shard "../model.safetensors" is not a file name`}},
		{"duplicate index entry", twoShards(), `{"weight_map": {"x": "` + shard1 + `", "x": "` + shard2 + `"}}`, []string{`duplicate key "x"`}},
		{"no weight_map", twoShards(), `{"metadata": {}}`, []string{"no weight_map"}},
		{"empty weight_map", twoShards(), `{"weight_map": {}}`, []string{"weight_map is empty"}},
		{"shard not a string", twoShards(), `{"weight_map": {"x": 1}}`, []string{`tensor "x": shard 1 is not a string`}},
		{"index not JSON", twoShards(), `{"weight_map": `, []string{IndexFile}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck, err := OpenDir(writeDir(t, c.shards, c.index))
			if err == nil {
				ck.Close()
				t.Fatal("no error")
			}
			for _, w := range append([]string{"hf: "}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestOpenDirCorruptShard(t *testing.T) {
	dir := writeDir(t, map[string]map[string]Tensor{shard1: {"x": F32Tensor([]float32{1})}},
		`{"weight_map": {"x": "`+shard1+`", "q": "`+shard2+`"}}`)
	os.WriteFile(filepath.Join(dir, shard2), withLength(10_000_000_000, "{}"), 0o644)
	_, err := OpenDir(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, shard2)+": header length 10000000000 exceeds") {
		t.Errorf("error = %v, want one naming the corrupt shard", err)
	}
}

func TestOpenDirListsAtMost20Problems(t *testing.T) {
	index := `{"weight_map": {"x": "` + shard1 + `", "y": "` + shard1 + `", "z": "` + shard2 + `"`
	for i := range 25 {
		index += fmt.Sprintf(`, "ghost.%02d": "%s"`, i, shard1)
	}
	_, err := OpenDir(writeDir(t, twoShards(), index+"}}"))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, w := range []string{"(25 problems)", `"ghost.19"`, "... and 5 more"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
	if strings.Contains(msg, `"ghost.20"`) {
		t.Errorf("error lists more than 20 problems: %q", msg)
	}
}
