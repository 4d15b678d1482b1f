package agrl

import (
	"encoding/json"
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
	b, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	var back Tokenizer
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Alphabet() != tok.Alphabet() || back.VocabSize() != tok.VocabSize() {
		t.Errorf("JSON round trip changed the tokenizer: %q vs %q", back.Alphabet(), tok.Alphabet())
	}
}
