package hf

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MaxHeaderSize is the largest safetensors header this package reads, in bytes: 100 MB, the
// reference implementation's limit. A header length past it, or past the end of the file, is an
// error before anything is allocated.
const MaxHeaderSize = 100_000_000

// metadataKey is the header entry that holds the file's string→string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int // row-major; empty for a scalar
	// Begin and End are the tensor's byte offsets in the data buffer, which starts right after
	// the header; End-Begin = Len()·DType.Size().
	Begin, End int64
}

// Len is the number of elements: the product of the shape (1 for a scalar).
func (t TensorInfo) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// A File is an open safetensors file. Opening reads and validates only the header; tensors
// are read from the underlying io.ReaderAt when asked for, so a File never holds a whole
// checkpoint in memory. Its methods are safe for concurrent use when the ReaderAt is (an
// *os.File is).
type File struct {
	name     string // for error messages
	r        io.ReaderAt
	closer   io.Closer // nil when the caller owns r
	data     int64     // offset of the data buffer in r
	tensors  map[string]TensorInfo
	names    []string // sorted
	metadata map[string]string
}

// Open opens and validates the safetensors file at path. Close it when done.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hf: %w", err)
	}
	file, err := NewFile(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	file.closer = f
	return file, nil
}

// NewFile reads and validates the header of the safetensors data of the given size in r; name
// labels error messages (usually the file's path). The header is checked strictly — its
// length against MaxHeaderSize and size, its JSON (no duplicate keys, nothing after the
// object), every tensor's dtype, shape and offsets — and the tensors must tile the data buffer
// exactly: no overlaps, no gaps and no trailing bytes, as the reference implementation
// requires. The header must also begin with '{' (the reference plans the same check, so no
// writer puts whitespace first). The caller keeps r open while the File is in use.
func NewFile(r io.ReaderAt, size int64, name string) (*File, error) {
	fail := func(err error) (*File, error) { return nil, fmt.Errorf("hf: %s: %w", name, err) }
	if size < 8 {
		return fail(fmt.Errorf("%d bytes is too short for a safetensors file (8-byte header length first)", size))
	}
	var lenBuf [8]byte
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return fail(fmt.Errorf("reading the header length: %w", err))
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n > MaxHeaderSize:
		return fail(fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize))
	case n > uint64(size-8):
		return fail(fmt.Errorf("header length %d runs past the end of the %d-byte file", n, size))
	case n < 2:
		return fail(fmt.Errorf("header length %d is too short for a JSON object", n))
	}
	// Read rather than allocate n bytes up front: should size overstate what r holds, memory
	// still grows only with the bytes that are really there.
	header, err := io.ReadAll(io.NewSectionReader(r, 8, int64(n)))
	if err != nil {
		return fail(fmt.Errorf("reading the %d-byte header: %w", n, err))
	}
	if uint64(len(header)) != n {
		return fail(fmt.Errorf("the file ends %d bytes into the %d-byte header: %w", len(header), n, io.ErrUnexpectedEOF))
	}
	file := &File{name: name, r: r, data: 8 + int64(n)}
	if err := file.parseHeader(header, size-file.data); err != nil {
		return fail(err)
	}
	return file, nil
}

// parseHeader fills f.tensors, f.names and f.metadata from the header JSON, given the size of
// the data buffer that follows it.
func (f *File) parseHeader(header []byte, dataSize int64) error {
	if !utf8.Valid(header) {
		return errors.New("header is not valid UTF-8")
	}
	if header[0] != '{' {
		return errors.New("header does not start with '{'")
	}
	fields, err := objectFields(header)
	if err != nil {
		return fmt.Errorf("header: %w", err)
	}
	f.tensors = make(map[string]TensorInfo, len(fields))
	for _, fl := range fields {
		if fl.key == metadataKey {
			if f.metadata, err = parseMetadata(fl.value); err != nil {
				return fmt.Errorf("%s: %w", metadataKey, err)
			}
			continue
		}
		t, err := parseTensor(fl.key, fl.value, dataSize)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", fl.key, err)
		}
		f.tensors[t.Name] = t
		f.names = append(f.names, t.Name)
	}
	slices.Sort(f.names)
	return checkTiling(f.tensors, dataSize)
}

