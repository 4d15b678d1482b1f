package hf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyFile is a safetensors file written out by hand: F32 "a" = [1, -2], BF16 "b" = [1], and
// the metadata format=pt. The 140-byte header is padded with 4 spaces to 144 = 0x90.
var tinyFile = "\x90\x00\x00\x00\x00\x00\x00\x00" +
	`{"__metadata__":{"format":"pt"},` +
	`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
	`"b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}}` + "    " +
	"\x00\x00\x80\x3f" + "\x00\x00\x00\xc0" + // 1.0f, -2.0f
	"\x80\x3f" // bf16 1.0

func TestWriteTinyFileByteForByte(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, map[string]Tensor{
		"a": F32Tensor([]float32{1, -2}),
		"b": BF16Tensor([]float32{1}, 1),
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != tinyFile {
		t.Errorf("Write =\n%q\nwant\n%q", got, tinyFile)
	}
}

func TestReadTinyFile(t *testing.T) {
	f, err := NewFile(strings.NewReader(tinyFile), int64(len(tinyFile)), "tiny.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names = %q", got)
	}
	if got := f.Metadata(); len(got) != 1 || got["format"] != "pt" {
		t.Errorf("Metadata = %v", got)
	}
	a, ok := f.Info("a")
	if !ok || a.DType != F32 || !slices.Equal(a.Shape, []int{2}) || a.Begin != 0 || a.End != 8 || a.Len() != 2 {
		t.Errorf("Info(a) = %+v, %v", a, ok)
	}
	if got, err := f.Float32s("a"); err != nil || !slices.Equal(got, []float32{1, -2}) {
		t.Errorf("Float32s(a) = %v, %v", got, err)
	}
	if got, err := f.Float32s("b"); err != nil || !slices.Equal(got, []float32{1}) {
		t.Errorf("Float32s(b) = %v, %v", got, err)
	}
	if got, err := f.Bytes("b"); err != nil || string(got) != "\x80\x3f" {
		t.Errorf("Bytes(b) = %q, %v", got, err)
	}
	sr, err := f.Section("a")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(sr); string(got) != "\x00\x00\x80\x3f\x00\x00\x00\xc0" {
		t.Errorf("Section(a) = %q", got)
	}
	if _, err := f.Float32s("c"); err == nil || !strings.Contains(err.Error(), `tiny.safetensors: no tensor "c"`) {
		t.Errorf("Float32s(c) error = %v", err)
	}
	// Info hands out copies.
	a.Shape[0] = 99
	if again, _ := f.Info("a"); again.Shape[0] != 2 {
		t.Error("Info's shape aliases the File's")
	}
}

// TestReadReferenceExample reads the example file of the reference implementation's docs: a
// 60-byte header and a 2×2 I32 tensor of zeros.
func TestReadReferenceExample(t *testing.T) {
	data := "<\x00\x00\x00\x00\x00\x00\x00" + `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}` + strings.Repeat("\x00", 16)
	f, err := NewFile(strings.NewReader(data), int64(len(data)), "ref")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Info("test")
	if info.DType != I32 || !slices.Equal(info.Shape, []int{2, 2}) || f.Metadata() != nil {
		t.Errorf("Info = %+v, metadata %v", info, f.Metadata())
	}
	if b, err := f.Bytes("test"); err != nil || len(b) != 16 {
		t.Errorf("Bytes = %v, %v", b, err)
	}
	if _, err := f.Float32s("test"); err == nil || !strings.Contains(err.Error(), `tensor "test" is I32`) {
		t.Errorf("Float32s of I32: error = %v", err)
	}
}

// file builds a safetensors file from a header and a data buffer.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func withLength(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

