package bpe

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The golden files come from scripts/tokenizer_check/check.mjs (`make tokenizer-check`): the
// reference implementation's encodings of a corpus, for the real Qwen3 and Llama 3 files and
// for variants of them (a few top-level keys replaced: "patch").

type goldenFile struct {
	Reference        string                     `json:"reference"`
	Tokenizer        string                     `json:"tokenizer"`
	Note             string                     `json:"note"`
	Patch            map[string]json.RawMessage `json:"patch"`
	AddSpecialTokens bool                       `json:"add_special_tokens"`
	Cases            []struct {
		Text    string  `json:"text"`
		IDs     []int32 `json:"ids"`
		Decoded *string `json:"decoded"` // the reference's decoding, where it is not Text
	} `json:"cases"`
}

type decodeFile struct {
	Tokenizer string `json:"tokenizer"`
	Cases     []struct {
		IDs  []int32 `json:"ids"`
		Text string  `json:"text"`
	} `json:"cases"`
}

var (
	rawFiles   sync.Map // testdata name -> []byte (the decompressed tokenizer.json)
	tokenizers sync.Map // testdata name -> *Tokenizer (unpatched)
)

// gunzip returns the decompressed contents of a testdata file.
func gunzip(t testing.TB, name string) []byte {
	t.Helper()
	if b, ok := rawFiles.Load(name); ok {
		return b.([]byte)
	}
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	rawFiles.Store(name, b)
	return b
}

// testTokenizer returns the tokenizer of a testdata file ("qwen3.tokenizer.json.gz"), with its
// top-level keys replaced by patch.
func testTokenizer(t testing.TB, name string, patch map[string]json.RawMessage) *Tokenizer {
	t.Helper()
	if len(patch) == 0 {
		if tok, ok := tokenizers.Load(name); ok {
			return tok.(*Tokenizer)
		}
	}
	data := gunzip(t, name)
	if len(patch) > 0 {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatal(err)
		}
		for k, v := range patch {
			top[k] = v
		}
		var err error
		if data, err = json.Marshal(top); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(patch) == 0 {
		tokenizers.Store(name, tok)
	}
	return tok
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGolden checks every golden encoding exactly, and that Decode gives back what the
// reference's decode gives: the text itself wherever the reference round-trips.
func TestGolden(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "golden-*.json"))
	if len(paths) == 0 {
		t.Fatal("no testdata/golden-*.json (make tokenizer-check writes them)")
	}
	for _, path := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "golden-"), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var g goldenFile
			readJSON(t, path, &g)
			tok := testTokenizer(t, g.Tokenizer, g.Patch)
			bad := 0
			for _, c := range g.Cases {
				got := tok.Encode(c.Text)
				if g.AddSpecialTokens {
					got = tok.AddSpecialTokens(got)
				}
				if !slices.Equal(got, c.IDs) {
					if bad++; bad <= 5 {
						t.Errorf("Encode(%q)\n got %v\nwant %v\n%s", c.Text, got, c.IDs, diffTokens(tok, got, c.IDs))
					}
					continue
				}
				want := c.Text
				if c.Decoded != nil {
					want = *c.Decoded
				}
				if dec := tok.Decode(got); dec != want {
					if bad++; bad <= 5 {
						t.Errorf("Decode(Encode(%q)) = %q, want %q", c.Text, dec, want)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d cases differ from %s (%s)", bad, len(g.Cases), g.Reference, g.Note)
			}
			t.Logf("%d cases match %s", len(g.Cases), g.Reference)
		})
	}
}

// diffTokens shows the tokens around the first difference.
func diffTokens(tok *Tokenizer, got, want []int32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	show := func(ids []int32) string {
		var b strings.Builder
		for _, id := range ids[max(i-2, 0):min(i+4, len(ids))] {
			fmt.Fprintf(&b, " %d:%q", id, tok.Token(id))
		}
		return b.String()
	}
	return fmt.Sprintf("first difference at %d:\n got%s\nwant%s", i, show(got), show(want))
}

