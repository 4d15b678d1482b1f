package llm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
)

// allLinear adapts all seven projections, as PEFT's "all-linear" does for these models.
func allLinear(rank int, alpha float64) LoRAConfig {
	return LoRAConfig{Rank: rank, Alpha: alpha, TargetModules: LoRAModules()}
}

// randomizeB sets every lora_B to seeded N(0, std²) values, so that the adapters change the
// model (a trained adapter's state; AddLoRA's B is zero).
func randomizeB(a *Adapters, seed uint64, std float64) {
	rng := normals{src: rand.NewPCG(seed, 0x6c6f72612e42)} // "lora.B"
	for _, p := range a.Params() {
		if strings.HasSuffix(p.Name, "lora_B.weight") {
			for i := range p.Data {
				p.Data[i] = float32(std * rng.next())
			}
		}
	}
}

func loadVariant(t *testing.T, name string) *Model {
	t.Helper()
	m, err := Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustAdapt(t *testing.T, m *Model, a *Adapters) *Model {
	t.Helper()
	v, err := m.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameBits reports whether two sets of logits are equal bit for bit.
func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// stepwise runs ids through a fresh cache of m: the first three in one Step, then one Next each.
func stepwise(t *testing.T, m *Model, ids []int32) [][]float32 {
	t.Helper()
	c := m.NewCache()
	rows, err := m.Step(c, ids[:3])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[3:] {
		row, err := m.Next(c, []int32{id})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

func TestLoRAConfigValidate(t *testing.T) {
	if err := allLinear(8, 16).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if err := allLinear(MaxLoRARank, 16).Validate(); err != nil {
		t.Errorf("rank %d: %v", MaxLoRARank, err)
	}
	if err := allLinear(1000000000, 16).Validate(); err == nil || !strings.Contains(err.Error(), "rank 1000000000 is above 65536") {
		t.Errorf("rank 1e9: %v", err)
	}
	// AdapterParams by hand: hidden 64, q 4×16 = 64 wide, k and v 1×16, MLP 128, 2 layers;
	// rank 3 on q (64 → 64), v (64 → 16) and down (128 → 64): 3·(128 + 80 + 192) a layer.
	model := hf.Config{Architecture: "Qwen3ForCausalLM", Family: hf.Qwen3, VocabSize: 100, HiddenSize: 64, IntermediateSize: 128,
		NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 1, HeadDim: 16, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-6, RopeTheta: 1e6, BOSTokenID: -1}
	if n := (LoRAConfig{Rank: 3, Alpha: 8, TargetModules: []string{"q_proj", "v_proj", "down_proj"}}).AdapterParams(model); n != 2*3*(128+80+192) {
		t.Errorf("AdapterParams = %d, want %d", n, 2*3*(128+80+192))
	}
	bad := LoRAConfig{Rank: 0, Alpha: 0, Dropout: 1, TargetModules: []string{"q_proj", "lm_head", "q_proj"}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"rank 0 is below 1", "alpha 0 is not a positive number", "dropout 1 is outside [0, 1)",
		`unknown target module "lm_head" (LoRA adapts [q_proj k_proj v_proj o_proj gate_proj up_proj down_proj])`,
		`"q_proj" is named twice`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	for _, c := range []LoRAConfig{
		{Rank: 4, Alpha: math.NaN(), TargetModules: []string{"q_proj"}},
		{Rank: 4, Alpha: math.Inf(1), TargetModules: []string{"q_proj"}},
		{Rank: 4, Alpha: 8, Dropout: -0.1, TargetModules: []string{"q_proj"}},
		{Rank: 4, Alpha: 8, Dropout: math.NaN(), TargetModules: []string{"q_proj"}},
		{Rank: 4, Alpha: 8},
		{Rank: -1, Alpha: 8, TargetModules: []string{"v_proj"}},
		{Rank: 4, Alpha: 8, TargetModules: []string{"Q_PROJ"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	m := loadVariant(t, "llama")
	if _, err := m.AddLoRA(bad, 1); err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("AddLoRA with a bad config: error %v", err)
	}
}

// Fresh adapters (B = 0) reproduce the base model bit for bit, through Logits and the cache, in
// every family, and A is drawn as documented.
func TestFreshAdaptersKeepLogits(t *testing.T) {
	ids := []int32{1, 17, 42, 5, 60, 7, 0, 33}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m := loadVariant(t, v.name)
			a, err := m.AddLoRA(allLinear(4, 8), 3)
			if err != nil {
				t.Fatal(err)
			}
			adapted := mustAdapt(t, m, a)
			want, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			got, err := adapted.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(got, want) {
				t.Error("fresh adapters change Logits")
			}
			if !sameBits(stepwise(t, adapted, ids), stepwise(t, m, ids)) {
				t.Error("fresh adapters change the cached steps")
			}

			// A: uniform on [−1/√in, 1/√in), not all zero; B: zero.
			for _, p := range a.Params() {
				isA := strings.HasSuffix(p.Name, "lora_A.weight")
				bound := float32(1 / math.Sqrt(float64(p.Shape[1])))
				var nonzero int
				for _, x := range p.Data {
					if x != 0 {
						nonzero++
					}
					if isA && !(x >= -bound && x < bound) {
						t.Fatalf("%s: %v outside [−%v, %v)", p.Name, x, bound, bound)
					}
				}
				if isA && nonzero < len(p.Data)-1 || !isA && nonzero > 0 {
					t.Errorf("%s: %d of %d values non-zero", p.Name, nonzero, len(p.Data))
				}
			}
		})
	}
}

func TestAddLoRA(t *testing.T) {
	m := loadVariant(t, "qwen3") // q_proj [128, 64], o_proj [64, 128]
	cfg := LoRAConfig{Rank: 3, Alpha: 6, Dropout: 0.1, TargetModules: []string{"o_proj", "q_proj", "down_proj"}}
	a, err := m.AddLoRA(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Config(); !slices.Equal(got.TargetModules, []string{"q_proj", "o_proj", "down_proj"}) || got.Rank != 3 || got.Alpha != 6 || got.Dropout != 0.1 || got.Scale() != 2 {
		t.Errorf("config %+v", got)
	}
	params := a.Params()
	var names []string
	for _, p := range params {
		names = append(names, p.Name)
	}
	want := []string{
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
		"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
		"base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight",
		"base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight",
		"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight",
		"base_model.model.model.layers.0.mlp.down_proj.lora_B.weight",
	}
	if len(names) != 12 || !slices.Equal(names[:6], want) || names[6] != strings.Replace(want[0], "layers.0", "layers.1", 1) {
		t.Errorf("names %v", names)
	}
	shapes := [][]int{{3, 64}, {128, 3}, {3, 128}, {64, 3}, {3, 128}, {64, 3}}
	for i, s := range shapes {
		if !slices.Equal(params[i].Shape, s) {
			t.Errorf("%s: shape %v, want %v", params[i].Name, params[i].Shape, s)
		}
	}
	if n := a.NumParams(); n != 2*(3*64+128*3+3*128+64*3+3*128+64*3) {
		t.Errorf("NumParams %d", n)
	}
	if a.BaseModel != filepath.Join("testdata", "qwen3") {
		t.Errorf("BaseModel %q", a.BaseModel)
	}
	// The same seed draws the same A, another seed another.
	same, _ := m.AddLoRA(cfg, 9)
	other, _ := m.AddLoRA(cfg, 10)
	if !slices.Equal(same.params[0].Data, params[0].Data) || slices.Equal(other.params[0].Data, params[0].Data) {
		t.Error("A does not depend on the seed alone")
	}
	// Param gives the live storage; Clone a copy.
	p, ok := a.Param(want[1])
	if !ok || !slices.Equal(p.Shape, []int{128, 3}) {
		t.Fatalf("Param(%s): %v %v", want[1], p.Shape, ok)
	}
	clone := a.Clone()
	p.Data[5] = 0.5
	if a.layers[0][qProj].b[5] != 0.5 {
		t.Error("Param's Data is not the adapters' storage")
	}
	if clone.layers[0][qProj].b[5] != 0 || !slices.Equal(clone.params[0].Data, params[0].Data) || clone.BaseModel != a.BaseModel {
		t.Error("Clone is not an independent copy")
	}
	if _, ok := a.Param("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"); ok {
		t.Error("Param of an untargeted module")
	}
}

// Adapters with B ≠ 0 change the logits; the base model and its view without adapters do not
// change, and a view reads updates to its adapters live.
func TestAdaptersChangeLogits(t *testing.T) {
	ids := []int32{1, 17, 42, 5, 60, 7}
	m := loadVariant(t, "qwen2")
	base := mustLogits(t, m, ids)
	a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"v_proj", "up_proj"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	policy := mustAdapt(t, m, a)
	randomizeB(a, 2, 0.1)
	got, err := policy.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	d := 0.0
	for i := range got {
		d = max(d, maxDiff32(got[i], base[i]))
	}
	t.Logf("max |Δlogit| from the adapters: %.3g", d)
	if d < 0.05 {
		t.Errorf("adapters with B ≠ 0 move the logits by only %g", d)
	}
	if d := maxDiffRows(stepwise(t, policy, ids), got); d > 1e-5 {
		t.Errorf("the adapted cache disagrees with the adapted Logits by %g", d)
	}

	ref, err := policy.WithAdapters(nil)
	if err != nil || ref != m || policy.Adapters() != a || ref.Adapters() != nil {
		t.Fatalf("WithAdapters(nil) of the view: %p (want %p), %v", ref, m, err)
	}
	again := mustLogits(t, m, ids)
	if !sameBits(again, base) {
		t.Error("the base model changed")
	}

	// Zeroing B through Params turns the view back into the base model.
	for _, p := range a.Params() {
		if strings.HasSuffix(p.Name, "lora_B.weight") {
			clear(p.Data)
		}
	}
	off := mustLogits(t, policy, ids)
	if !sameBits(off, base) {
		t.Error("adapters with B zeroed through Params still change the logits")
	}

	// Caches belong to one view.
	if _, err := policy.Step(m.NewCache(), ids); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Errorf("base cache on the view: %v", err)
	}
}

func maxDiffRows(a, b [][]float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, maxDiff32(a[i], b[i]))
	}
	return d
}

func TestWithAdaptersMismatch(t *testing.T) {
	small := loadVariant(t, "llama-sharded") // hidden 32, one KV head
	a, err := small.AddLoRA(allLinear(2, 4), 1)
	if err != nil {
		t.Fatal(err)
	}
	m := loadVariant(t, "llama")
	if _, err := m.WithAdapters(a); err == nil || !strings.Contains(err.Error(), "q_proj is for a [32 32] weight, the model's is [64 64]") {
		t.Errorf("error %v", err)
	}
	// Adapters fit any model of the same sizes: llama and qwen2 share them.
	b, _ := m.AddLoRA(allLinear(2, 4), 1)
	if _, err := loadVariant(t, "qwen2").WithAdapters(b); err != nil {
		t.Errorf("same sizes: %v", err)
	}
}

// Save then LoadAdapters gives the same adapters bit for bit, and the files are PEFT's.
func TestAdaptersSaveLoad(t *testing.T) {
	m := loadVariant(t, "llama3-tied")
	a, err := m.AddLoRA(LoRAConfig{Rank: 5, Alpha: 12.5, Dropout: 0.05, TargetModules: []string{"k_proj", "gate_proj"}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, 5, 0.2)
	a.BaseModel = "HuggingFaceTB/SmolLM2-135M"
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	b, err := LoadAdapters(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if b.BaseModel != a.BaseModel {
		t.Errorf("BaseModel %q", b.BaseModel)
	}
	ca, cb := a.Config(), b.Config()
	if ca.Rank != cb.Rank || ca.Alpha != cb.Alpha || ca.Dropout != cb.Dropout || !slices.Equal(ca.TargetModules, cb.TargetModules) {
		t.Errorf("config %+v, want %+v", cb, ca)
	}
	pa, pb := a.Params(), b.Params()
	if len(pa) != len(pb) {
		t.Fatalf("%d params, want %d", len(pb), len(pa))
	}
	for i := range pa {
		if pa[i].Name != pb[i].Name || !slices.Equal(pa[i].Shape, pb[i].Shape) || !sameBits([][]float32{pa[i].Data}, [][]float32{pb[i].Data}) {
			t.Errorf("%s differs after the round trip", pa[i].Name)
		}
	}
	ids := []int32{3, 9, 27, 81}
	la := mustLogits(t, mustAdapt(t, m, a), ids)
	lb := mustLogits(t, mustAdapt(t, m, b), ids)
	if !sameBits(la, lb) {
		t.Error("reloaded adapters give other logits")
	}

	// The files as PEFT writes them.
	f, err := hf.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Info("base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight")
	if info.DType != hf.F32 || !slices.Equal(info.Shape, []int{128, 5}) || len(f.Names()) != 8 || f.Metadata()["format"] != "pt" {
		t.Errorf("adapter_model.safetensors: %v, %d tensors, metadata %v", info, len(f.Names()), f.Metadata())
	}
	data, _ := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	for _, want := range []string{`"peft_type": "LORA"`, `"task_type": "CAUSAL_LM"`, `"r": 5`, `"lora_alpha": 12.5`,
		`"lora_dropout": 0.05`, `"bias": "none"`, `"fan_in_fan_out": false`, `"use_rslora": false`, `"use_dora": false`,
		`"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M"`, "\"target_modules\": [\n    \"k_proj\",\n    \"gate_proj\"\n  ]"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("adapter_config.json lacks %s:\n%s", want, data)
		}
	}

	// NaN adapters are not saved.
	a.params[1].Data[0] = float32(math.NaN())
	if err := a.Save(t.TempDir()); err == nil || !strings.Contains(err.Error(), "lora_B.weight: element 0 is NaN") {
		t.Errorf("saving NaN: %v", err)
	}
}

// writeAdapter saves fresh all-linear rank-4 adapters of m to a new directory.
func writeAdapter(t *testing.T, m *Model) string {
	t.Helper()
	a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// editConfig replaces old by new in dir's adapter_config.json.
func editConfig(t *testing.T, dir string, pairs ...string) {
	t.Helper()
	path := filepath.Join(dir, AdapterConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(pairs); i += 2 {
		if !bytes.Contains(data, []byte(pairs[i])) {
			t.Fatalf("adapter_config.json has no %s", pairs[i])
		}
		data = bytes.Replace(data, []byte(pairs[i]), []byte(pairs[i+1]), 1)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editAdapterTensors lets edit change the tensors of dir's adapter_model.safetensors.
func editAdapterTensors(t *testing.T, dir string, edit func(map[string]hf.Tensor)) {
	t.Helper()
	editTensors(t, filepath.Join(dir, AdapterWeightsFile), edit)
}

// Bad adapter directories fail with an error naming the file, the setting or the tensors.
func TestLoadAdaptersErrors(t *testing.T) {
	m := loadVariant(t, "llama")
	const q0A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
	const q0B = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"no config", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, AdapterConfigFile)) },
			[]string{AdapterConfigFile, "no such file"}},
		{"no weights", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, AdapterWeightsFile)) },
			[]string{AdapterWeightsFile, "no such file"}},
		{"pickle weights", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, AdapterWeightsFile), filepath.Join(dir, "adapter_model.bin"))
		}, []string{"adapter_model.bin", "only safetensors"}},
		{"wrong rank", func(t *testing.T, dir string) { editConfig(t, dir, `"r": 4`, `"r": 8`) },
			[]string{"8 problems", q0A + ": shape [4 64], want [8 64] (r = 8 in adapter_config.json)",
				q0B + ": shape [64 4], want [64 8]"}},
		{"untargeted module", func(t *testing.T, dir string) {
			editConfig(t, dir, "\"q_proj\",\n", "")
		}, []string{"4 problems", "unexpected " + q0A + " F32 [4 64] (q_proj is not in target_modules [v_proj])"}},
		{"missing tensor", func(t *testing.T, dir string) {
			editAdapterTensors(t, dir, func(ts map[string]hf.Tensor) { delete(ts, q0B) })
		}, []string{"(1 problem)", "missing " + q0B + " [64 4]"}},
		{"shape", func(t *testing.T, dir string) {
			editAdapterTensors(t, dir, func(ts map[string]hf.Tensor) {
				b := ts[q0B]
				ts[q0B] = hf.Tensor{DType: b.DType, Shape: []int{4, 64}, Data: b.Data} // transposed
			})
		}, []string{q0B + ": shape [4 64], want [64 4]"}},
		{"extra tensor", func(t *testing.T, dir string) {
			editAdapterTensors(t, dir, func(ts map[string]hf.Tensor) {
				ts["base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"] = hf.F32Tensor(make([]float32, 4*64), 4, 64)
				ts["base_model.model.lm_head.lora_A.weight"] = hf.F32Tensor(make([]float32, 4*64), 4, 64)
				ts["base_model.model.model.layers.0.mlp.v_proj.lora_A.weight"] = hf.F32Tensor(make([]float32, 4*64), 4, 64)
			})
		}, []string{"(the model has 2 layers)", "unexpected base_model.model.lm_head.lora_A.weight F32 [4 64]\n",
			"(v_proj is in self_attn, not mlp)"}},
		{"NaN", func(t *testing.T, dir string) {
			editAdapterTensors(t, dir, func(ts map[string]hf.Tensor) {
				a := ts[q0A]
				data := slices.Clone(a.Data)
				copy(data[4*3:], []byte{0, 0, 0xc0, 0x7f})
				ts[q0A] = hf.Tensor{DType: a.DType, Shape: a.Shape, Data: data}
			})
		}, []string{q0A + ": element 3 is NaN"}},
		{"int tensor", func(t *testing.T, dir string) {
			editAdapterTensors(t, dir, func(ts map[string]hf.Tensor) {
				ts[q0A] = hf.Tensor{DType: hf.I32, Shape: []int{4, 64}, Data: make([]byte, 4*4*64)}
			})
		}, []string{q0A + ": dtype I32"}},
		{"unknown module", func(t *testing.T, dir string) { editConfig(t, dir, `"v_proj"`, `"lm_head"`) },
			[]string{`unknown target module "lm_head"`}},
		{"not LoRA", func(t *testing.T, dir string) { editConfig(t, dir, `"LORA"`, `"IA3"`) },
			[]string{`peft_type is "IA3", want "LORA"`}},
		{"rsLoRA and DoRA", func(t *testing.T, dir string) {
			editConfig(t, dir, `"use_rslora": false`, `"use_rslora": true`, `"use_dora": false`, `"use_dora": true`,
				`"rank_pattern": {}`, `"rank_pattern": {"q_proj": 8}`)
		}, []string{"use_rslora is true, which asks for rsLoRA", "use_dora is true, which asks for DoRA: not supported", `rank_pattern is {"q_proj":8}`}},
		{"pattern", func(t *testing.T, dir string) {
			editConfig(t, dir, "[\n    \"q_proj\",\n    \"v_proj\"\n  ]", `".*proj"`)
		}, []string{`target_modules is the pattern ".*proj": only a list`}},
		{"bad values", func(t *testing.T, dir string) {
			editConfig(t, dir, `"r": 4`, `"r": 0`, `"lora_alpha": 8`, `"lora_alpha": -1`)
		}, []string{"rank 0 is below 1", "alpha -1 is not a positive number"}},
		{"not JSON", func(t *testing.T, dir string) { editConfig(t, dir, `{`, `[`) }, []string{AdapterConfigFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeAdapter(t, m)
			tc.setup(t, dir)
			a, err := LoadAdapters(dir, m)
			if err == nil {
				t.Fatalf("no error (%v)", a != nil)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
	// Adapters of another model's sizes.
	dir := writeAdapter(t, m)
	if _, err := LoadAdapters(dir, loadVariant(t, "llama-sharded")); err == nil || !strings.Contains(err.Error(), q0A+": shape [4 64], want [4 32]") {
		t.Errorf("another model: %v", err)
	}
	if _, err := LoadAdapters(dir, nil); err == nil {
		t.Error("nil model: no error")
	}
}
