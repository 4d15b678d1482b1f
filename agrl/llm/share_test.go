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

// shareAll gives m every tensor of itself as a fresh copy through Share: the projections as
// their [in, out] transposes, the rest as they are. It returns the copies by name.
func shareAll(t *testing.T, m *Model) map[string][]float32 {
	t.Helper()
	held := map[string][]float32{}
	for name, w := range m.Weights() {
		_, _, mod := m.slot(name)
		data := w
		if mod >= 0 {
			out, in := moduleShape(m.cfg, mod)
			data = transposeOf(w, out, in)
		}
		if err := m.Share(name, data, mod >= 0, nil); err != nil {
			t.Fatal(err)
		}
		held[name] = data
	}
	return held
}

// A model that holds every tensor in shared memory, the projections transposed, computes the
// logits of one that holds its own, bit for bit: alone, in a batch, through the KV cache and
// with adapters on a view made before the sharing; it saves the same files and reports the
// same weights.
func TestShareKeepsLogits(t *testing.T) {
	ids := []int32{1, 2, 3, 50, 40, 7, 9}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			own, shared := loadVariant(t, v.name), loadVariant(t, v.name)
			a, err := own.AddLoRA(allLinear(4, 8), 3)
			if err != nil {
				t.Fatal(err)
			}
			randomizeB(a, 5, 0.1)
			ownView, sharedView := mustAdapt(t, own, a), mustAdapt(t, shared, a) // the view first
			held := shareAll(t, shared)
			if got := shared.Shared(); len(got) != len(held) {
				t.Fatalf("Shared lists %d tensors, want %d", len(got), len(held))
			}
			if shared.embed == nil || &shared.embed[0] != &held["model.embed_tokens.weight"][0] {
				t.Error("the embeddings are not the shared slice")
			}
			if v.cfg.TieWordEmbeddings && &shared.head[0] != &shared.embed[0] {
				t.Error("tied embeddings: the head is no longer the embeddings")
			}
			if shared.layers[0].wq != nil || &shared.layers[0].t[qProj][0] != &held["model.layers.0.self_attn.q_proj.weight"][0] {
				t.Error("q_proj: the model still holds its [out, in] copy, or not the shared transpose")
			}
			for _, pair := range [][2]*Model{{own, shared}, {ownView, sharedView}} {
				if !sameBits(mustLogits(t, pair[1], ids), mustLogits(t, pair[0], ids)) {
					t.Fatal("other logits with shared weights")
				}
				if !sameBits(stepwise(t, pair[1], ids), stepwise(t, pair[0], ids)) {
					t.Fatal("other logits step by step with shared weights")
				}
				batch := func(m *Model) [][]float32 {
					caches := []*Cache{m.NewCache(), m.NewCache()}
					rows, err := m.NextBatch(caches, [][]int32{ids[:3], ids[2:]})
					if err != nil {
						t.Fatal(err)
					}
					return rows
				}
				if !sameBits(batch(pair[1]), batch(pair[0])) {
					t.Fatal("other batched logits with shared weights")
				}
			}
			if name := sameWeights(own, shared); name != "" {
				t.Errorf("Weights: %s differs", name)
			}
			w := shared.Weights()
			w["model.norm.weight"][0] += 1 // a copy: the model keeps its values
			if shared.norm[0] == w["model.norm.weight"][0] {
				t.Error("Weights returned the shared norm itself, not a copy")
			}
			dirA, dirB := t.TempDir(), t.TempDir()
			if err := own.Save(dirA, a, hf.F32); err != nil {
				t.Fatal(err)
			}
			if err := shared.Save(dirB, a, hf.F32); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dirA, "*.safetensors"))
			if len(files) == 0 {
				t.Fatal("no safetensors saved")
			}
			for _, f := range files {
				x, _ := os.ReadFile(f)
				y, err := os.ReadFile(filepath.Join(dirB, filepath.Base(f)))
				if err != nil || !bytes.Equal(x, y) {
					t.Errorf("%s: the shared model saves other bytes (%v)", filepath.Base(f), err)
				}
			}
		})
	}
}

