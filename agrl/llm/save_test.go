package llm

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
)

// sameWeights reports the first tensor whose values differ between a and b, bit for bit, or "".
func sameWeights(a, b *Model) string {
	wa, wb := a.weights(), b.weights()
	if len(wa) != len(wb) {
		return "the number of tensors"
	}
	for name, va := range wa {
		vb := wb[name]
		if !sameBits([][]float32{va}, [][]float32{vb}) {
			return name
		}
	}
	return ""
}

// Saving without adapters gives back every weight bit for bit, in F32, and in BF16 from BF16
// weights; config.json is WriteRandom's; tied embeddings stay tied.
func TestSaveBase(t *testing.T) {
	ids := []int32{1, 2, 3, 50, 40}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			src := filepath.Join("testdata", v.name)
			m := loadVariant(t, v.name)
			want := mustLogits(t, m, ids)
			dtypes := []hf.DType{hf.F32}
			if v.cfg.TorchDType == "bfloat16" {
				dtypes = append(dtypes, hf.BF16)
			}
			for _, dt := range dtypes {
				dir := t.TempDir()
				if err := m.Save(dir, nil, dt); err != nil {
					t.Fatal(err)
				}
				back, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				if name := sameWeights(m, back); name != "" {
					t.Errorf("%s: %s differs after the round trip", dt, name)
				}
				got := mustLogits(t, back, ids)
				if !sameBits(got, want) {
					t.Errorf("%s: other logits after the round trip", dt)
				}
				wantCfg := m.Config()
				wantCfg.TorchDType = saveTypes[dt].torch
				if c := back.Config(); !reflect.DeepEqual(c, wantCfg) {
					t.Errorf("%s: config %+v, want %+v", dt, c, wantCfg)
				}
				srcJSON, _ := os.ReadFile(filepath.Join(src, "config.json"))
				gotJSON, _ := os.ReadFile(filepath.Join(dir, "config.json"))
				srcJSON = bytes.Replace(srcJSON, []byte(`"torch_dtype": "`+v.cfg.TorchDType+`"`), []byte(`"torch_dtype": "`+wantCfg.TorchDType+`"`), 1)
				if !bytes.Equal(gotJSON, srcJSON) {
					t.Errorf("%s: config.json\n%s\nwant\n%s", dt, gotJSON, srcJSON)
				}
				ck, err := hf.OpenDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				info, _ := ck.Info("model.embed_tokens.weight")
				_, hasHead := ck.Info("lm_head.weight")
				ck.Close()
				if info.DType != dt || hasHead == v.cfg.TieWordEmbeddings {
					t.Errorf("%s: embeddings stored as %s, lm_head.weight present %v (tied %v)", dt, info.DType, hasHead, v.cfg.TieWordEmbeddings)
				}
				if v.cfg.TieWordEmbeddings && &back.head[0] != &back.embed[0] {
					t.Errorf("%s: the reloaded head is not tied", dt)
				}
			}
		})
	}
}

// The tokenizer files of the source directory are copied, also when saving over it.
func TestSaveTokenizerFiles(t *testing.T) {
	src := t.TempDir()
	if err := WriteRandom(src, Tiny(hf.Llama), 5, 1); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"tokenizer.json":          `{"model": {"type": "BPE"}}`,
		"tokenizer_config.json":   `{"eos_token": "</s>"}`,
		"generation_config.json":  `{"do_sample": true}`,
		"special_tokens_map.json": `{}`,
	}
	for name, text := range files {
		os.WriteFile(filepath.Join(src, name), []byte(text), 0o644)
	}
	m, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "new", "dir"), src} {
		if err := m.Save(dir, nil, hf.BF16); err != nil {
			t.Fatal(err)
		}
		for name, text := range files {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != text {
				t.Errorf("%s/%s: %q, %v", dir, name, got, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "vocab.json")); err == nil {
			t.Errorf("%s: vocab.json written from nothing", dir)
		}
		if _, err := Load(dir); err != nil {
			t.Error(err)
		}
	}
}

