// Package bpe is a byte-level BPE tokenizer read from a Hugging Face tokenizer.json, the kind
// Qwen2, Qwen2.5, Qwen3, Llama 3 and GPT-2-style models ship. It encodes text to the ids the
// reference implementation gives, id for id: testdata/ holds golden encodings made with the
// Hugging Face JS tokenizers (scripts/tokenizer_check, `make tokenizer-check`) for the real
// Qwen3 and Llama 3 files, which the tests check without Node.js.
//
// Encode runs the reference's pipeline:
//
//  1. added tokens (chat markers such as <|im_start|>, tool tags such as <tool_call>) are cut
//     out of the raw text, the longest match at the leftmost position first;
//  2. the rest is normalized (NFC for Qwen; Llama 3 has no normalizer);
//  3. the pre-tokenizer cuts it into pieces with its regex, run by a matcher written for each
//     known pattern (they need a lookahead that Go's regexp lacks);
//  4. each piece's UTF-8 bytes are merged by rank into tokens.
//
// Encode adds no BOS or EOS; AddSpecialTokens adds what the file's post-processor template
// says (nothing for Qwen, and nothing for the Llama 3 file in testdata, whose post-processor is
// ByteLevel; <|begin_of_text|> for Llama 3 files with a TemplateProcessing). A chat template's
// text, which writes the markers itself, encodes right with Encode alone.
//
// Differences from the reference are few and at the edges (see the README in testdata/):
// character classes come from Go's unicode tables, whose Unicode version may be older than the
// reference's; invalid UTF-8 in Encode's input is read as U+FFFD first.
package bpe

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

// A Tokenizer encodes text to token ids and decodes ids to text. It is safe for concurrent use.
type Tokenizer struct {
	vocab   map[string]int32 // token as tokenizer.json writes it -> id (added tokens included)
	byBytes map[string]int32 // a model token's bytes -> id (for ignore_merges)
	byteID  [256]int32       // the token of each single byte, noToken if none
	merges  map[uint64]merge // pairKey(left, right) -> merge
	unk     int32            // the unk_token's id, -1 if none

	names []string // id -> token as tokenizer.json writes it
	raw   []string // id -> its bytes (an added token's content)
	kind  []idKind // id -> what it is

	added        []AddedToken
	rawMatch     *matcher // added tokens matched in the raw text
	normMatch    *matcher // added tokens matched in the normalized text
	nfc          bool     // the normalizer is NFC
	steps        []preStep
	ignoreMerges bool
	prefix       []int32 // what AddSpecialTokens puts before and after
	suffix       []int32

	cache pieceCache
}

type idKind uint8

const (
	kindNone    idKind = iota // a gap in the ids
	kindModel                 // a token of model.vocab
	kindAdded                 // an added token
	kindSpecial               // an added token marked special
)

