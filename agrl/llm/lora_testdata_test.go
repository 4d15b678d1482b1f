package llm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"agrl.dev/agrl/hf"
)

// The LoRA adapter in testdata/qwen3-lora, for testdata/qwen3: all seven projections, rank 4,
// alpha 8 (scale 2), A as AddLoRA draws it, B from randomizeB, so that the adapter moves the
// logits (by about 2). Its expected.json is scripts/lora_reference.py's (testdata/README.md).
const (
	loraBase, loraDir = "qwen3", "qwen3-lora"
	loraSeedA         = 7
	loraSeedB, loraB  = 8, 0.1
)

func loraTestdata(t *testing.T) (*Model, *Adapters) {
	t.Helper()
	m := loadVariant(t, loraBase)
	a, err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.05, TargetModules: LoRAModules()}, loraSeedA)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, loraSeedB, loraB)
	a.BaseModel = "agrl/llm/testdata/" + loraBase // from the repository's root, where the script runs
	return m, a
}

// TestLoRATestdata checks that the adapter in testdata is still what loraTestdata writes, byte
// for byte (-update rewrites it; then rerun scripts/lora_reference.py).
func TestLoRATestdata(t *testing.T) {
	_, a := loraTestdata(t)
	dir := filepath.Join("testdata", loraDir)
	if *update {
		if err := a.Save(dir); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := t.TempDir()
	if err := a.Save(tmp); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{AdapterConfigFile, AdapterWeightsFile} {
		got, _ := os.ReadFile(filepath.Join(tmp, name))
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s: Adapters.Save writes other bytes than the committed file (run with -update and regenerate expected.json)", loraDir, name)
		}
	}
}

// The adapted model's logits agree with the independent PyTorch computation of
// scripts/lora_reference.py (float64 with the adapters merged, float32 unmerged), through
// Logits, token by token through the cache, and after a merged F32 save and Load.
func TestLoRAReference(t *testing.T) {
	const tol = 1e-4
	m := loadVariant(t, loraBase)
	dir := filepath.Join("testdata", loraDir)
	a, err := LoadAdapters(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	policy := mustAdapt(t, m, a)
	saved := t.TempDir()
	if err := m.Save(saved, a, hf.F32); err != nil {
		t.Fatal(err)
	}
	merged, err := Load(saved)
	if err != nil {
		t.Fatal(err)
	}
	e := loadExpected(t, dir)
	var vs64, vs32, steps, vsMerged, fromBase float64
	for _, s := range e.Sequences {
		got := mustLogits(t, policy, s.IDs)
		vs64 = max(vs64, maxDiff(t, got, s.Float64))
		vs32 = max(vs32, maxDiff(t, got, s.Float32))
		fromBase = max(fromBase, maxDiff(t, mustLogits(t, m, s.IDs), s.Float64))

		c := policy.NewCache()
		var byStep [][]float32
		for _, id := range s.IDs {
			row, err := policy.Step(c, []int32{id})
			if err != nil {
				t.Fatal(err)
			}
			byStep = append(byStep, row...)
		}
		steps = max(steps, maxDiff(t, byStep, s.Float64))
		vsMerged = max(vsMerged, maxDiff(t, mustLogits(t, merged, s.IDs), s.Float64))
	}
	t.Logf("max |Δlogit| vs torch %s: float64 (merged) %.2g, float32 (unmerged) %.2g; one token a step %.2g; merged F32 save %.2g; the base model is %.2g away",
		e.Torch, vs64, vs32, steps, vsMerged, fromBase)
	if !(vs64 <= tol && vs32 <= tol && steps <= tol && vsMerged <= tol) {
		t.Errorf("adapted logits differ from the reference by more than %g", tol)
	}
	if fromBase < 0.1 {
		t.Errorf("the reference adapter moves the logits by only %g", fromBase)
	}
	// The committed adapter is the one loraTestdata makes.
	_, want := loraTestdata(t)
	for i, p := range want.Params() {
		if !sameBits([][]float32{p.Data}, [][]float32{a.params[i].Data}) {
			t.Fatalf("%s differs from loraTestdata's", p.Name)
		}
	}
}