// Past the shard size the weights go to shards named by an index; the logits are the same, and
// the other layout is removed.
func TestSaveSharded(t *testing.T) {
	m := loadVariant(t, "qwen2")
	ids := []int32{9, 8, 7}
	want := mustLogits(t, m, ids)
	dir := t.TempDir()
	// The embeddings and the LM head (64 KB in F32 each) exceed the limit: a shard each.
	if err := m.save(dir, nil, hf.F32, 40_000); err != nil {
		t.Fatal(err)
	}
	ck, err := hf.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	shards := ck.Shards()
	embedShard, headShard := ck.Shard("model.embed_tokens.weight"), ck.Shard("lm_head.weight")
	ck.Close()
	if len(shards) < 4 || shards[0] != "model-00001-of-"+shards[0][len("model-00001-of-"):] {
		t.Errorf("shards %v", shards)
	}
	if embedShard != shards[0] || headShard != shards[len(shards)-1] {
		t.Errorf("embeddings in %s, head in %s", embedShard, headShard)
	}
	var index struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
	}
	data, _ := os.ReadFile(filepath.Join(dir, hf.IndexFile))
	if err := json.Unmarshal(data, &index); err != nil {
		t.Fatal(err)
	}
	params := 0
	for _, s := range m.cfg.Tensors() {
		params += hf.TensorInfo{Shape: s.Shape}.Len()
	}
	if index.Metadata.TotalSize != int64(4*params) {
		t.Errorf("total_size %d, want %d", index.Metadata.TotalSize, 4*params)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustLogits(t, back, ids); !sameBits(got, want) {
		t.Error("other logits from the shards")
	}
	if name := sameWeights(m, back); name != "" {
		t.Errorf("%s differs", name)
	}
	// One file again: the index goes.
	if err := m.Save(dir, nil, hf.F32); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, hf.IndexFile)); err == nil {
		t.Error("the index is still there")
	}
}

// randomAdapters returns all-linear adapters of m with B ≠ 0.
func randomAdapters(t *testing.T, m *Model) *Adapters {
	t.Helper()
	a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: LoRAModules()}, 21)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, 22, 0.1)
	return a
}

// A merged save gives the adapted model's logits: to float32 rounding in F32, to bfloat16
// rounding of the merged weights in BF16. The untargeted weights are kept bit for bit.
func TestSaveMerged(t *testing.T) {
	ids := []int32{1, 17, 42, 5, 60, 7, 0, 33, 90, 20, 3, 9}
	tols := map[hf.DType]float64{hf.F32: 1e-5, hf.F16: 0.01, hf.BF16: 0.05} // measured: 1.4e-6, 1.6e-3, 1.3e-2
	for _, name := range []string{"qwen3", "llama-sharded"} {
		t.Run(name, func(t *testing.T) {
			m := loadVariant(t, name)
			a := randomAdapters(t, m)
			policy := mustAdapt(t, m, a)
			want := mustLogits(t, policy, ids)
			base := mustLogits(t, m, ids)
			t.Logf("the adapters move the logits by %.3g", maxDiffRows(want, base))
			for _, dt := range []hf.DType{hf.F32, hf.F16, hf.BF16} {
				dir := t.TempDir()
				if err := m.Save(dir, a, dt); err != nil {
					t.Fatal(err)
				}
				back, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				got := mustLogits(t, back, ids)
				d := maxDiffRows(got, want)
				t.Logf("%s merged save: max |Δlogit| vs the adapted model %.3g", dt, d)
				if !(d <= tols[dt]) {
					t.Errorf("%s: merged logits differ by %g > %g", dt, d, tols[dt])
				}
				if dt != hf.F32 {
					continue
				}
				if !slices.Equal(back.layers[1].inputNorm, m.layers[1].inputNorm) || !slices.Equal(back.embed, m.embed) {
					t.Error("weights LoRA does not adapt changed")
				}
				// The merged weight is W + scale·B·A.
				p := a.layers[1][vProj]
				w := back.layers[1].wv
				for _, at := range [][2]int{{0, 0}, {p.out - 1, p.in - 1}, {3, 17}} {
					o, i := at[0], at[1]
					var s float64
					for k := range a.cfg.Rank {
						s += float64(p.b[o*a.cfg.Rank+k]) * float64(p.a[k*p.in+i])
					}
					if wantW := m.layers[1].wv[o*p.in+i] + float32(2*s); w[o*p.in+i] != wantW {
						t.Errorf("merged v_proj[%d, %d] = %v, want %v", o, i, w[o*p.in+i], wantW)
					}
				}
				// Saving the view (its own adapters) writes the same bytes.
				viewDir := t.TempDir()
				if err := policy.Save(viewDir, nil, dt); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"config.json", hf.SingleFile} {
					x, _ := os.ReadFile(filepath.Join(dir, f))
					y, _ := os.ReadFile(filepath.Join(viewDir, f))
					if !bytes.Equal(x, y) {
						t.Errorf("the view's %s differs from the merged save's", f)
					}
				}
			}
		})
	}
}