// Load reads a tokenizer.json file, gzip-compressed or not.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bpe: %w", err)
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("bpe: %s: %w", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("bpe: %s: %w", path, err)
		}
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// MustLoad is Load that panics on an error, for tests and notebooks.
func MustLoad(path string) *Tokenizer {
	t, err := Load(path)
	if err != nil {
		panic(err)
	}
	return t
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json. The model must be a BPE
// over the byte-level alphabet; every setting it cannot honour exactly is an error, and all of
// them are reported at once.
func FromJSON(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("bpe: tokenizer.json: %w", err)
	}
	t := &Tokenizer{unk: -1}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// The model's type first: another model's vocab has another shape (Unigram's is a list).
	var kind struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(f.Model, &kind); err != nil {
		return nil, fmt.Errorf("bpe: tokenizer.json: model: %w", err)
	}
	var m modelJSON
	switch {
	case kind.Type == "":
		bad("model.type: missing (want \"BPE\")")
	case kind.Type != "BPE":
		bad("model.type %q: only \"BPE\" is supported", kind.Type)
	default:
		if err := json.Unmarshal(f.Model, &m); err != nil {
			return nil, fmt.Errorf("bpe: tokenizer.json: model: %w", err)
		}
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		bad("model.dropout %v: BPE dropout is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		bad("model.continuing_subword_prefix %q: not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		bad("model.end_of_word_suffix %q: not supported", *m.EndOfWordSuffix)
	}
	if m.ByteFallback {
		bad("model.byte_fallback: not supported (it is for SentencePiece-style BPE, not byte-level)")
	}
	t.ignoreMerges = m.IgnoreMerges

	var err error
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		errs = append(errs, err)
	}
	if t.steps, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		errs = append(errs, err)
	}
	if err := checkDecoder(f.Decoder); err != nil {
		errs = append(errs, err)
	}

	// The ids: the model's vocabulary, then the added tokens over it.
	size := 0
	for tok, id := range m.Vocab {
		if id < 0 {
			bad("model.vocab %q: negative id %d", tok, id)
			continue
		}
		size = max(size, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			bad("added_tokens %q: negative id %d", a.Content, a.ID)
			continue
		}
		size = max(size, int(a.ID)+1)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("bpe: %w", errors.Join(errs...))
	}
	t.names = make([]string, size)
	t.raw = make([]string, size)
	t.kind = make([]idKind, size)
	if t.ignoreMerges {
		t.byBytes = make(map[string]int32, len(m.Vocab))
	}
	for tok, id := range m.Vocab {
		if t.kind[id] != kindNone {
			bad("model.vocab: id %d used by %q and %q", id, t.names[id], tok)
			continue
		}
		b, _ := tokenBytes(tok)
		t.names[id], t.raw[id], t.kind[id] = tok, string(b), kindModel
		if t.byBytes != nil {
			t.byBytes[string(b)] = id
		}
	}
	var missing []string
	for b := range 256 {
		id, ok := m.Vocab[byteLevel([]byte{byte(b)})]
		if !ok {
			id = noToken
			missing = append(missing, fmt.Sprintf("%q (byte 0x%02x)", byteLevel([]byte{byte(b)}), b))
		}
		t.byteID[b] = id
	}
	if len(missing) > 0 && m.UnkToken == nil {
		// Text with such a byte would lose it in encoding, and the model read another text
		// than the one given. Released byte-level tokenizers hold all 256.
		more := ""
		if len(missing) > 8 {
			missing, more = missing[:8], fmt.Sprintf(" and %d more", len(missing)-8)
		}
		bad("model.vocab lacks the byte-level tokens of %s%s, and there is no unk_token: text with those bytes could not be encoded", strings.Join(missing, ", "), more)
	}
	for _, a := range f.AddedTokens {
		if a.SingleWord {
			bad("added_tokens %q: single_word is not supported", a.Content)
		}
		if a.Content == "" {
			bad("added_tokens id %d: empty content", a.ID)
			continue
		}
		at := AddedToken{ID: a.ID, Content: a.Content, Special: a.Special, LStrip: a.LStrip, RStrip: a.RStrip,
			Normalized: !a.Special} // the reference's default
		if a.Normalized != nil {
			at.Normalized = *a.Normalized
		}
		t.added = append(t.added, at)
		t.names[a.ID], t.raw[a.ID] = a.Content, a.Content
		t.kind[a.ID] = kindAdded
		if a.Special {
			t.kind[a.ID] = kindSpecial
		}
	}
	var rawTokens, normTokens []*AddedToken
	for i := range t.added {
		if a := &t.added[i]; a.Normalized && t.nfc {
			normTokens = append(normTokens, a)
		} else {
			rawTokens = append(rawTokens, a)
		}
	}
	t.rawMatch = newMatcher(rawTokens, func(a *AddedToken) string { return a.Content })
	t.normMatch = newMatcher(normTokens, func(a *AddedToken) string { return nfc(a.Content) })

	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			t.unk = id
		} else {
			bad("model.unk_token %q: not in the vocabulary", *m.UnkToken)
		}
	}

	merges, err := parseMerges(m.Merges)
	if err != nil {
		bad("model.%w", err)
	}
	t.merges = make(map[uint64]merge, len(merges))
	var joined []byte
	for rank, mg := range merges {
		a, okA := m.Vocab[mg[0]]
		b, okB := m.Vocab[mg[1]]
		joined = append(append(joined[:0], mg[0]...), mg[1]...)
		c, okC := m.Vocab[string(joined)] // no allocation: the compiler looks up the bytes
		if !okA || !okB || !okC {
			bad("model.merges[%d] %q %q: a token of the merge is not in the vocabulary", rank, mg[0], mg[1])
			if len(errs) > 10 {
				break
			}
			continue
		}
		// A pair listed twice keeps its last rank, as in the reference.
		t.merges[pairKey(a, b)] = merge{rank: int32(rank), id: c}
	}

	// TokenID's map: the vocabulary's own, with the added tokens over it.
	t.vocab = m.Vocab
	if t.vocab == nil {
		t.vocab = map[string]int32{}
	}
	for _, a := range t.added {
		t.vocab[a.Content] = a.ID
	}

	if t.prefix, t.suffix, err = parsePostProcessor(f.PostProcessor, t.TokenID); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("bpe: %w", errors.Join(errs...))
	}
	return t, nil
}

// Encode returns the token ids of text. Added tokens written in the text (special or not) are
// recognised; no BOS or EOS is added (see AddSpecialTokens). Ill-formed UTF-8 in text is read
// as U+FFFD, one per maximal subpart, as a UTF-8 decoder would have handed it over.
func (t *Tokenizer) Encode(text string) []int32 { return t.AppendEncode(nil, text) }