// Share refuses data that is not the tensor's, bit for bit, and names that are not a tensor of
// the model or not a projection to transpose, and then changes nothing.
func TestShareErrors(t *testing.T) {
	m := loadVariant(t, "qwen3")
	want := mustLogits(t, m, []int32{4, 5, 6})
	w := m.Weights()
	q := "model.layers.1.self_attn.q_proj.weight"
	out, in := moduleShape(m.cfg, qProj)
	flipped := transposeOf(w[q], out, in)
	flipped[3*out+2] = math.Float32frombits(math.Float32bits(flipped[3*out+2]) ^ 1) // element [2, 3], one bit
	negZero := slices.Clone(w["model.norm.weight"])
	negZero[0] = float32(math.Copysign(0, -1))
	if w["model.norm.weight"][0] == 0 {
		negZero[0] = 1
	}
	for _, c := range []struct {
		name       string
		data       []float32
		transposed bool
		want       string
	}{
		{q, flipped, true, "element [2, 3]"},
		{q, w[q], true, "element [0, 1]"}, // not transposed: differs (the matrix is not symmetric)
		{q, transposeOf(w[q], out, in)[1:], true, "values"},
		{"model.norm.weight", w["model.norm.weight"], true, "not a projection"},
		{"model.norm.weight", negZero, false, "element 0"},
		{"model.layers.9.self_attn.q_proj.weight", w[q], true, "no tensor"},
		{"model.layers.01.self_attn.q_proj.weight", w[q], true, "no tensor"},
		{"model.layers.0.self_attn.q_proj.bias", nil, false, "no tensor"}, // Qwen3 has no biases
		{"lm_head.weight", nil, false, "no tensor"},                       // tied
	} {
		err := m.Share(c.name, c.data, c.transposed, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Share(%s): %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if len(m.Shared()) != 0 || !sameBits(mustLogits(t, m, []int32{4, 5, 6}), want) {
		t.Error("a refused Share changed the model")
	}
	if err := m.Share(q, transposeOf(w[q], out, in), true, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Share(q, transposeOf(w[q], out, in), true, nil); err == nil || !strings.Contains(err.Error(), "transposed already") {
		t.Errorf("sharing a projection twice: %v", err)
	}
}

// The portable loop over a transposed weight sums each output in linearLoop's order: the same
// bits, whatever the width's remainder mod 4, with and without a bias.
func TestLinearLoopT(t *testing.T) {
	rng := normals{src: rand.NewPCG(7, 8)}
	for _, in := range []int{1, 3, 4, 5, 8, 13, 64, 67} {
		const rows, out = 3, 11
		x, w, b := make([]float32, rows*in), make([]float32, out*in), make([]float32, out)
		for _, s := range [][]float32{x, w, b} {
			for i := range s {
				s[i] = float32(rng.next())
			}
		}
		for _, bias := range [][]float32{nil, b} {
			want := linearLoop(x, rows, in, w, out, bias)
			got := linearLoopT(x, rows, in, transposeOf(w, out, in), out, bias)
			if !sameBits([][]float32{got}, [][]float32{want}) {
				t.Errorf("in %d, bias %v: other bits than linearLoop", in, bias != nil)
			}
		}
	}
}

// FromWeightsTransposed takes the projections as [in, out] and computes FromWeights' logits
// bit for bit; Weights gives the [out, in] tensors back.
func TestFromWeightsTransposed(t *testing.T) {
	ids := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m := loadVariant(t, v.name)
			w := storeLayout(m)
			mt, err := FromWeightsTransposed(m.Config(), "", w)
			if err != nil {
				t.Fatal(err)
			}
			if mt.layers[0].wq != nil || mt.layers[0].t[qProj] == nil {
				t.Fatal("the projections are not held transposed")
			}
			if !sameBits(mustLogits(t, mt, ids), mustLogits(t, m, ids)) {
				t.Error("other logits")
			}
			if name := sameWeights(m, mt); name != "" {
				t.Errorf("Weights: %s differs", name)
			}
			delete(w, "model.norm.weight")
			if _, err := FromWeightsTransposed(m.Config(), "", w); err == nil || !strings.Contains(err.Error(), "model.norm.weight missing") {
				t.Errorf("a missing tensor: %v", err)
			}
		})
	}
}

// A model made by FromStorage reads its holder's memory: what the holder writes into the
// slices between two forward passes is the next pass's model, bit for bit the logits of a
// model holding the new weights itself (for every family, tied embeddings included); every
// tensor is Shared, and Weights returns copies.
func TestFromStorage(t *testing.T) {
	ids := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m := loadVariant(t, v.name)
			held := storeLayout(m)
			owner := new(int)
			ms, err := FromStorage(m.Config(), "", held, owner)
			if err != nil {
				t.Fatal(err)
			}
			if got := ms.Shared(); len(got) != len(held) {
				t.Fatalf("Shared lists %d tensors, want %d", len(got), len(held))
			}
			if len(ms.owners) != 1 || ms.owners[0] != owner {
				t.Error("the owner is not kept")
			}
			if !sameBits(mustLogits(t, ms, ids), mustLogits(t, m, ids)) {
				t.Fatal("other logits before any write")
			}
			// The holder updates every tensor in place.
			rng := rand.New(rand.NewPCG(7, 8))
			for _, x := range held {
				for i := range x {
					x[i] *= 1 + 0.05*float32(rng.NormFloat64())
				}
			}
			own, err := FromWeights(m.Config(), "", ms.Weights())
			if err != nil {
				t.Fatal(err)
			}
			got := mustLogits(t, ms, ids)
			if sameBits(got, mustLogits(t, m, ids)) {
				t.Fatal("the writes changed no logit")
			}
			if !sameBits(got, mustLogits(t, own, ids)) {
				t.Error("the logits after the writes are not the written weights'")
			}
			ws := ms.Weights()
			for name, x := range ws {
				if len(x) > 0 && len(held[name]) > 0 && &x[0] == &held[name][0] {
					t.Errorf("Weights returned the holder's memory of %s", name)
				}
			}
		})
	}
}

// storeLayout is a copy of m's weights in a GoMLX store's layout: every projection as its
// transpose [in, out], the rest as they are.
func storeLayout(m *Model) map[string][]float32 {
	w := map[string][]float32{}
	for name, x := range m.Weights() {
		w[name] = slices.Clone(x)
		if _, _, mod := m.slot(name); mod >= 0 {
			out, in := moduleShape(m.cfg, mod)
			w[name] = transposeOf(x, out, in)
		}
	}
	return w
}
