package hf

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A Tensor is one tensor to write: its type, shape and raw little-endian bytes, which must
// hold exactly the shape's product of elements.
type Tensor struct {
	DType DType
	Shape []int // empty for a scalar
	Data  []byte
}

// F32Tensor returns data as an F32 tensor of the given shape; with no shape, a 1-D tensor of
// len(data) elements.
func F32Tensor(data []float32, shape ...int) Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{DType: F32, Shape: shapeOr(shape, len(data)), Data: b}
}

// BF16Tensor rounds data to bfloat16 (Float32ToBF16: nearest, ties to even) as a BF16 tensor
// of the given shape; with no shape, a 1-D tensor of len(data) elements.
func BF16Tensor(data []float32, shape ...int) Tensor {
	return halfTensor(BF16, Float32ToBF16, data, shape)
}

// F16Tensor rounds data to IEEE half precision (Float32ToF16: nearest, ties to even) as an F16
// tensor of the given shape; with no shape, a 1-D tensor of len(data) elements.
func F16Tensor(data []float32, shape ...int) Tensor {
	return halfTensor(F16, Float32ToF16, data, shape)
}

func halfTensor(d DType, round func(float32) uint16, data []float32, shape []int) Tensor {
	b := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(b[2*i:], round(v))
	}
	return Tensor{DType: d, Shape: shapeOr(shape, len(data)), Data: b}
}

func shapeOr(shape []int, n int) []int {
	if len(shape) == 0 {
		return []int{n}
	}
	return slices.Clone(shape)
}

// WriteFile writes the tensors and metadata to a safetensors file at path (see Write), with
// mode 0644. It writes a temporary file in the same directory and renames it, so path never
// holds half a checkpoint.
func WriteFile(path string, tensors map[string]Tensor, metadata map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err := Write(w, tensors, metadata); err != nil {
		return fmt.Errorf("%w (writing %s)", err, path)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600 would hide the weights from other users
		return fmt.Errorf("hf: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return nil
}

// Write writes the tensors and metadata (which may be nil) to w in the safetensors format.
// The output is deterministic and laid out as the reference implementation lays it out: the
// header is compact JSON with __metadata__ first, padded with spaces to a multiple of 8 bytes;
// tensors follow in decreasing order of dtype (U64, I64, F64, C64, F32, ..., BF16, F16, ...,
// BOOL: decreasing element size, so every tensor starts at a multiple of its element size),
// then by name, and the header lists them in that same order. Metadata keys are sorted (the
// reference writes them in hash-map order). All tensors are checked before anything is
// written.
func Write(w io.Writer, tensors map[string]Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	var errs []error
	for name, t := range tensors {
		names = append(names, name)
		if err := checkTensor(name, t); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			errs = append(errs, fmt.Errorf("metadata %q: not valid UTF-8", k))
		}
	}
	if _, ok := tensors[metadataKey]; ok {
		errs = append(errs, fmt.Errorf("%q is reserved for the metadata", metadataKey))
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
		return fmt.Errorf("hf: Write: %w", errors.Join(errs...))
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(tensors[b].DType.rank(), tensors[a].DType.rank()), cmp.Compare(a, b))
	})

	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		h.WriteString(`"` + metadataKey + `":{`)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				h.WriteByte(',')
			}
			writeJSONString(&h, k)
			h.WriteByte(':')
			writeJSONString(&h, metadata[k])
		}
		h.WriteByte('}')
	}
	var off int64
	for i, name := range names {
		t := tensors[name]
		if i > 0 || len(metadata) > 0 {
			h.WriteByte(',')
		}
		writeJSONString(&h, name)
		h.WriteString(`:{"dtype":`)
		writeJSONString(&h, string(t.DType))
		h.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		end := off + int64(len(t.Data))
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}

	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(h.Len()))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return fmt.Errorf("hf: Write: %w", err)
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return fmt.Errorf("hf: Write: %w", err)
	}
	for _, name := range names {
		if _, err := w.Write(tensors[name].Data); err != nil {
			return fmt.Errorf("hf: Write: %w", err)
		}
	}
	return nil
}

// checkTensor checks that t's data holds exactly its shape's elements.
func checkTensor(name string, t Tensor) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("tensor %q: name is not valid UTF-8", name)
	}
	if err := checkDType(t.DType); err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: shape %v has a negative dimension", name, t.Shape)
		}
	}
	n, ok := byteSize(t.Shape, t.DType)
	if !ok || n != uint64(len(t.Data)) {
		return fmt.Errorf("tensor %q: shape %v of %s needs %d bytes, data has %d", name, t.Shape, t.DType, n, len(t.Data))
	}
	return nil
}

// writeJSONString writes s as a JSON string, without the HTML escaping of json.Marshal, as
// the reference implementation's serde_json writes it.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}
