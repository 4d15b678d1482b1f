package bpe

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	"", "Hello world", "What is 12*(3+4)?<tool>calc(12*(3+4))</tool><obs>84</obs><answer>84</answer>",
	"<|im_start|>user\nhi<|im_end|>\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
	"  \t\n\n x", "I'M here, you'LL", "cafe\u0301 中文 😀 👨‍👩‍👧", "1234567", "a\u00a0b\u3000c\u0085d\ufeff",
	"\xe2\x82\xff", "<|im_end|>\u0338", "Tiếng Việt", strings.Repeat(" ", 70) + "x",
}

// FuzzEncode: no panic on any input; on valid UTF-8, Decode(Encode(s)) == s for Llama 3 (no
// normalizer) and for Qwen3 where s is already NFC; invalid UTF-8 encodes as its U+FFFD
// reading does; every piece's merge (up to 512 bytes) equals a naive quadratic BPE.
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	llama := testTokenizer(f, "llama3.tokenizer.json.gz", nil)
	qwen := testTokenizer(f, "qwen3.tokenizer.json.gz", nil)
	f.Fuzz(func(t *testing.T, s string) {
		l, q := llama.Encode(s), qwen.Encode(s)
		if !utf8.ValidString(s) {
			if v := validString(s); !slices.Equal(l, llama.Encode(v)) || !slices.Equal(q, qwen.Encode(v)) {
				t.Fatalf("%q encodes unlike its valid form %q", s, v)
			}
			return
		}
		if got := llama.Decode(l); got != s {
			t.Fatalf("llama3: Decode(Encode(%q)) = %q", s, got)
		}
		if nfc(s) == s {
			if got := qwen.Decode(q); got != s {
				t.Fatalf("qwen3: Decode(Encode(%q)) = %q", s, got)
			}
		}
		for _, tok := range []*Tokenizer{llama, qwen} {
			for _, g := range tok.rawMatch.split(nil, s) {
				tok.pretokenize(g.text, 0, func(p string) {
					if len(p) > 512 {
						return // naiveMerge is quadratic
					}
					if got, want := tok.mergeBytes(nil, p), naiveMerge(tok, p); !slices.Equal(got, want) {
						t.Fatalf("merge(%q) = %v, naive %v", p, got, want)
					}
				})
			}
		}
	})
}

// naiveMerge is BPE the slow way: merge the lowest-ranked adjacent pair, leftmost first, until
// none has a merge.
func naiveMerge(t *Tokenizer, piece string) []int32 {
	ids := make([]int32, len(piece))
	for i := range len(piece) {
		ids[i] = t.byteID[piece[i]]
	}
	for {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(ids); i++ {
			if m, ok := t.merges[pairKey(ids[i], ids[i+1])]; ok && (at < 0 || m.rank < best.rank) {
				best, at = m, i
			}
		}
		if at < 0 {
			return ids
		}
		ids = slices.Replace(ids, at, at+2, best.id)
	}
}

// TestEncodeInvalidUTF8: ill-formed input is read as U+FFFD per maximal subpart.
func TestEncodeInvalidUTF8(t *testing.T) {
	tok := testTokenizer(t, "llama3.tokenizer.json.gz", nil)
	if got, want := tok.Encode("a\xe2\x82b\xff"), tok.Encode("a\uFFFDb\uFFFD"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := testTokenizer(t, "qwen3.tokenizer.json.gz", nil)
	text := strings.Join(fuzzSeeds, " ")
	want := tok.Encode(text)
	done := make(chan []int32)
	for range 4 {
		go func() {
			var last []int32
			for range 50 {
				last = tok.Encode(text)
			}
			done <- last
		}()
	}
	for range 4 {
		if got := <-done; !slices.Equal(got, want) {
			t.Fatal("concurrent encodings differ")
		}
	}
}
