package hfgraph

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"agrl.dev/agrl/llm"
	"github.com/gomlx/compute"
	_ "github.com/gomlx/compute/gobackend" // the pure-Go backend the tests run on
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// testdata holds agrl/llm's tiny checkpoints (see its README.md).
const testdata = "../../llm/testdata"

// families are the checkpoints every test runs on: one of each family, and variations (two
// of them with YaRN RoPE scaling).
var families = []string{"llama", "llama3-tied", "qwen2", "qwen3", "llama-sharded", "qwen2-yarn", "llama-yarn"}

// testBackend is the backend of every test: $HFGRAPH_BACKEND, else the go backend with its
// operations in sequence (its parallel modes hung on 2-core machines, docs/DESIGN.md).
var testBackend = sync.OnceValues(func() (compute.Backend, error) {
	config := os.Getenv("HFGRAPH_BACKEND")
	if config == "" {
		config = "go:ops_sequential"
	}
	return compute.NewWithConfig(config)
})

func backend(t testing.TB) compute.Backend {
	t.Helper()
	b, err := testBackend()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadLLM(t testing.TB, name string) *llm.Model {
	t.Helper()
	m, err := llm.Load(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func loadGraph(t testing.TB, name string) *Model {
	t.Helper()
	m, err := Load(model.NewStore(), "", filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// allLinear adapts all seven projections.
func allLinear(rank int, alpha float64) llm.LoRAConfig {
	return llm.LoRAConfig{Rank: rank, Alpha: alpha, Dropout: 0.05, TargetModules: llm.LoRAModules()}
}

// randomizeB sets every lora_B of a to seeded N(0, std²) values, so the adapters change the
// model (AddLoRA's B is zero).
func randomizeB(a *llm.Adapters, seed uint64, std float64) {
	rng := rand.New(rand.NewPCG(seed, 0x42))
	for _, p := range a.Params() {
		if strings.HasSuffix(p.Name, "lora_B.weight") {
			for i := range p.Data {
				p.Data[i] = float32(std * rng.NormFloat64())
			}
		}
	}
}

// randomAdapters are adapters of rank 4, alpha 8 on every projection of m, with A as AddLoRA
// draws it and B random: they move the logits by about as much as the qwen3-lora testdata.
func randomAdapters(t testing.TB, m *llm.Model, seed uint64) *llm.Adapters {
	t.Helper()
	a, err := m.AddLoRA(allLinear(4, 8), seed)
	if err != nil {
		t.Fatal(err)
	}
	randomizeB(a, seed+1, 0.1)
	return a
}

// testSeqs are sequences of several lengths, one of a single token (no target) among them.
func testSeqs(vocab int, seed uint64, lens ...int) [][]int32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	seqs := make([][]int32, len(lens))
	for i, n := range lens {
		for range n {
			seqs[i] = append(seqs[i], int32(rng.IntN(vocab)))
		}
	}
	return seqs
}

// tokenStats holds the host values of TokenStats, [B][T-1] each.
type tokenStats struct{ logp, entropy, valid [][]float32 }

// statsExec builds an executor of m.TokenStats.
func statsExec(t testing.TB, m *Model) *model.Exec {
	t.Helper()
	e, err := model.NewExec(backend(t), m.Store(), func(_ *model.Scope, tokens, lengths, invT *graph.Node) (*graph.Node, *graph.Node, *graph.Node) {
		return m.TokenStats(tokens, lengths, invT)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runStats pads seqs to width and runs e on them.
func runStats(t testing.TB, e *model.Exec, seqs [][]int32, width int, invT float32) tokenStats {
	t.Helper()
	tok, lens, err := Pad(seqs, width)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Call(tok, lens, invT)
	if err != nil {
		t.Fatal(err)
	}
	rows := func(x *tensors.Tensor) [][]float32 {
		flat := tensors.MustCopyFlatData[float32](x)
		w := x.Shape().Dimensions[1]
		r := make([][]float32, len(seqs))
		for i := range r {
			r[i] = flat[i*w : (i+1)*w]
		}
		return r
	}
	return tokenStats{rows(out[0]), rows(out[1]), rows(out[2])}
}

// refStats computes logp and entropy of seq's targets from agrl/llm's float32 logits, the
// softmax taken in float64.
func refStats(t testing.TB, m *llm.Model, seq []int32, invT float64) (logp, entropy []float64) {
	t.Helper()
	logits, err := m.Logits(seq)
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j+1 < len(seq); j++ {
		row := logits[j]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, invT*float64(v))
		}
		var z float64
		for _, v := range row {
			z += math.Exp(invT*float64(v) - mx)
		}
		lz := mx + math.Log(z)
		var h float64
		for _, v := range row {
			lp := invT*float64(v) - lz
			h -= math.Exp(lp) * lp
		}
		logp = append(logp, invT*float64(row[seq[j+1]])-lz)
		entropy = append(entropy, h)
	}
	return logp, entropy
}

// compare returns the largest differences of got (a padded batch) from agrl/llm's log-probs
// and entropies, and checks that padding positions are zero with valid 0.
func compare(t *testing.T, got tokenStats, ref *llm.Model, seqs [][]int32, invT float64) (dLogp, dEnt float64) {
	t.Helper()
	for i, s := range seqs {
		lp, ent := refStats(t, ref, s, invT)
		for j := range got.logp[i] {
			if j < len(lp) {
				if got.valid[i][j] != 1 {
					t.Fatalf("row %d position %d: valid %v, want 1", i, j, got.valid[i][j])
				}
				dLogp = max(dLogp, math.Abs(float64(got.logp[i][j])-lp[j]))
				dEnt = max(dEnt, math.Abs(float64(got.entropy[i][j])-ent[j]))
			} else if got.valid[i][j] != 0 || got.logp[i][j] != 0 || got.entropy[i][j] != 0 {
				t.Fatalf("row %d padding position %d: valid %v logp %v entropy %v, want 0",
					i, j, got.valid[i][j], got.logp[i][j], got.entropy[i][j])
			}
		}
	}
	return dLogp, dEnt
}

const tolLogp = 1e-4

// TestLogProbsMatchLLM compares the graph's per-token log-probs and entropies on a padded
// batch with those of agrl/llm (itself checked against PyTorch to 2e-6), for every family,
// without adapters, with random non-zero adapters and at a temperature.
func TestLogProbsMatchLLM(t *testing.T) {
	for _, name := range families {
		t.Run(name, func(t *testing.T) {
			ref := loadLLM(t, name)
			g := loadGraph(t, name)
			cfg := g.Config()
			seqs := testSeqs(cfg.VocabSize, 1, 11, 6, 1, 3)
			const width = 14
			base := statsExec(t, g.Base())

			dl, de := compare(t, runStats(t, base, seqs, width, 1), ref, seqs, 1)
			t.Logf("base:       max |Δlogp| %.2g, max |Δentropy| %.2g", dl, de)
			if dl > tolLogp || de > tolLogp {
				t.Errorf("base: max |Δlogp| %g, |Δentropy| %g, want <= %g", dl, de, tolLogp)
			}
			const temp = 0.7
			dl, de = compare(t, runStats(t, base, seqs, width, 1/temp), ref, seqs, 1/temp)
			t.Logf("base T=0.7: max |Δlogp| %.2g, max |Δentropy| %.2g", dl, de)
			if dl > tolLogp || de > tolLogp {
				t.Errorf("temperature %v: max |Δlogp| %g, |Δentropy| %g, want <= %g", temp, dl, de, tolLogp)
			}

			a := randomAdapters(t, ref, 3)
			if err := g.SetAdapters(a); err != nil {
				t.Fatal(err)
			}
			adapted, err := ref.WithAdapters(a)
			if err != nil {
				t.Fatal(err)
			}
			withLoRA := runStats(t, statsExec(t, g), seqs, width, 1)
			dl, de = compare(t, withLoRA, adapted, seqs, 1)
			t.Logf("LoRA:       max |Δlogp| %.2g, max |Δentropy| %.2g", dl, de)
			if dl > tolLogp || de > tolLogp {
				t.Errorf("with adapters: max |Δlogp| %g, |Δentropy| %g, want <= %g", dl, de, tolLogp)
			}
			baseAgain, moved := runStats(t, base, seqs, width, 1), 0.0
			for i := range seqs {
				for j := range baseAgain.logp[i] {
					moved = max(moved, math.Abs(float64(withLoRA.logp[i][j]-baseAgain.logp[i][j])))
				}
			}
			t.Logf("the adapters move logp by up to %.2g", moved)
			if moved < 0.01 {
				t.Errorf("the adapters moved logp by %g only: the comparison tests nothing", moved)
			}
			if dl, _ = compare(t, baseAgain, ref, seqs, 1); dl > tolLogp {
				t.Errorf("Base with adapters present: max |Δlogp| %g from the unadapted model", dl)
			}
		})
	}
}

// TestLoRATestdata runs the PEFT adapter in agrl/llm's testdata (checked there against PyTorch).
func TestLoRATestdata(t *testing.T) {
	ref := loadLLM(t, "qwen3")
	a, err := llm.LoadAdapters(filepath.Join(testdata, "qwen3-lora"), ref)
	if err != nil {
		t.Fatal(err)
	}
	adapted, err := ref.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	g, err := FromLLM(model.NewStore(), "/policy", adapted) // weights and adapters both
	if err != nil {
		t.Fatal(err)
	}
	if g.LoRA() == nil || g.Scope() != "/policy" {
		t.Fatalf("FromLLM of an adapted view: LoRA %v, scope %q", g.LoRA(), g.Scope())
	}
	seqs := testSeqs(g.Config().VocabSize, 2, 16, 9, 4)
	dl, de := compare(t, runStats(t, statsExec(t, g), seqs, 16, 1), adapted, seqs, 1)
	t.Logf("qwen3-lora: max |Δlogp| %.2g, max |Δentropy| %.2g", dl, de)
	if dl > tolLogp || de > tolLogp {
		t.Errorf("max |Δlogp| %g, |Δentropy| %g, want <= %g", dl, de, tolLogp)
	}
}

// TestLogits compares the raw logits of a padded batch with agrl/llm's.
func TestLogits(t *testing.T) {
	ref := loadLLM(t, "llama3-tied")
	g := loadGraph(t, "llama3-tied")
	seqs := testSeqs(g.Config().VocabSize, 6, 7, 3)
	tok, lens, err := Pad(seqs, 8)
	if err != nil {
		t.Fatal(err)
	}
	out, err := model.CallOnce(backend(t), g.Store(), func(_ *model.Scope, tokens, lengths *graph.Node) *graph.Node {
		return g.Logits(tokens, lengths)
	}, tok, lens)
	if err != nil {
		t.Fatal(err)
	}
	if d := out.Shape().Dimensions; !slices.Equal(d, []int{2, 8, 256}) {
		t.Fatalf("logits %v, want [2 8 256]", d)
	}
	flat := tensors.MustCopyFlatData[float32](out)
	worst := 0.0
	for i, s := range seqs {
		want, err := ref.Logits(s)
		if err != nil {
			t.Fatal(err)
		}
		for j := range want {
			for v, w := range want[j] {
				worst = max(worst, math.Abs(float64(flat[(i*8+j)*256+v]-w)))
			}
		}
	}
	t.Logf("max |Δlogit| %.2g", worst)
	if worst > tolLogp {
		t.Errorf("max |Δlogit| %g, want <= %g", worst, tolLogp)
	}
}

// TestPaddingInvariance checks that a row's values do not depend on the batch it is in, its
// padding or the other rows' lengths: each row alone, unpadded, against the padded batch.
func TestPaddingInvariance(t *testing.T) {
	ref := loadLLM(t, "qwen2")
	g := loadGraph(t, "qwen2")
	if err := g.SetAdapters(randomAdapters(t, ref, 5)); err != nil {
		t.Fatal(err)
	}
	e := statsExec(t, g)
	seqs := testSeqs(g.Config().VocabSize, 3, 9, 4, 0, 2) // with an empty row (a padding row)
	batch := runStats(t, e, seqs, 12, 1)
	worst := 0.0
	for i, s := range seqs {
		if len(s) == 0 {
			for j := range batch.logp[i] {
				if batch.logp[i][j] != 0 || batch.entropy[i][j] != 0 || batch.valid[i][j] != 0 {
					t.Fatalf("empty row %d position %d: logp %v entropy %v valid %v, want 0", i, j, batch.logp[i][j], batch.entropy[i][j], batch.valid[i][j])
				}
			}
			continue
		}
		alone := runStats(t, e, [][]int32{s}, 0, 1)
		for j := range alone.logp[0] {
			worst = max(worst, math.Abs(float64(alone.logp[0][j]-batch.logp[i][j])))
			worst = max(worst, math.Abs(float64(alone.entropy[0][j]-batch.entropy[i][j])))
		}
	}
	t.Logf("max |Δ| between a row alone and in the padded batch: %.2g", worst)
	if worst > 1e-5 {
		t.Errorf("padding changes the real rows by %g", worst)
	}
}

// TestFromLLMMatchesLoad checks that both ways of loading give the same variables, bit for bit.
func TestFromLLMMatchesLoad(t *testing.T) {
	a := loadGraph(t, "llama-sharded")
	b, err := FromLLM(model.NewStore(), "", loadLLM(t, "llama-sharded"))
	if err != nil {
		t.Fatal(err)
	}
	va, vb := a.BaseVariables(), b.BaseVariables()
	if len(va) != len(a.Config().Tensors()) || len(va) != len(vb) {
		t.Fatalf("%d and %d variables for %d tensors", len(va), len(vb), len(a.Config().Tensors()))
	}
	for i := range va {
		if va[i].Path() != vb[i].Path() || !slices.Equal(values(t, va[i]), values(t, vb[i])) {
			t.Fatalf("%s differs from %s", va[i].Path(), vb[i].Path())
		}
		if va[i].Trainable {
			t.Errorf("%s is trainable", va[i].Path())
		}
	}
	if _, err := Load(a.Store(), "", filepath.Join(testdata, "llama-sharded")); err == nil {
		t.Error("loading twice into one scope: no error")
	}
}

func values(t testing.TB, v *model.Variable) []float32 {
	t.Helper()
	val, err := v.Value()
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](val)
}

// TestZeroAdaptersExact checks that fresh adapters are agrl/llm's, value for value, and leave
// the log-probs bit for bit as the base's.
func TestZeroAdaptersExact(t *testing.T) {
	for _, name := range []string{"qwen3", "llama-sharded"} {
		t.Run(name, func(t *testing.T) {
			ref := loadLLM(t, name)
			g := loadGraph(t, name)
			cfg := llm.LoRAConfig{Rank: 3, Alpha: 6, TargetModules: []string{"v_proj", "q_proj", "down_proj"}}
			if err := g.AddLoRA(cfg, 11); err != nil {
				t.Fatal(err)
			}
			want, err := ref.AddLoRA(cfg, 11)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Adapters(ref)
			if err != nil {
				t.Fatal(err)
			}
			wp, gp := want.Params(), got.Params()
			if len(wp) != len(gp) || len(gp) != len(g.AdapterVariables()) {
				t.Fatalf("%d params, want %d (%d variables)", len(gp), len(wp), len(g.AdapterVariables()))
			}
			for i := range wp {
				if wp[i].Name != gp[i].Name || !slices.Equal(wp[i].Data, gp[i].Data) {
					t.Fatalf("%s differs from agrl/llm's AddLoRA", gp[i].Name)
				}
			}
			seqs := testSeqs(g.Config().VocabSize, 4, 10, 7)
			a := runStats(t, statsExec(t, g), seqs, 12, 1)
			b := runStats(t, statsExec(t, g.Base()), seqs, 12, 1)
			for i := range seqs {
				if !slices.Equal(a.logp[i], b.logp[i]) || !slices.Equal(a.entropy[i], b.entropy[i]) {
					t.Fatalf("row %d: zero adapters change the values", i)
				}
			}
			if err := g.AddLoRA(cfg, 1); err == nil {
				t.Error("AddLoRA twice: no error")
			}
		})
	}
}

// TestAdaptersRoundTrip copies adapters in and out, through a PEFT directory.
func TestAdaptersRoundTrip(t *testing.T) {
	ref := loadLLM(t, "qwen2")
	g := loadGraph(t, "qwen2")
	a := randomAdapters(t, ref, 9)
	if err := g.SetAdapters(a); err != nil {
		t.Fatal(err)
	}
	out, err := g.Adapters(ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := out.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := llm.LoadAdapters(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config().Dropout != 0.05 {
		t.Errorf("dropout %v after the round trip, want 0.05", back.Config().Dropout)
	}
	ap, bp := a.Params(), back.Params()
	for i := range ap {
		if ap[i].Name != bp[i].Name || !slices.Equal(ap[i].Data, bp[i].Data) {
			t.Fatalf("%s changed in the round trip", ap[i].Name)
		}
	}
	// SetAdapters again replaces the values; other shapes are refused.
	if err := g.SetAdapters(randomAdapters(t, ref, 10)); err != nil {
		t.Fatal(err)
	}
	other, err := ref.AddLoRA(llm.LoRAConfig{Rank: 2, Alpha: 2, TargetModules: []string{"q_proj"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetAdapters(other); err == nil {
		t.Error("SetAdapters of another configuration: no error")
	}
	if err := g.ExportAdapters(other); err == nil {
		t.Error("ExportAdapters into another configuration: no error")
	}
}