// checkTiling checks that the tensors cover the data buffer [0, dataSize) end to end.
func checkTiling(tensors map[string]TensorInfo, dataSize int64) error {
	byOffset := make([]TensorInfo, 0, len(tensors))
	for _, t := range tensors {
		byOffset = append(byOffset, t)
	}
	slices.SortFunc(byOffset, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	var pos int64
	for i, t := range byOffset {
		switch {
		case t.Begin < pos:
			p := byOffset[i-1]
			return fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap", p.Name, p.Begin, p.End, t.Name, t.Begin, t.End)
		case t.Begin > pos:
			return fmt.Errorf("tensor %q starts at %d, leaving bytes [%d, %d) of the data buffer unused", t.Name, t.Begin, pos, t.Begin)
		}
		pos = t.End
	}
	if pos != dataSize {
		return fmt.Errorf("the data buffer has %d bytes but the tensors end at %d", dataSize, pos)
	}
	return nil
}

// parseTensor reads one {"dtype", "shape", "data_offsets"} entry and checks it against
// itself and the data buffer's size.
func parseTensor(name string, raw json.RawMessage, dataSize int64) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	fields, err := objectFields(raw)
	if err != nil {
		return t, err
	}
	var have struct{ dtype, shape, offsets bool }
	var offsets []int64
	for _, fl := range fields {
		switch fl.key {
		case "dtype":
			var s string
			if fl.value[0] != '"' || json.Unmarshal(fl.value, &s) != nil {
				return t, fmt.Errorf("dtype %s is not a string", fl.value)
			}
			t.DType, have.dtype = DType(s), true
		case "shape":
			dims, err := parseInts(fl.value, math.MaxInt)
			if err != nil {
				return t, fmt.Errorf("shape: %w", err)
			}
			t.Shape = make([]int, len(dims))
			for i, d := range dims {
				t.Shape[i] = int(d)
			}
			have.shape = true
		case "data_offsets":
			if offsets, err = parseInts(fl.value, math.MaxInt64); err != nil {
				return t, fmt.Errorf("data_offsets: %w", err)
			}
			if len(offsets) != 2 {
				return t, fmt.Errorf("data_offsets has %d entries, want [begin, end]", len(offsets))
			}
			t.Begin, t.End, have.offsets = offsets[0], offsets[1], true
		default:
			return t, fmt.Errorf("unknown field %q (want dtype, shape, data_offsets)", fl.key)
		}
	}
	switch {
	case !have.dtype:
		return t, errors.New("no dtype")
	case !have.shape:
		return t, errors.New("no shape")
	case !have.offsets:
		return t, errors.New("no data_offsets")
	}
	if err := checkDType(t.DType); err != nil {
		return t, err
	}
	if t.Begin > t.End {
		return t, fmt.Errorf("data_offsets [%d, %d] end before they begin", t.Begin, t.End)
	}
	if t.End > dataSize {
		return t, fmt.Errorf("data_offsets [%d, %d] run past the %d-byte data buffer", t.Begin, t.End, dataSize)
	}
	nbytes, ok := byteSize(t.Shape, t.DType)
	if !ok {
		return t, fmt.Errorf("shape %v of %s overflows", t.Shape, t.DType)
	}
	if nbytes > math.MaxInt { // only on 32-bit platforms: Len must fit an int
		return t, fmt.Errorf("shape %v of %s is too large for this platform", t.Shape, t.DType)
	}
	if nbytes != uint64(t.End-t.Begin) {
		return t, fmt.Errorf("shape %v of %s needs %d bytes but data_offsets [%d, %d] hold %d", t.Shape, t.DType, nbytes, t.Begin, t.End, t.End-t.Begin)
	}
	return t, nil
}

// byteSize returns the product of the shape times the element size, and false if it
// overflows 64 bits.
func byteSize(shape []int, d DType) (uint64, bool) {
	n := uint64(d.Size())
	for _, dim := range shape {
		hi, lo := bits.Mul64(n, uint64(dim))
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// parseInts reads a JSON array of integers in [0, max]. It is stricter than encoding/json:
// "2.0", "2e3" and "\"2\"" are errors, not 2.
func parseInts(raw json.RawMessage, max int64) ([]int64, error) {
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, fmt.Errorf("%s is not an array", raw)
	}
	out := make([]int64, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		v, err := strconv.ParseInt(string(e), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) && len(e) > 0 && e[0] == '-':
			return nil, fmt.Errorf("entry %d (%s) is negative", i, e)
		case errors.Is(err, strconv.ErrRange) || err == nil && v > max:
			return nil, fmt.Errorf("entry %d (%s) is too large", i, e)
		case err != nil:
			return nil, fmt.Errorf("entry %d (%s) is not an integer", i, e)
		case v < 0:
			return nil, fmt.Errorf("entry %d (%s) is negative", i, e)
		}
		out[i] = v
	}
	return out, nil
}