func TestHostileHeaders(t *testing.T) {
	const okA = `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	eight := make([]byte, 8)
	for _, c := range []struct {
		name string
		data []byte
		want []string // substrings of the error, besides the file name
	}{
		{"empty file", nil, []string{"too short"}},
		{"seven bytes", []byte("\x02\x00\x00\x00\x00\x00\x00"), []string{"too short"}},
		{"header past the end", withLength(100, `{}`), []string{"header length 100 runs past the end of the 10-byte file"}},
		{"10 GB header length", withLength(10_000_000_000, `{}`), []string{"header length 10000000000 exceeds the 100000000-byte limit"}},
		{"2^64-1 header length", withLength(math.MaxUint64, `{}`), []string{"exceeds"}},
		{"header length 0", withLength(0, ""), []string{"too short for a JSON object"}},
		{"not UTF-8", file("{\"\xff\":{}}", nil), []string{"not valid UTF-8"}},
		{"array", file(`[1,2]`, nil), []string{"does not start with '{'"}},
		{"string", file(`"ab"`, nil), []string{"does not start with '{'"}},
		{"leading space", file(` {}`, nil), []string{"does not start with '{'"}},
		{"truncated JSON", file(`{"a":`, nil), []string{"header"}},
		{"trailing garbage", file(`{} x`, nil), []string{"after the closing"}},
		{"second object", file(`{}{}`, nil), []string{"after the closing"}},
		{"entry not an object", file(`{"a":1}`, nil), []string{`tensor "a"`, "not a JSON object"}},
		{"duplicate tensor", file(`{`+okA+`,`+okA+`}`, eight), []string{`duplicate key "a"`}},
		{"duplicate by escape", file(`{`+okA+`,"\u0061":{}}`, eight), []string{`duplicate key "a"`}},
		{"duplicate field", file(`{"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, `duplicate key "dtype"`}},
		{"duplicate metadata", file(`{"__metadata__":{},"__metadata__":{}}`, nil), []string{`duplicate key "__metadata__"`}},
		{"unknown dtype", file(`{"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, `unknown dtype "F7"`}},
		{"sub-byte dtype", file(`{"a":{"dtype":"F4","shape":[16],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, `unknown dtype "F4"`}},
		{"lower-case dtype", file(`{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, eight), []string{`unknown dtype "f32"`}},
		{"dtype not a string", file(`{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "dtype 4 is not a string"}},
		{"shape/size mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "needs 12 bytes", "hold 8"}},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "negative"}},
		{"huge negative dim", file(`{"a":{"dtype":"F32","shape":[-99999999999999999999],"data_offsets":[0,8]}}`, eight), []string{"negative"}},
		{"dim past int64", file(`{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "too large"}},
		{"product overflows", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "overflows"}},
		{"bytes overflow", file(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`, eight), []string{"overflows"}},
		{"float dim", file(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, eight), []string{"not an integer"}},
		{"exponent dim", file(`{"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}`, eight), []string{"not an integer"}},
		{"string dim", file(`{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, eight), []string{"not an integer"}},
		{"shape not an array", file(`{"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}`, eight), []string{"not an array"}},
		{"offsets past the end", file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, eight), []string{`tensor "a"`, "run past the 8-byte data buffer"}},
		{"offsets backwards", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, eight), []string{`tensor "a"`, "end before they begin"}},
		{"one offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}}`, eight), []string{`tensor "a"`, "want [begin, end]"}},
		{"negative offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, eight), []string{`tensor "a"`, "negative"}},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), []string{`"a" [0, 8) and "b" [4, 12) overlap`}},
		{"same range twice", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, eight), []string{"overlap"}},
		{"empty tensor inside another", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`, eight), []string{`"z"`, "overlap"}},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), []string{`tensor "b" starts at 8`, "[4, 8)"}},
		{"trailing data", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight), []string{"the data buffer has 8 bytes but the tensors end at 4"}},
		{"no tensors, some data", file(`{}`, eight), []string{"has 8 bytes"}},
		{"no dtype", file(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "no dtype"}},
		{"no shape", file(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, eight), []string{`tensor "a"`, "no shape"}},
		{"no offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, eight), []string{`tensor "a"`, "no data_offsets"}},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, eight), []string{`tensor "a"`, `unknown field "x"`}},
		{"metadata value not a string", file(`{"__metadata__":{"k":1}}`, nil), []string{"__metadata__", `"k": 1 is not a string`}},
		{"metadata null value", file(`{"__metadata__":{"k":null}}`, nil), []string{"not a string"}},
		{"metadata not an object", file(`{"__metadata__":[]}`, nil), []string{"__metadata__", "not a JSON object"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := NewFile(bytes.NewReader(c.data), int64(len(c.data)), "t.safetensors")
			if err == nil {
				t.Fatalf("no error; tensors %v", f.Names())
			}
			for _, w := range append([]string{"hf: t.safetensors: "}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestAcceptedEdgeCases are unusual headers the format allows.
func TestAcceptedEdgeCases(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"no tensors", file(`{}`, nil)},
		{"padded", file(`{}      `, nil)},
		{"null metadata", file(`{"__metadata__":null}`, nil)},
		{"scalar", file(`{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, make([]byte, 4))},
		{"zero-size tensors", file(`{"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"f":{"dtype":"F16","shape":[5,0],"data_offsets":[0,0]}}`, nil)},
		{"any order of fields and tensors", file(`{"b":{"shape":[1],"data_offsets":[4,8],"dtype":"F32"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 8))},
		{"empty name", file(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{7})},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := NewFile(bytes.NewReader(c.data), int64(len(c.data)), "t")
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range f.Names() {
				info, _ := f.Info(name)
				b, err := f.Bytes(name)
				if err != nil || len(b) != info.Len()*info.DType.Size() {
					t.Errorf("%q: %d bytes, %v", name, len(b), err)
				}
			}
		})
	}
}

// TestSizeOverstated gives NewFile a reader holding fewer bytes than the size it claims.
func TestSizeOverstated(t *testing.T) {
	data := file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))
	// Claim 200 MB: the header length check passes against the claimed size, but the bytes
	// are not there.
	if _, err := NewFile(bytes.NewReader(data[:20]), 200<<20, "short"); err == nil || !strings.Contains(err.Error(), "ends 12 bytes into") {
		t.Errorf("truncated header: error = %v", err)
	}
	f, err := NewFile(bytes.NewReader(data[:len(data)-4]), int64(len(data)), "short")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Float32s("a"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Float32s of a truncated tensor: error = %v, want io.ErrUnexpectedEOF", err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

// TestReadsOnlyWhatItNeeds checks that opening reads the header alone and Float32s the one
// tensor, in chunks that span tensors bigger than one chunk.
func TestReadsOnlyWhatItNeeds(t *testing.T) {
	big := make([]float32, 50_000) // 100 kB of F16: two chunks
	for i := range big {
		big[i] = float32(i%2048) - 1024 // exact in F16
	}
	var buf bytes.Buffer
	if err := Write(&buf, map[string]Tensor{
		"big":   F16Tensor(big, 250, 200),
		"other": F32Tensor(make([]float32, 100_000)),
	}, nil); err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{r: bytes.NewReader(buf.Bytes())}
	f, err := NewFile(cr, int64(buf.Len()), "big")
	if err != nil {
		t.Fatal(err)
	}
	headerBytes := f.data
	if cr.n != headerBytes {
		t.Errorf("opening read %d bytes, want the %d of the header", cr.n, headerBytes)
	}
	got, err := f.Float32s("big")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, big) {
		t.Error("Float32s(big) differs from what was written")
	}
	if want := headerBytes + 2*int64(len(big)); cr.n != want {
		t.Errorf("after Float32s(big), %d bytes read, want %d", cr.n, want)
	}
}

func TestOpenFromDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, []byte(tinyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.Float32s("a"); err != nil || !slices.Equal(got, []float32{1, -2}) {
		t.Errorf("Float32s(a) = %v, %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(absent) = %v, want ErrNotExist", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	os.WriteFile(bad, withLength(10_000_000_000, "{}"), 0o644)
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Open(bad) = %v, want an error naming the path", err)
	}
}
