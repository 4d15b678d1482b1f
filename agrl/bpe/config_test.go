package bpe

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// tinyJSON is a small byte-level tokenizer.json: the 256 byte tokens, the merges given (in
// the pair form) and their results, ByteLevel everywhere; set replaces top-level keys and
// model keys ("model.type").
func tinyJSON(t *testing.T, merges [][2]string, set map[string]any) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteLevel([]byte{byte(b)})] = len(vocab)
	}
	var ms [][]string
	for _, m := range merges {
		ms = append(ms, []string{m[0], m[1]})
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": ms, "dropout": nil, "unk_token": nil,
		"continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false}
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	file := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": []any{},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternQwen2}, "behavior": "Isolated", "invert": false},
			bl,
		}},
		"post_processor": bl, "decoder": bl, "model": model,
	}
	for k, v := range set {
		if mk, ok := strings.CutPrefix(k, "model."); ok {
			model[mk] = v
		} else {
			file[k] = v
		}
	}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var tinyMerges = [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"ll", "o"}, {"he", "llo"}}

func TestTiny(t *testing.T) {
	tok, err := FromJSON(tinyJSON(t, tinyMerges, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	if got, want := tok.Encode("hello the"), []int32{id("hello"), id("Ġthe")}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	// The string form of the merges gives the same tokenizer.
	var lines []string
	for _, m := range tinyMerges {
		lines = append(lines, m[0]+" "+m[1])
	}
	tok2, err := FromJSON(tinyJSON(t, tinyMerges, map[string]any{"model.merges": lines}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("hello the"); !slices.Equal(got, tok.Encode("hello the")) {
		t.Errorf("string merges: %v", got)
	}
	if tok.VocabSize() != 256+len(tinyMerges) {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

// TestMergeOrder: the lowest rank merges first, and among equal ranks the leftmost pair.
func TestMergeOrder(t *testing.T) {
	// "aaa": the pair (a, a) is at 0 and 1; the leftmost merges: [aa, a].
	tok, err := FromJSON(tinyJSON(t, [][2]string{{"a", "a"}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	aa, _ := tok.TokenID("aa")
	a, _ := tok.TokenID("a")
	if got := tok.Encode("aaa"); !slices.Equal(got, []int32{aa, a}) {
		t.Errorf("aaa: %v", got)
	}
	if got := tok.Encode("aaaaa"); !slices.Equal(got, []int32{aa, aa, a}) {
		t.Errorf("aaaaa: %v", got)
	}
	// Rank beats position: (b, c) ranks before (a, b), so "abc" is [a, bc].
	tok, err = FromJSON(tinyJSON(t, [][2]string{{"b", "c"}, {"a", "b"}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	bc, _ := tok.TokenID("bc")
	a, _ = tok.TokenID("a")
	if got := tok.Encode("abc"); !slices.Equal(got, []int32{a, bc}) {
		t.Errorf("abc: %v", got)
	}
}

func TestAddedTokensFlags(t *testing.T) {
	added := []any{
		map[string]any{"id": 300, "content": "<s>", "special": true, "lstrip": false, "rstrip": true, "normalized": false, "single_word": false},
		map[string]any{"id": 301, "content": "<e>", "special": true, "lstrip": true, "rstrip": false, "normalized": false, "single_word": false},
		map[string]any{"id": 302, "content": "<s>x", "special": false, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
	}
	tok, err := FromJSON(tinyJSON(t, nil, map[string]any{"added_tokens": added}))
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := tok.TokenID("Ġ")
	a, _ := tok.TokenID("a")
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"<s>  a  <e>", []int32{300, a, 301}},    // rstrip eats the spaces after <s>, lstrip those before <e>
		{"a <s>x a", []int32{a, sp, 302, sp, a}}, // the longest match wins at a position
		{"<s><e>", []int32{300, 301}},
		{"<e <s", []int32{tok.byteID['<'], tok.byteID['e'], sp, tok.byteID['<'], tok.byteID['s']}},
	} {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if !tok.IsSpecial(300) || tok.IsSpecial(302) || tok.IsSpecial(a) || tok.IsSpecial(-1) || tok.IsSpecial(1<<30) {
		t.Error("IsSpecial")
	}
	if got := tok.AddedTokens(); len(got) != 3 || got[0].Content != "<s>" || !got[0].RStrip || !got[1].LStrip || got[2].Special {
		t.Errorf("AddedTokens = %+v", got)
	}
}

func TestTemplate(t *testing.T) {
	added := []any{map[string]any{"id": 300, "content": "<bos>", "special": true}, map[string]any{"id": 301, "content": "<eos>", "special": true}}
	pp := map[string]any{"type": "TemplateProcessing",
		"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<bos>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "<eos>", "type_id": 0}}},
		"special_tokens": map[string]any{"<bos>": map[string]any{"id": "<bos>", "ids": []int{300}, "tokens": []string{"<bos>"}}},
	}
	tok, err := FromJSON(tinyJSON(t, nil, map[string]any{"added_tokens": added, "post_processor": pp}))
	if err != nil {
		t.Fatal(err)
	}
	// <eos> is not in special_tokens: its id comes from the vocabulary.
	if got := tok.AddSpecialTokens([]int32{5}); !slices.Equal(got, []int32{300, 5, 301}) {
		t.Errorf("AddSpecialTokens = %v", got)
	}
	if got := tok.Encode("x"); len(got) != 1 {
		t.Errorf("Encode added special tokens: %v", got)
	}
}

// TestUnsupported: every setting the package cannot honour is an error that names it, all of
// them at once.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		set  map[string]any
		want []string
	}{
		{map[string]any{"model.type": "WordPiece"}, []string{`model.type "WordPiece"`}},
		{map[string]any{"model.type": "Unigram", "model.vocab": [][]any{{"<unk>", 0.0}, {"a", -1.5}}, "normalizer": map[string]any{"type": "NFKC"}},
			[]string{`model.type "Unigram"`, `normalizer: unsupported type "NFKC"`}},
		{map[string]any{"model.type": nil}, []string{"model.type: missing"}},
		{map[string]any{"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Lowercase"}}}},
			[]string{`"Lowercase"`}},
		{map[string]any{"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated"}},
			[]string{`unsupported regex "\\w+"`}},
		{map[string]any{"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternQwen2}, "behavior": "Removed"},
			map[string]any{"type": "ByteLevel"}}}}, []string{`behavior "Removed"`}},
		{map[string]any{"pre_tokenizer": map[string]any{"type": "Metaspace"}}, []string{`"Metaspace"`}},
		{map[string]any{"pre_tokenizer": map[string]any{"type": "Digits"}}, []string{"must end with ByteLevel"}},
		{map[string]any{"pre_tokenizer": nil}, []string{"pre_tokenizer: missing"}},
		{map[string]any{"decoder": map[string]any{"type": "WordPiece"}}, []string{`decoder: unsupported type "WordPiece"`}},
		{map[string]any{"post_processor": map[string]any{"type": "BertProcessing"}}, []string{`"BertProcessing"`}},
		{map[string]any{"model.byte_fallback": true}, []string{"byte_fallback"}},
		{map[string]any{"model.dropout": 0.1}, []string{"dropout"}},
		{map[string]any{"model.end_of_word_suffix": "</w>"}, []string{"end_of_word_suffix"}},
		{map[string]any{"model.unk_token": "<unk>"}, []string{`unk_token "<unk>"`}},
		{map[string]any{"model.merges": []string{"Ġ q"}}, []string{"merges[0]"}},
		{map[string]any{"model.merges": []string{"a b c"}}, []string{"one space"}},
		{map[string]any{"added_tokens": []any{map[string]any{"id": 300, "content": "<x>", "single_word": true}}}, []string{"single_word"}},
	} {
		_, err := FromJSON(tinyJSON(t, tinyMerges, c.set))
		if err == nil {
			t.Errorf("%v: no error", c.set)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", c.set, err, w)
			}
		}
	}
}

func TestAppendValid(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"é中😀", "é中😀"},
		{"\xe2\x82", "\uFFFD"},                 // a cut 3-byte sequence is one maximal subpart
		{"\xe2\x82x", "\uFFFDx"},               // the byte that breaks it is read again
		{"\xf0\x9f\x98", "\uFFFD"},             // a cut 4-byte sequence
		{"\x80\x80", "\uFFFD\uFFFD"},           // lone continuation bytes, one each
		{"\xc0\x80", "\uFFFD\uFFFD"},           // an overlong form: C0 never starts a sequence
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED A0 is not a valid start
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xff", "\uFFFD"},
	} {
		if got := string(appendValid(nil, []byte(c.in))); got != c.want {
			t.Errorf("appendValid(%q) = %+q, want %+q", c.in, got, c.want)
		}
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	if byteChar[' '] != 'Ġ' || byteChar['\n'] != 'Ċ' || byteChar['a'] != 'a' || byteChar[0xAD] != 'Ń' {
		t.Errorf("space %c newline %c a %c soft hyphen %c", byteChar[' '], byteChar['\n'], byteChar['a'], byteChar[0xAD])
	}
	for b := range 256 {
		got, ok := tokenBytes(string(byteChar[b]))
		if !ok || len(got) != 1 || got[0] != byte(b) {
			t.Errorf("byte %#x: %v %v", b, got, ok)
		}
	}
	if _, ok := tokenBytes("中"); ok {
		t.Error("中 is not in the alphabet")
	}
}

// TestMissingByteTokens: a byte-level vocabulary without some of the 256 byte tokens is refused
// unless it has an unk_token, which those bytes then encode as (never dropped).
func TestMissingByteTokens(t *testing.T) {
	var file map[string]any
	if err := json.Unmarshal(tinyJSON(t, tinyMerges, nil), &file); err != nil {
		t.Fatal(err)
	}
	model := file["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	delete(vocab, "+")
	delete(vocab, byteLevel([]byte{0x80}))
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromJSON(data)
	if err == nil || !strings.Contains(err.Error(), `model.vocab lacks the byte-level tokens of "+" (byte 0x2b), "`+byteLevel([]byte{0x80})+`" (byte 0x80), and there is no unk_token`) {
		t.Fatalf("FromJSON = %v", err)
	}
	vocab["<unk>"], model["unk_token"] = 1000, "<unk>"
	if data, err = json.Marshal(file); err != nil {
		t.Fatal(err)
	}
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := tok.TokenID("1")
	two, _ := tok.TokenID("2")
	if got, want := tok.Encode("1+2"), []int32{one, 1000, two}; !slices.Equal(got, want) {
		t.Errorf("Encode(1+2) = %v, want %v", got, want)
	}
}