// parseMetadata reads the __metadata__ entry: null or an object of strings.
func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	fields, err := objectFields(raw)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(fields))
	for _, fl := range fields {
		var s string
		if fl.value[0] != '"' || json.Unmarshal(fl.value, &s) != nil {
			return nil, fmt.Errorf("%q: %s is not a string", fl.key, fl.value)
		}
		m[fl.key] = s
	}
	return m, nil
}

// A field is one key and its undecoded value in a JSON object.
type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits a JSON object into its fields, in order. Unlike json.Unmarshal into a
// map, which keeps the last of two equal keys, it rejects duplicates; and it rejects anything
// but whitespace after the closing brace.
func objectFields(data []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%.40s is not a JSON object", data)
	}
	var fields []field
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // the decoder only yields strings in key position
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		fields = append(fields, field{key, value})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the closing '}'")
	}
	return fields, nil
}

// readFullAt fills p from r at off; a ReaderAt may return io.EOF with a full read.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Close closes the file Open opened; for a File from NewFile it does nothing.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// Path is the name the File was opened with, as its error messages give it.
func (f *File) Path() string { return f.name }

// Names lists the tensors, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Info describes the named tensor; false if there is none.
func (f *File) Info(name string) (TensorInfo, bool) {
	t, ok := f.tensors[name]
	t.Shape = slices.Clone(t.Shape)
	return t, ok
}

// Metadata returns a copy of the header's __metadata__ (nil when it has none).
func (f *File) Metadata() map[string]string {
	if f.metadata == nil {
		return nil
	}
	m := make(map[string]string, len(f.metadata))
	for k, v := range f.metadata {
		m[k] = v
	}
	return m
}

func (f *File) lookup(name string) (TensorInfo, error) {
	t, ok := f.tensors[name]
	if !ok {
		return t, fmt.Errorf("hf: %s: no tensor %q", f.name, name)
	}
	return t, nil
}

// Section returns a reader of the named tensor's raw little-endian bytes, for streaming a
// tensor too big to hold twice.
func (f *File) Section(name string) (*io.SectionReader, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.r, f.data+t.Begin, t.End-t.Begin), nil
}

// Bytes reads the named tensor's raw little-endian bytes.
func (f *File) Bytes(name string) ([]byte, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	b := make([]byte, t.End-t.Begin)
	if err := readFullAt(f.r, b, f.data+t.Begin); err != nil {
		return nil, fmt.Errorf("hf: %s: reading tensor %q: %w", f.name, name, err)
	}
	return b, nil
}

// chunkSize is how many bytes Float32s reads at a time: the conversion needs no copy of the
// whole tensor's bytes beside its result.
const chunkSize = 1 << 16

// Float32s reads the named tensor as float32s in row-major order, converting exactly from F16
// and BF16. Other dtypes are an error.
func (f *File) Float32s(name string) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if !t.DType.Float() {
		return nil, fmt.Errorf("hf: %s: tensor %q is %s; Float32s reads F32, F16 and BF16", f.name, name, t.DType)
	}
	size := t.DType.Size()
	out := make([]float32, t.Len())
	buf := make([]byte, min(chunkSize, t.End-t.Begin))
	for i := 0; i < len(out); {
		n := min(len(buf)/size, len(out)-i)
		b := buf[:n*size]
		if err := readFullAt(f.r, b, f.data+t.Begin+int64(i*size)); err != nil {
			return nil, fmt.Errorf("hf: %s: reading tensor %q: %w", f.name, name, err)
		}
		decodeFloats(out[i:i+n], b, t.DType)
		i += n
	}
	return out, nil
}

// decodeFloats converts the little-endian elements of b, of float type d, into dst.
func decodeFloats(dst []float32, b []byte, d DType) {
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
}
