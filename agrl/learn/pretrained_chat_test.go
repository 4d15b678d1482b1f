package learn

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// A model whose tokenizer_config.json holds a chat template agrl/chat is not verified against
// does not load by default: the error names the format the template resembles and how to
// choose one. Named with ChatFormat, the model loads in that format, and a checkpoint rebuilds
// the policy in it (LoadModel).
func TestPretrainedChatFormat(t *testing.T) {
	src, dir := tinyQwen3(t), t.TempDir()
	for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Qwen3's markers (tool calls, reasoning), but not Qwen3's template byte for byte.
	tmpl := "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}{# <tool_call> <think> #}"
	tc, _ := json.Marshal(map[string]string{"chat_template": tmpl})
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8), 1)
	for _, want := range []string{"unverified chat template", `resembles the "qwen3" format`, "PretrainedLM.ChatFormat", "-chat-format", "qwen3-no-thinking"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("unknown template: error %v lacks %q", err, want)
		}
	}

	pp, err := LoadPretrained(agrl.Pretrained(dir).LoRA(4, 8).ChatFormat("qwen3-no-thinking"), 1)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := pp.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if f := pol.Format(); f.Name() != "qwen3-no-thinking" || !strings.HasSuffix(f.GenerationPrompt(), "<think>\n\n</think>\n\n") {
		t.Errorf("format %s, generation prompt %q", f.Name(), f.GenerationPrompt())
	}
	ck := t.TempDir()
	if _, err := pp.Save(ck); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(ck, "")
	if err != nil {
		t.Fatal(err)
	}
	back, ok := m.(*PretrainedPolicy)
	if !ok {
		t.Fatalf("LoadModel gave %T", m)
	}
	if pol, err = back.Agent(); err != nil {
		t.Fatal(err)
	}
	if name := pol.Format().Name(); name != "qwen3-no-thinking" {
		t.Errorf("from the checkpoint: format %s", name)
	}
}
