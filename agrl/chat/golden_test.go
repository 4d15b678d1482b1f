package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// goldenCase is one rendering in testdata/golden.json (see scripts/chat_check/gen.mjs).
type goldenCase struct {
	Name     string `json:"name"`
	Template string `json:"template"`
	Options  struct {
		Thinking      *bool  `json:"thinking"`
		ToolsInSystem bool   `json:"tools_in_system"`
		Date          string `json:"date"`
	} `json:"options"`
	Tools               []agrl.Tool `json:"tools"`
	Messages            []Message   `json:"messages"`
	AddGenerationPrompt bool        `json:"add_generation_prompt"`
	Text                *string     `json:"text"`
	TextJS              *string     `json:"text_js"`
	Diverges            string      `json:"diverges"`
	Error               string      `json:"error"`
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		References map[string]string `json:"references"`
		Cases      []goldenCase      `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 100 {
		t.Fatalf("golden.json has %d cases; want the whole corpus", len(doc.Cases))
	}
	return doc.Cases
}

// formatOf builds the format a golden case was rendered with.
func formatOf(t *testing.T, c goldenCase) Format {
	t.Helper()
	switch c.Template {
	case "qwen2_5.jinja":
		return Qwen25()
	case "qwen3.jinja":
		q := Qwen3()
		if c.Options.Thinking != nil {
			q = q.Thinking(*c.Options.Thinking)
		}
		return q
	case "llama3_2.jinja":
		return Llama3().ToolsInSystem(c.Options.ToolsInSystem).Date(c.Options.Date)
	}
	t.Fatalf("%s: unknown template %q", c.Name, c.Template)
	return nil
}

// TestGolden renders every case of the corpus and compares it with the reference byte for byte.
func TestGolden(t *testing.T) {
	var matched, diverging, errs int
	for _, c := range loadGolden(t) {
		f := formatOf(t, c)
		got, err := f.Render(c.Messages, c.Tools, c.AddGenerationPrompt)
		switch {
		case c.Error != "":
			if err == nil {
				t.Errorf("%s: rendered, but the template fails (%s)", c.Name, c.Error)
			}
			errs++
			continue
		case err != nil:
			t.Errorf("%s: %v", c.Name, err)
			continue
		case c.Text == nil:
			t.Errorf("%s: golden case without text", c.Name)
			continue
		case got != *c.Text:
			t.Errorf("%s: mismatch at byte %d\n got  %q\n want %q", c.Name, diffAt(got, *c.Text), got, *c.Text)
			continue
		}
		matched++
		if c.TextJS != nil {
			if c.Diverges == "" || *c.TextJS == *c.Text {
				t.Errorf("%s: text_js without a reason to differ", c.Name)
			}
			diverging++
		}
	}
	t.Logf("%d renderings match (%d of them where @huggingface/jinja differs from jinja2), %d template errors reproduced",
		matched, diverging, errs)
}

func diffAt(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// TestForTemplate recognises each template in testdata/ and rejects others with a guess.
func TestForTemplate(t *testing.T) {
	for file, want := range map[string]string{"qwen2_5.jinja": "qwen2.5", "qwen3.jinja": "qwen3", "llama3_2.jinja": "llama3"} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		f, err := ForTemplate(string(data))
		if err != nil || f.Name() != want {
			t.Errorf("%s: got %v, %v; want %s", file, f, err, want)
		}
		_, err = ForTemplate(string(data) + " ")
		if err == nil || !strings.Contains(err.Error(), "resembles") {
			t.Errorf("%s with a trailing space: err %v; want an unverified-template error", file, err)
		}
	}
	if _, err := ForTemplate("{{ messages }}"); err == nil || !strings.Contains(err.Error(), "no family") {
		t.Errorf("unrelated template: %v", err)
	}
}

// ByName knows every name agrl.ChatFormats lists and gives it back as Name; an unknown name
// is an error listing them. An unknown template's error names the format it resembles.
func TestByName(t *testing.T) {
	for _, name := range agrl.ChatFormats() {
		f, err := ByName(name)
		if err != nil || f.Name() != name {
			t.Errorf("ByName(%q) = %v, %v", name, f, err)
		}
	}
	if f, _ := ByName("qwen3-no-thinking"); !strings.HasSuffix(f.GenerationPrompt(), "<think>\n\n</think>\n\n") {
		t.Errorf("qwen3-no-thinking: generation prompt %q", f.GenerationPrompt())
	}
	if _, err := ByName("chatml"); err == nil || !strings.Contains(err.Error(), `unknown format "chatml" (known: llama3, qwen2.5, qwen3, qwen3-no-thinking)`) {
		t.Errorf("ByName(chatml): %v", err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "llama3_2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ForTemplate(strings.Replace(string(data), "26 Jul 2024", "23 Jul 2024", 1))
	var unknown *UnknownTemplateError
	if !errors.As(err, &unknown) || unknown.Resembles != "llama3" || len(unknown.SHA256) != 64 {
		t.Errorf("edited Llama template: %v", err)
	}
}