// AppendEncode appends the token ids of text to dst, as Encode does.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	text = validString(text)
	var buf [16]segment
	for _, g := range t.rawMatch.split(buf[:0], text) {
		if g.token != nil {
			dst = append(dst, g.token.ID)
			continue
		}
		if g.text == "" {
			continue
		}
		s := g.text
		if t.nfc {
			s = nfc(s)
		}
		if t.normMatch.empty() {
			dst = t.appendText(dst, s)
			continue
		}
		for _, h := range t.normMatch.split(nil, s) {
			if h.token != nil {
				dst = append(dst, h.token.ID)
			} else {
				dst = t.appendText(dst, h.text)
			}
		}
	}
	return dst
}

// appendText pre-tokenizes normalized text without added tokens and appends its ids.
func (t *Tokenizer) appendText(dst []int32, s string) []int32 {
	t.pretokenize(s, 0, func(p string) { dst = t.appendPiece(dst, p) })
	return dst
}

// pretokenize runs the pre-tokenizer steps from k on s and calls emit with each final piece.
func (t *Tokenizer) pretokenize(s string, k int, emit func(string)) {
	if s == "" {
		return
	}
	if k == len(t.steps) {
		emit(s)
		return
	}
	next := func(p string) { t.pretokenize(p, k+1, emit) }
	switch st := t.steps[k]; st.kind {
	case stepSplit:
		st.split.split(s, next)
	case stepDigits:
		splitDigits(s, st.individual, next)
	case stepPrefixSpace:
		if !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		next(s)
	}
}

// AddSpecialTokens returns ids with the tokens the post-processor's template puts around a
// single sequence (Hugging Face's add_special_tokens=True): e.g. <|begin_of_text|> first for a
// Llama 3 tokenizer.json with a TemplateProcessing; ids unchanged (a copy) when the file's
// post-processor is ByteLevel or none, as for Qwen.
func (t *Tokenizer) AddSpecialTokens(ids []int32) []int32 {
	out := make([]int32, 0, len(t.prefix)+len(ids)+len(t.suffix))
	out = append(out, t.prefix...)
	out = append(out, ids...)
	return append(out, t.suffix...)
}

// Decode returns the text of ids: the bytes of the tokens, with added tokens (special ones
// included) written as their content. Ill-formed UTF-8, from a sequence cut between tokens,
// becomes U+FFFD, one per maximal subpart, as in the reference; ids outside the vocabulary
// (a model's padded embedding rows) are skipped. Decode does not clean up spaces before
// punctuation (transformers' clean_up_tokenization_spaces), so it inverts Encode on valid
// UTF-8 that the normalizer leaves as it is (any text for Llama 3; NFC text for Qwen, whose
// "e" followed by a combining acute comes back as one "é").
func (t *Tokenizer) Decode(ids []int32) string {
	var out []byte
	start := 0 // where the current run of byte tokens starts in out
	flush := func() {
		if !utf8.Valid(out[start:]) {
			fixed := appendValid(nil, out[start:])
			out = append(out[:start], fixed...)
		}
	}
	for _, id := range ids {
		switch t.kindOf(id) {
		case kindNone:
			continue
		case kindModel:
			out = append(out, t.raw[id]...)
		default:
			flush()
			out = append(out, t.raw[id]...)
			start = len(out)
		}
	}
	flush()
	return string(out)
}

func (t *Tokenizer) kindOf(id int32) idKind {
	if id < 0 || int(id) >= len(t.kind) {
		return kindNone
	}
	return t.kind[id]
}

// TokenBytes returns the bytes that token id stands for (an added token's content), or nil for
// an id outside the vocabulary. The bytes of one token may be part of a UTF-8 sequence; a
// streaming decoder joins them before printing.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if t.kindOf(id) == kindNone {
		return nil
	}
	return []byte(t.raw[id])
}

// Token returns token id as tokenizer.json writes it ("Ġworld" for " world", "<|im_end|>"), or
// "" for an id outside the vocabulary.
func (t *Tokenizer) Token(id int32) string {
	if t.kindOf(id) == kindNone {
		return ""
	}
	return t.names[id]
}

// TokenID returns the id of a token as tokenizer.json writes it: an added token's content
// ("<|im_end|>", "<tool_call>") or a vocabulary entry in the byte-level alphabet ("Ġworld").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// VocabSize is one more than the largest id, added tokens included (151669 for Qwen3, 128256
// for Llama 3). A model's embedding may have more rows than that.
func (t *Tokenizer) VocabSize() int { return len(t.kind) }

// IsSpecial reports whether id is an added token marked special (<|im_end|>, <|eot_id|>).
func (t *Tokenizer) IsSpecial(id int32) bool { return t.kindOf(id) == kindSpecial }

// AddedTokens returns the added tokens in the file's order.
func (t *Tokenizer) AddedTokens() []AddedToken { return slices.Clone(t.added) }
