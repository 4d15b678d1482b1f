package agrl

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestTokenizerRoundTrip(t *testing.T) {
	tok := ASCIITokenizer()
	if got, want := tok.VocabSize(), numSpecial+len(Tags)+len(PrintableASCII); got != want {
		t.Fatalf("VocabSize = %d, want %d", got, want)
	}
	texts := []string{
		"",
		"What is 3*(4+5)?",
		"<think>add first</think><tool>calc(3*(4+5))</tool>",
		"<obs>27</obs><answer>27</answer>",
		"a < b and c > d; <tol> is not a tag; </tool",
		"tabs\tand\nnewlines",
	}
	for _, s := range texts {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
	ids := tok.Encode("<tool>x</tool>")
	if len(ids) != 3 || ids[0] != TagID(ToolOpen) || ids[2] != TagID(ToolClose) {
		t.Errorf("tags are not single tokens: %v", ids)
	}
	for i, tag := range Tags {
		if TagID(tag) != FirstTag+int32(i) || tok.Token(TagID(tag)) != tag {
			t.Errorf("tag %q has id %d", tag, TagID(tag))
		}
	}
	if TagID("<nope>") != -1 {
		t.Error("TagID of a non-tag")
	}
}

func TestTokenizerUnknown(t *testing.T) {
	tok := ASCIITokenizer()
	ids := tok.Encode("é\x00x")
	for _, id := range ids[:len(ids)-1] {
		if id != UNK {
			t.Fatalf("non-ASCII bytes should map to UNK: %v", ids)
		}
	}
	if got := tok.Decode(ids); got != strings.Repeat(unkText, 3)+"x" {
		t.Errorf("Decode = %q", got)
	}
	if got := tok.Decode([]int32{BOS, -5, 9999, PAD, EOS}); got != unkText+unkText {
		t.Errorf("Decode of odd ids = %q", got)
	}
	all := ByteTokenizer()
	s := "é\x00\xff<answer>"
	if got := all.Decode(all.Encode(s)); got != s {
		t.Errorf("byte tokenizer round trip: %q", got)
	}
	if _, err := NewTokenizer(""); err == nil {
		t.Error("empty alphabet accepted")
	}
}

func TestTokenizerJSON(t *testing.T) {
	tok, err := NewTokenizer("0123456789+-*/() ")
	if err != nil {
		t.Fatal(err)
	}
	back := jsonRoundTrip(t, tok)
	if back.Alphabet() != tok.Alphabet() || back.VocabSize() != tok.VocabSize() {
		t.Errorf("JSON round trip changed the tokenizer: %q vs %q", back.Alphabet(), tok.Alphabet())
	}
}

func TestTokenizerWords(t *testing.T) {
	base := ASCIITokenizer()
	tok, err := base.Words(DigitPairs()...)
	if err != nil {
		t.Fatal(err)
	}
	tok, err = tok.Words("calc(")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.VocabSize(), base.VocabSize()+101; got != want {
		t.Fatalf("vocab %d, want %d", got, want)
	}
	text := "<tool>calc(480-43*(7+1005))</tool>"
	ids := tok.Encode(text)
	var parts []string
	for _, id := range ids {
		parts = append(parts, tok.Token(id))
	}
	// Tags first, then the longest word, digits in pairs from the left, a lone last digit.
	want := []string{"<tool>", "calc(", "48", "0", "-", "43", "*", "(", "7", "+", "10", "05", ")", ")", "</tool>"}
	if strings.Join(parts, "|") != strings.Join(want, "|") {
		t.Errorf("tokens %q\nwant   %q", parts, want)
	}
	if tok.Decode(ids) != text {
		t.Errorf("round trip %q", tok.Decode(ids))
	}
	// Byte-by-byte spelling decodes to the same text; existing ids keep their meaning.
	if got := tok.Decode(base.Encode(text)); got != text {
		t.Errorf("byte spelling decodes to %q", got)
	}
	back := jsonRoundTrip(t, tok)
	if !slices.Equal(back.Encode(text), ids) || back.VocabSize() != tok.VocabSize() {
		t.Error("JSON round trip changed the tokenizer")
	}
	for _, bad := range [][]string{{"7"}, {"<x"}, {"12", "12"}, {"é1"}, {strings.Repeat("1", 17)}} {
		if _, err := base.Words(bad...); err == nil {
			t.Errorf("Words(%q) accepted", bad)
		}
	}
	if out := base.Describe(base.Encode("a")[0]); out != `"a"` {
		t.Errorf("Describe %s", out)
	}
}

// jsonRoundTrip marshals the tokenizer to JSON and reads it back.
func jsonRoundTrip(t *testing.T, tok *Tokenizer) *Tokenizer {
	t.Helper()
	b, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	var back Tokenizer
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}
