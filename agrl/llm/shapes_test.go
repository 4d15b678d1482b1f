package llm

import "testing"

// TestShapes: every named shape validates, and the published ones have the published
// parameter counts.
func TestShapes(t *testing.T) {
	want := map[string]int{"smollm2-135m": 134_515_008, "qwen3-0.6b": 596_049_920, "qwen2.5-0.5b": 494_032_768}
	for _, name := range ShapeNames() {
		c, err := Shape(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n, ok := want[name]; ok {
			if got := c.NumParams(); got != n {
				t.Errorf("%s: %d parameters, want %d", name, got, n)
			}
		}
	}
	if _, err := Shape("gpt-5"); err == nil {
		t.Error("unknown shape accepted")
	}
}