// TestGoldenDecode checks Decode on id sequences a sampler might emit: UTF-8 cut between byte
// tokens, special tokens inside a character, ids past the vocabulary.
func TestGoldenDecode(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "decode-*.json"))
	if len(paths) == 0 {
		t.Fatal("no testdata/decode-*.json")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var d decodeFile
			readJSON(t, path, &d)
			tok := testTokenizer(t, d.Tokenizer, nil)
			bad := 0
			for _, c := range d.Cases {
				if got := tok.Decode(c.IDs); got != c.Text {
					if bad++; bad <= 5 {
						t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Text)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d decodings differ", bad, len(d.Cases))
			}
		})
	}
}

// TestRealFiles checks what the two shipped files say about themselves.
func TestRealFiles(t *testing.T) {
	qwen := testTokenizer(t, "qwen3.tokenizer.json.gz", nil)
	llama := testTokenizer(t, "llama3.tokenizer.json.gz", nil)
	for _, c := range []struct {
		tok     *Tokenizer
		size    int
		special []string
		plain   []string
	}{
		{qwen, 151669, []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, []string{"<tool_call>", "</tool_call>", "<think>", "</think>"}},
		{llama, 128256, []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, nil},
	} {
		if got := c.tok.VocabSize(); got != c.size {
			t.Errorf("VocabSize() = %d, want %d", got, c.size)
		}
		for _, s := range c.special {
			id, ok := c.tok.TokenID(s)
			if !ok || !c.tok.IsSpecial(id) || c.tok.Token(id) != s || string(c.tok.TokenBytes(id)) != s {
				t.Errorf("%q: id %d ok %v special %v", s, id, ok, c.tok.IsSpecial(id))
			}
		}
		for _, s := range c.plain {
			id, ok := c.tok.TokenID(s)
			if !ok || c.tok.IsSpecial(id) {
				t.Errorf("%q: id %d ok %v special %v, want a plain added token", s, id, ok, c.tok.IsSpecial(id))
			}
		}
		// The post-processors of both files are ByteLevel: no BOS.
		if got := c.tok.AddSpecialTokens([]int32{1, 2}); !slices.Equal(got, []int32{1, 2}) {
			t.Errorf("AddSpecialTokens = %v, want the ids unchanged", got)
		}
		// Every vocabulary token is in the byte-level alphabet, and all 256 bytes have a token.
		for b, id := range c.tok.byteID {
			if id < 0 {
				t.Errorf("byte %#x has no token", b)
			}
		}
	}
	if id, _ := qwen.TokenID("Ġworld"); id != 1879 || string(qwen.TokenBytes(id)) != " world" {
		t.Errorf("Qwen Ġworld: id %d bytes %q", id, qwen.TokenBytes(id))
	}
	if !llama.ignoreMerges || qwen.ignoreMerges || !qwen.nfc || llama.nfc {
		t.Errorf("flags: llama ignore_merges %v, qwen ignore_merges %v, qwen nfc %v, llama nfc %v",
			llama.ignoreMerges, qwen.ignoreMerges, qwen.nfc, llama.nfc)
	}
}

// TestIgnoreMerges: Llama 3's ignore_merges takes a piece that is a token whole, where the
// merges would split it (" việc" is token 100769; its merges end at " vi", "ệ", "c"). The
// corpus has such words; without the flag their encodings would differ from the reference.
func TestIgnoreMerges(t *testing.T) {
	// A patch that changes nothing gives a tokenizer of our own to change.
	tok := testTokenizer(t, "llama3.tokenizer.json.gz", map[string]json.RawMessage{"truncation": json.RawMessage("null")})
	tok.ignoreMerges = false
	var g goldenFile
	readJSON(t, filepath.Join("testdata", "golden-llama3.json"), &g)
	differ := 0
	for _, c := range g.Cases {
		if !slices.Equal(tok.Encode(c.Text), c.IDs) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("no golden case depends on ignore_merges: the corpus no longer tests it")
	}
	t.Logf("%d of %d golden cases need ignore_merges", differ, len(g.Cases))
}

func TestLoad(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "qwen3.tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("Hello world"); !slices.Equal(got, []int32{9707, 1879}) {
		t.Errorf("Encode(Hello world) = %v", got)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(plain, tinyJSON(t, tinyMerges, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(plain); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("Load of a missing file: no error")
	}
	if _, err := FromJSON(bytes.Repeat([]byte("{"), 3)); err == nil {
		t.Error("FromJSON of broken JSON: no error")
	}
}
