package hf

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// special holds float32s whose bits a round trip must keep: signed zeros, infinities, NaNs
// with payloads, subnormals and the extremes.
var special = []float32{
	0, f32(0x80000000), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
	f32(0x7FC00000), f32(0x7F800001), f32(0xFFC12345), f32(0x00000001), f32(0x807FFFFF),
	math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0x1p-126,
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := slices.Clone(special)
	for range 1000 {
		vals = append(vals, f32(rng.Uint32())) // every bit pattern is fair game
	}
	ints := binary.LittleEndian.AppendUint64(nil, 1<<63+5)
	ints = binary.LittleEndian.AppendUint64(ints, 7)
	tensors := map[string]Tensor{
		"f32":    F32Tensor(vals),
		"bf16":   BF16Tensor(vals[:1010], 10, 101),
		"f16":    F16Tensor(vals[:1000], 2, 5, 100),
		"i64":    {DType: I64, Shape: []int{2}, Data: ints},
		"scalar": {DType: F32, Shape: []int{}, Data: []byte{0, 0, 0x80, 0x3F}},
		"empty":  {DType: BF16, Shape: []int{3, 0}, Data: nil},
		"mask":   {DType: BOOL, Shape: []int{3}, Data: []byte{1, 0, 1}},
	}
	meta := map[string]string{"format": "pt", "z": `quote " <html> & ünïcode`, "a": ""}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	if got := f.Metadata(); len(got) != len(meta) || got["z"] != meta["z"] || got["a"] != "" {
		t.Errorf("Metadata = %q, want %q", got, meta)
	}
	names := slices.Sorted(maps.Keys(tensors))
	if got := f.Names(); !slices.Equal(got, names) {
		t.Errorf("Names = %q, want %q", got, names)
	}
	for name, want := range tensors {
		info, _ := f.Info(name)
		if info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) {
			t.Errorf("%s: %s %v, want %s %v", name, info.DType, info.Shape, want.DType, want.Shape)
		}
		got, err := f.Bytes(name)
		if err != nil || !bytes.Equal(got, want.Data) {
			t.Errorf("%s: bytes differ (%v)", name, err)
		}
	}
	got, err := f.Float32s("f32")
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
			t.Fatalf("f32[%d]: bits %#08x, want %#08x", i, math.Float32bits(got[i]), math.Float32bits(vals[i]))
		}
	}
	for _, k := range []struct {
		name  string
		n     int
		round func(float32) uint16
		back  func(uint16) float32
	}{{"bf16", 1010, Float32ToBF16, BF16ToFloat32}, {"f16", 1000, Float32ToF16, F16ToFloat32}} {
		got, err := f.Float32s(k.name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k.n {
			if want := k.back(k.round(vals[i])); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%s[%d] = %#08x, want %#08x", k.name, i, math.Float32bits(got[i]), math.Float32bits(want))
			}
		}
	}
	if got, _ := f.Float32s("scalar"); !slices.Equal(got, []float32{1}) {
		t.Errorf("scalar = %v", got)
	}
	if got, err := f.Float32s("empty"); err != nil || len(got) != 0 {
		t.Errorf("empty = %v, %v", got, err)
	}

	// Writing again gives the same bytes.
	var a, b bytes.Buffer
	Write(&a, tensors, meta)
	Write(&b, tensors, meta)
	disk, _ := os.ReadFile(path)
	if !bytes.Equal(a.Bytes(), b.Bytes()) || !bytes.Equal(a.Bytes(), disk) {
		t.Error("Write is not deterministic")
	}
}

// TestWriteLayout checks the reference implementation's order — widest dtype first, then name
// — and that it leaves every tensor aligned to its element size in the file.
func TestWriteLayout(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, map[string]Tensor{
		"a": BF16Tensor([]float32{1, 2, 3}),
		"b": F32Tensor([]float32{1}),
		"c": F16Tensor([]float32{1}),
		"d": {DType: I64, Shape: []int{1}, Data: make([]byte, 8)},
		"e": {DType: U8, Shape: []int{1}, Data: []byte{1}},
		"f": F32Tensor([]float32{2}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(buf.Bytes())
	header := string(buf.Bytes()[8 : 8+n])
	if n%8 != 0 || !strings.HasSuffix(strings.TrimRight(header, " "), "}") {
		t.Errorf("header length %d, %q", n, header)
	}
	order := []string{"d", "b", "f", "a", "c", "e"} // I64, F32, F32, BF16, F16, U8
	last := -1
	for _, name := range order {
		i := strings.Index(header, `"`+name+`":{`)
		if i <= last {
			t.Errorf("header %s: want the tensors in order %q", header, order)
		}
		last = i
	}
	f, err := NewFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "layout")
	if err != nil {
		t.Fatal(err)
	}
	var pos int64
	for _, name := range order {
		info, _ := f.Info(name)
		if info.Begin != pos || (8+int64(n)+info.Begin)%int64(info.DType.Size()) != 0 {
			t.Errorf("%s at [%d, %d), want to start at %d, aligned to %d", name, info.Begin, info.End, pos, info.DType.Size())
		}
		pos = info.End
	}
}

func TestWriteEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	if want := "\x08\x00\x00\x00\x00\x00\x00\x00{}      "; buf.String() != want {
		t.Errorf("Write(nil) = %q, want %q", buf.String(), want)
	}
}

func TestWriteErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		tensors map[string]Tensor
		meta    map[string]string
		want    []string
	}{
		{"shape mismatch", map[string]Tensor{"w": F32Tensor([]float32{1, 2, 3}, 2, 2)}, nil, []string{`tensor "w"`, "needs 16 bytes, data has 12"}},
		{"unknown dtype", map[string]Tensor{"w": {DType: "F7", Shape: []int{1}, Data: []byte{0}}}, nil, []string{`tensor "w"`, `unknown dtype "F7"`}},
		{"negative dim", map[string]Tensor{"w": {DType: U8, Shape: []int{-1}}}, nil, []string{`tensor "w"`, "negative"}},
		{"reserved name", map[string]Tensor{"__metadata__": F32Tensor([]float32{1})}, nil, []string{"reserved"}},
		{"bad UTF-8 name", map[string]Tensor{"\xff": F32Tensor([]float32{1})}, nil, []string{"not valid UTF-8"}},
		{"bad UTF-8 metadata", nil, map[string]string{"k": "\xff"}, []string{`metadata "k"`}},
		{"all problems", map[string]Tensor{"x": {DType: "F7"}, "y": {DType: F32, Shape: []int{2}}}, nil, []string{`tensor "x"`, `tensor "y"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, c.tensors, c.meta)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append([]string{"hf: Write: "}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
	// A failed WriteFile leaves nothing behind.
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "x.safetensors"), map[string]Tensor{"w": {DType: "F7"}}, nil); err == nil {
		t.Error("WriteFile of a bad tensor: no error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed WriteFile left %v", entries)
	}
}
