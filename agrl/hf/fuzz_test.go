package hf

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"
)

// FuzzHeader feeds NewFile arbitrary bytes. It must never panic, never allocate far more than
// the input's size, and whatever it accepts must be self-consistent and readable.
func FuzzHeader(f *testing.F) {
	var valid bytes.Buffer
	Write(&valid, map[string]Tensor{
		"w": BF16Tensor([]float32{1, 2, 3, 4}, 2, 2),
		"b": F32Tensor([]float32{-1}),
		"h": F16Tensor([]float32{0.5, 65504}),
		"i": {DType: I64, Shape: []int{1}, Data: make([]byte, 8)},
	}, map[string]string{"format": "pt"})
	f.Add(valid.Bytes())
	f.Add([]byte(tinyFile))
	f.Add(file(`{}`, nil))
	f.Add(withLength(10_000_000_000, `{}`))
	f.Add(withLength(MaxHeaderSize, `{"a":{}}`))
	f.Add(file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"__metadata__":{"k":"v"},"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`[[[[[[[[[[]]]]]]]]]]`, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := NewFile(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err == nil {
			var total int64
			for _, name := range file.Names() {
				info, ok := file.Info(name)
				if !ok || info.Name != name {
					t.Fatalf("Info(%q) = %+v, %v", name, info, ok)
				}
				if int64(info.Len()*info.DType.Size()) != info.End-info.Begin || info.End > int64(len(data))-file.data {
					t.Fatalf("%q: %+v is inconsistent", name, info)
				}
				total += info.End - info.Begin
				if _, err := file.Bytes(name); err != nil {
					t.Fatalf("Bytes(%q): %v", name, err)
				}
				if info.DType.Float() {
					if _, err := file.Float32s(name); err != nil {
						t.Fatalf("Float32s(%q): %v", name, err)
					}
				}
			}
			if total != int64(len(data))-file.data {
				t.Fatalf("tensors cover %d of %d data bytes", total, int64(len(data))-file.data)
			}
		}
		runtime.ReadMemStats(&after)
		// Reading every tensor as float32s costs at most twice the data (F16 → F32); the
		// header's parse costs a small multiple of its size.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20+64*uint64(len(data)) {
			t.Fatalf("%d-byte input allocated %d bytes", len(data), grew)
		}
	})
}

// FuzzParseConfig feeds ParseConfig arbitrary JSON. It must never panic; a config it accepts
// validates, and its RoPE is usable: HeadDim/2 finite, positive inverse frequencies, none
// above plain RoPE's nor below plain RoPE's divided by the factor, and a finite, positive
// attention factor.
func FuzzParseConfig(f *testing.F) {
	for _, c := range []string{llama32Config, qwen25Config, qwen3Config, smolConfig} {
		f.Add(c)
	}
	for _, rope := range []string{
		`"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16, "truncate": false}`,
		`"rope_parameters": {"rope_type": "linear", "factor": 2, "rope_theta": 5}`,
		`"rope_scaling": {"rope_type": "yarn", "factor": 1e308, "mscale": 1e308, "mscale_all_dim": 1e-308}`,
		`"rope_scaling": {"rope_type": "yarn", "factor": 1e300, "original_max_position_embeddings": 1}`,
	} {
		c := strings.Replace(qwen3Config, `"rope_scaling": null`, rope, 1)
		if c == qwen3Config {
			f.Fatal("no rope_scaling to replace")
		}
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data string) {
		c, err := ParseConfig([]byte(data))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate rejects: %v", err)
		}
		if c.HeadDim > 1<<12 {
			return // a valid but huge head; its tables are not worth allocating here
		}
		inv, plain := c.InvFreq(), RopeInvFreq(c.HeadDim, c.RopeTheta)
		if len(inv) != c.HeadDim/2 {
			t.Fatalf("%d inverse frequencies for head_dim %d", len(inv), c.HeadDim)
		}
		factor := max(c.RopeScaling.Factor, 1)
		for i, v := range inv {
			if !(v > 0) || math.IsInf(v, 0) || v > plain[i]*(1+1e-12) || v < plain[i]/factor*(1-1e-12) {
				t.Fatalf("inverse frequency %d = %v (plain %v, factor %v, scaling %+v)", i, v, plain[i], factor, c.RopeScaling)
			}
		}
		if a := c.RopeAttentionFactor(); !(a > 0) || math.IsInf(a, 0) {
			t.Fatalf("attention factor %v (scaling %+v)", a, c.RopeScaling)
		}
	})
}
