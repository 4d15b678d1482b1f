package hfgraph

import (
	"slices"
	"testing"
)

// TestFrozen: a frozen copy of adapters computes what the model computes with those adapters,
// bit for bit, and keeps doing so when the model's own adapters change; its variables are not
// trainable, and the model's trainable set is unchanged.
func TestFrozen(t *testing.T) {
	ref := loadLLM(t, "qwen2")
	g := loadGraph(t, "qwen2")
	warm := randomAdapters(t, ref, 21)
	if err := g.SetAdapters(warm); err != nil {
		t.Fatal(err)
	}
	seqs := testSeqs(g.Config().VocabSize, 8, 11, 6)
	want := runStats(t, statsExec(t, g), seqs, 12, 1)
	trainable := len(g.AdapterVariables())

	frozen, err := g.Frozen("reference", warm)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range frozen.AdapterVariables() {
		if v.Trainable {
			t.Fatalf("%s is trainable", v.Path())
		}
	}
	if len(g.AdapterVariables()) != trainable {
		t.Fatalf("the model has %d adapter variables, had %d", len(g.AdapterVariables()), trainable)
	}
	if err := g.SetAdapters(randomAdapters(t, ref, 22)); err != nil { // training moves the model's own
		t.Fatal(err)
	}
	got := runStats(t, statsExec(t, frozen), seqs, 12, 1)
	moved := runStats(t, statsExec(t, g), seqs, 12, 1)
	for i := range seqs {
		if !slices.Equal(got.logp[i], want.logp[i]) || !slices.Equal(got.entropy[i], want.entropy[i]) {
			t.Fatalf("row %d: the frozen copy does not compute what the model computed with those adapters", i)
		}
		if slices.Equal(moved.logp[i], want.logp[i]) {
			t.Fatalf("row %d: the model's new adapters changed nothing (the test cannot tell the copies apart)", i)
		}
	}
	if _, err := g.Frozen("lora", warm); err == nil {
		t.Error(`Frozen("lora"): no error`)
	}
	if _, err := loadGraph(t, "qwen2").Frozen("reference", warm); err == nil {
		t.Error("Frozen on a model without adapters: no error")
	}
}