func TestSaveErrors(t *testing.T) {
	m := loadVariant(t, "llama")
	a := randomAdapters(t, m)
	policy := mustAdapt(t, m, a)
	other := randomAdapters(t, m)
	small := loadVariant(t, "llama-sharded")
	misfit := randomAdapters(t, small)
	for _, tc := range []struct {
		name string
		save func(dir string) error
		want string
	}{
		{"dtype", func(dir string) error { return m.Save(dir, nil, hf.I8) }, `dtype "I8" is not F32, BF16 or F16`},
		{"view with other adapters", func(dir string) error { return policy.Save(dir, other, hf.F32) }, "runs with other adapters"},
		{"misfit", func(dir string) error { return m.Save(dir, misfit, hf.F32) }, "q_proj is for a [32 32] weight"},
		{"NaN", func(dir string) error {
			b := a.Clone()
			b.layers[1][downProj].b[7] = float32(math.Inf(-1))
			return m.Save(dir, b, hf.BF16)
		}, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight: element 7 is -Inf"},
		{"overflow", func(dir string) error {
			b := a.Clone()
			b.layers[1][downProj].b[7] = 3e38
			b.layers[1][downProj].a[3*128] = 3e38 // B[1, 3]·A[3, 0] overflows
			return m.Save(dir, b, hf.F32)
		}, "model.layers.1.mlp.down_proj.weight: element "},
		{"float16 range", func(dir string) error {
			b := a.Clone()
			b.layers[0][upProj].b[0] = 1e6
			return m.Save(dir, b, hf.F16)
		}, "model.layers.0.mlp.up_proj.weight: element 0"},
	} {
		err := tc.save(t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if err := policy.Save(t.TempDir(), a, hf.F32); err != nil {
		t.Errorf("a view saving its own adapters: %v", err)
	}
}

func mustLogits(t *testing.T, m *Model, ids []int32) [][]float32 {
	t.Helper()
	rows, err := m.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Weights returns copies of the base tensors, by transformers' names, whatever view it is
// called on: writing into them changes nothing, and an adapted view reports the base.
func TestWeightsAreBaseCopies(t *testing.T) {
	m := loadVariant(t, "qwen3")
	a, err := m.AddLoRA(allLinear(4, 8), 3)
	if err != nil {
		t.Fatal(err)
	}
	view, err := m.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	w, vw := m.Weights(), view.Weights()
	if len(w) != len(m.Config().Tensors()) {
		t.Fatalf("%d tensors, want %d", len(w), len(m.Config().Tensors()))
	}
	for _, spec := range m.Config().Tensors() {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		if len(w[spec.Name]) != n || !slices.Equal(w[spec.Name], vw[spec.Name]) {
			t.Fatalf("%s: %d values (want %d), view equal %v", spec.Name, len(w[spec.Name]), n, slices.Equal(w[spec.Name], vw[spec.Name]))
		}
	}
	before := m.weights()["model.norm.weight"][0]
	w["model.norm.weight"][0] = before + 1
	if got := m.weights()["model.norm.weight"][0]; got != before {
		t.Errorf("writing into Weights changed the model: %v -> %v", before, got)
	}
}
