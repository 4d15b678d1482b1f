package agent

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/bpe"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// copyModel copies the test model of family f to a fresh directory, for tests that add
// files to it.
func copyModel(t *testing.T, f hf.Family) string {
	t.Helper()
	src, dst := modelDir(t, f), t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// writeTemplate writes a tokenizer_config.json holding chat_template v to dir.
func writeTemplate(t *testing.T, dir string, v any) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"chat_template": v, "model_max_length": 2048})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// template reads one of the chat templates that agrl/chat is verified against.
func template(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "chat", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestLoadPicksFormat(t *testing.T) {
	for _, c := range []struct {
		family hf.Family
		want   string
	}{{hf.Qwen2, "qwen2.5"}, {hf.Qwen3, "qwen3"}, {hf.Llama, "llama3"}} {
		p := loadPolicy(t, c.family, nil)
		if got := p.Format().Name(); got != c.want {
			t.Errorf("%s without a chat template: format %s, want %s", c.family, got, c.want)
		}
	}
	qwen := loadPolicy(t, hf.Qwen3, nil)
	if stops := qwen.StopTokens(); len(stops) != 2 || qwen.Tokenizer().Decode(stops) != "<|im_end|><|endoftext|>" {
		t.Errorf("qwen stop tokens %v", stops)
	}
	llama := loadPolicy(t, hf.Llama, nil)
	if got := llama.Tokenizer().Decode(llama.StopTokens()); got != "<|eot_id|><|eom_id|><|end_of_text|>" {
		t.Errorf("llama stop tokens decode to %q", got)
	}

	// The chat template wins over the family (a Llama-architecture model with Qwen's
	// template, as SmolLM-like models have ChatML), as a string or as a named list.
	dir := copyModel(t, hf.Llama)
	writeTemplate(t, dir, template(t, "qwen2_5.jinja"))
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Format().Name() != "qwen2.5" {
		t.Errorf("format %s, want qwen2.5 from the template", p.Format().Name())
	}
	writeTemplate(t, dir, []map[string]string{{"name": "tool_use", "template": "x"}, {"name": "default", "template": template(t, "qwen3.jinja")}})
	if f, err := FormatOf(dir); err != nil || f.Name() != "qwen3" {
		t.Errorf("named templates: %v, %v", f, err)
	}
	// An unverified template is an error that points to LoadFormat, which still works.
	writeTemplate(t, dir, strings.Replace(template(t, "qwen3.jinja"), "assistant", "Assistant", 1))
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "LoadFormat") {
		t.Errorf("unverified template: %v", err)
	}
	pf, err := LoadFormat(dir, chat.Qwen3().Thinking(false))
	if err != nil {
		t.Fatalf("LoadFormat: %v", err)
	}
	if name := pf.Format().Name(); name != "qwen3-no-thinking" {
		t.Errorf("LoadFormat: format %s", name)
	}
	writeTemplate(t, dir, 42)
	if _, err := Load(dir); err == nil {
		t.Error("a chat_template of 42 was accepted")
	}
}

func TestNewRejectsMismatch(t *testing.T) {
	tok, err := bpe.Load(filepath.Join("testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// agrl/llm's own test model has 256 ids: fewer than the tokenizer's.
	small, err := llm.Load(filepath.Join("..", "testdata", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(small, tok, chat.Qwen3()); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("vocabulary 256 model with a %d-id tokenizer: %v", tok.VocabSize(), err)
	}
	if _, err := New(nil, tok, chat.Qwen3()); err == nil {
		t.Error("nil model accepted")
	}

	// A tokenizer without Llama 3's tokens does not fit the Llama 3 format.
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, a := range file["added_tokens"].([]any) {
		if c := a.(map[string]any)["content"].(string); !strings.Contains(c, "_id|>") {
			kept = append(kept, a)
		}
	}
	file["added_tokens"] = kept
	data, err = json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	qwenOnly, err := bpe.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	m := loadPolicy(t, hf.Llama, nil).Model()
	if _, err := New(m, qwenOnly, chat.Llama3()); err == nil || !strings.Contains(err.Error(), "<|eot_id|>") {
		t.Errorf("llama3 format with no <|eot_id|>: %v", err)
	}
	p, err := New(m, qwenOnly, chat.Qwen25())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.StopTokens(), loadPolicy(t, hf.Qwen2, nil).StopTokens()) {
		t.Error("stop tokens differ between two tokenizers with the same Qwen tokens")
	}
}

func TestSetters(t *testing.T) {
	p := loadPolicy(t, hf.Qwen2, nil)
	q := p.System("Be brief.").Workers(3)
	if p.system != "" || p.workers != 0 || q.system != "Be brief." || q.workers != 3 {
		t.Error("a setter changed the policy it was called on")
	}
	a, err := p.Prompt(nil, "hi")
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Prompt(nil, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Tokenizer().Decode(a), "You are Qwen") || !strings.Contains(q.Tokenizer().Decode(b), "Be brief.") {
		t.Error("the system prompt is not where the format puts it")
	}
	if _, err := p.Score([]int32{1, 2, 3}, -1); err == nil {
		t.Error("Score at temperature -1")
	}
}

// TestWithModel: a policy given another model of the same shapes samples from it (its scores
// are that model's) and keeps its settings; a model of other shapes is refused.
func TestWithModel(t *testing.T) {
	p := loadPolicy(t, hf.Qwen2, nil).System("Be brief.")
	w := p.Model().Weights()
	for _, v := range w {
		for i := range v {
			v[i] *= 1.5
		}
	}
	other, err := llm.FromWeights(p.Model().Config(), "", w)
	if err != nil {
		t.Fatal(err)
	}
	q, err := p.WithModel(other)
	if err != nil {
		t.Fatal(err)
	}
	if q.Model() != other || p.Model() == other || q.system != "Be brief." {
		t.Fatal("WithModel did not make a copy with the new model and the old settings")
	}
	ids := []int32{1, 2, 3, 4}
	a, err := p.Score(ids, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Score(ids, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := other.Logits(ids[:3])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a, b) || len(b) != len(ids) {
		t.Fatalf("scores with the new model %v, with the old %v", b, a)
	}
	for j := 1; j < len(ids); j++ { // entry j is log p(ids[j] | ids[:j]) under the new model
		z, hi, sum := want[j-1], math.Inf(-1), 0.0
		for _, v := range z {
			hi = math.Max(hi, float64(v))
		}
		for _, v := range z {
			sum += math.Exp(float64(v) - hi)
		}
		if lp := float64(z[ids[j]]) - hi - math.Log(sum); math.Abs(lp-float64(b[j])) > 1e-5 {
			t.Fatalf("token %d: score %v, the new model's log-prob %v", j, b[j], lp)
		}
	}
	if _, err := p.WithModel(loadPolicy(t, hf.Llama, nil).Model()); err == nil {
		t.Error("a model of another configuration was accepted")
	}
	if _, err := p.WithModel(nil); err == nil {
		t.Error("nil model accepted")
	}
}
