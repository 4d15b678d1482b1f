package agrl

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Reserved token ids. Every Tokenizer numbers them the same way: the special tokens first, then
// one token per protocol tag in the order of Tags, then the byte tokens of its alphabet.
const (
	// PAD fills sequences up to a bucket length; it is never predicted.
	PAD int32 = 0
	// BOS starts every episode.
	BOS int32 = 1
	// EOS ends a sequence; the sampler stops a sequence that writes it.
	EOS int32 = 2
	// UNK stands for a byte outside the tokenizer's alphabet.
	UNK int32 = 3
	// numSpecial counts PAD, BOS, EOS and UNK.
	numSpecial = 4
)

// FirstTag is the id of Tags[0]; Tags[i] has id FirstTag+i.
const FirstTag = numSpecial

// unkText is what Decode writes for UNK: the Unicode replacement character.
const unkText = "\uFFFD"

// Tokenizer maps text to token ids and back, at the byte level: each protocol tag of Tags is
// one token, every other byte of the alphabet is one token, and a byte outside the alphabet
// becomes UNK (never an error). Decode(Encode(s)) == s for text whose bytes are all in the
// alphabet.
//
// Training uses the exact token ids that were sampled or encoded once; text is never
// re-tokenised. A Tokenizer is immutable and safe for concurrent use.
type Tokenizer struct {
	alphabet string     // the byte tokens, in id order
	byByte   [256]int32 // byte -> id (UNK when absent)
	words    []string   // multi-byte tokens, in id order after the alphabet
	byFirst  [256][]int // indexes into words by first byte, longest word first
}

// PrintableASCII is the default alphabet: newline, tab and the printable ASCII characters.
const PrintableASCII = "\n\t !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"

// NewTokenizer returns a tokenizer over the given bytes (duplicates are ignored). An empty
// alphabet is an error.
func NewTokenizer(alphabet string) (*Tokenizer, error) {
	var seen [256]bool
	var b strings.Builder
	for i := 0; i < len(alphabet); i++ {
		if !seen[alphabet[i]] {
			seen[alphabet[i]] = true
			b.WriteByte(alphabet[i])
		}
	}
	if b.Len() == 0 {
		return nil, errors.New("agrl: NewTokenizer: empty alphabet")
	}
	t := &Tokenizer{alphabet: b.String()}
	for i := range t.byByte {
		t.byByte[i] = UNK
	}
	for i := 0; i < len(t.alphabet); i++ {
		t.byByte[t.alphabet[i]] = int32(numSpecial+len(Tags)) + int32(i)
	}
	return t, nil
}

// ASCIITokenizer returns the byte tokenizer over PrintableASCII (vocabulary 109); the presets add
// DigitPairs to it.
func ASCIITokenizer() *Tokenizer { t, _ := NewTokenizer(PrintableASCII); return t }

// ByteTokenizer returns a tokenizer over all 256 bytes (vocabulary 268): nothing maps to UNK.
func ByteTokenizer() *Tokenizer {
	var all [256]byte
	for i := range all {
		all[i] = byte(i)
	}
	t, _ := NewTokenizer(string(all[:]))
	return t
}

// VocabSize is the number of token ids: specials, tags, alphabet and words.
func (t *Tokenizer) VocabSize() int { return int(t.firstWord()) + len(t.words) }

// firstWord is the id of the first multi-byte word: words are numbered after the alphabet.
func (t *Tokenizer) firstWord() int32 { return int32(numSpecial + len(Tags) + len(t.alphabet)) }

// Words returns a tokenizer with extra multi-byte tokens, numbered after the alphabet's. Encode
// takes the longest word that matches at each position (a protocol tag still wins), so a word
// shortens the sequences the model reads and writes: DigitPairs, for instance, halves numbers,
// which makes copying an arithmetic expression into a tool call much easier for a small model.
// The sampler may still write a word's bytes one by one; both spellings decode to the same text.
// Words must be 2..16 bytes of the alphabet, must not contain '<' and must not repeat.
func (t *Tokenizer) Words(words ...string) (*Tokenizer, error) {
	nt := &Tokenizer{alphabet: t.alphabet, byByte: t.byByte}
	seen := map[string]bool{}
	for _, w := range append(slices.Clone(t.words), words...) {
		switch {
		case len(w) < 2 || len(w) > 16:
			return nil, fmt.Errorf("agrl: tokenizer word %q: want 2 to 16 bytes", w)
		case strings.Contains(w, "<"):
			return nil, fmt.Errorf("agrl: tokenizer word %q contains '<' (reserved for tags)", w)
		case seen[w]:
			return nil, fmt.Errorf("agrl: tokenizer word %q given twice", w)
		}
		for i := 0; i < len(w); i++ {
			if t.byByte[w[i]] == UNK {
				return nil, fmt.Errorf("agrl: tokenizer word %q has byte %q outside the alphabet", w, w[i])
			}
		}
		seen[w] = true
		nt.words = append(nt.words, w)
	}
	for i, w := range nt.words {
		nt.byFirst[w[0]] = append(nt.byFirst[w[0]], i)
	}
	for b := range nt.byFirst {
		slices.SortStableFunc(nt.byFirst[b], func(x, y int) int { return len(nt.words[y]) - len(nt.words[x]) })
	}
	return nt, nil
}

// WordList returns the multi-byte tokens, in id order.
func (t *Tokenizer) WordList() []string { return slices.Clone(t.words) }

// DigitPairs lists the 100 two-digit strings "00" … "99", words for Tokenizer.Words.
func DigitPairs() []string {
	out := make([]string, 0, 100)
	for i := range 100 {
		out = append(out, fmt.Sprintf("%02d", i))
	}
	return out
}

// Alphabet returns the bytes that have their own token, in id order.
func (t *Tokenizer) Alphabet() string { return t.alphabet }

// TagID returns the token id of a protocol tag (one of Tags), or -1.
func TagID(tag string) int32 {
	for i, s := range Tags {
		if s == tag {
			return FirstTag + int32(i)
		}
	}
	return -1
}

// Encode turns text into token ids: protocol tags become their token, other bytes their byte
// token or UNK. It never fails.
func (t *Tokenizer) Encode(text string) []int32 {
	out := make([]int32, 0, len(text))
	return t.AppendEncode(out, text)
}

// AppendEncode appends the tokens of text to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	for i := 0; i < len(text); {
		if text[i] == '<' {
			if id, n := matchTag(text[i:]); n > 0 {
				dst = append(dst, id)
				i += n
				continue
			}
		}
		if id, n := t.matchWord(text[i:]); n > 0 {
			dst = append(dst, id)
			i += n
			continue
		}
		dst = append(dst, t.byByte[text[i]])
		i++
	}
	return dst
}

// matchWord returns the id and length of the longest word that starts s, or (0, 0).
func (t *Tokenizer) matchWord(s string) (int32, int) {
	for _, k := range t.byFirst[s[0]] {
		if strings.HasPrefix(s, t.words[k]) {
			return t.firstWord() + int32(k), len(t.words[k])
		}
	}
	return 0, 0
}

func matchTag(s string) (int32, int) {
	for i, tag := range Tags {
		if strings.HasPrefix(s, tag) {
			return FirstTag + int32(i), len(tag)
		}
	}
	return 0, 0
}

// Decode turns token ids back into text: PAD, BOS and EOS decode to nothing, UNK to U+FFFD,
// tags to their text, ids out of range to U+FFFD.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.Token(id))
	}
	return b.String()
}

// Token returns the text of one token id (see Decode).
func (t *Tokenizer) Token(id int32) string {
	switch {
	case id == PAD || id == BOS || id == EOS:
		return ""
	case id >= FirstTag && id < FirstTag+int32(len(Tags)):
		return Tags[id-FirstTag]
	case id >= FirstTag+int32(len(Tags)) && id < t.firstWord():
		k := id - FirstTag - int32(len(Tags))
		return t.alphabet[k : k+1]
	case id >= t.firstWord() && int(id) < t.VocabSize():
		return t.words[id-t.firstWord()]
	default:
		return unkText
	}
}

// Describe returns a readable name of a token id ("<pad>", "<bos>", "'a'", "<tool>"…), for
// tables and trajectory viewers.
func (t *Tokenizer) Describe(id int32) string {
	switch id {
	case PAD:
		return "<pad>"
	case BOS:
		return "<bos>"
	case EOS:
		return "<eos>"
	case UNK:
		return "<unk>"
	}
	s := t.Token(id)
	if id >= FirstTag && id < FirstTag+int32(len(Tags)) {
		return s
	}
	return fmt.Sprintf("%q", s)
}

// MarshalJSON stores the tokenizer as its alphabet and words.
func (t *Tokenizer) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Alphabet []byte   `json:"alphabet"`
		Words    []string `json:"words,omitempty"`
		Tags     []string
	}{[]byte(t.alphabet), t.words, Tags})
}

// UnmarshalJSON reads a tokenizer written by MarshalJSON. It fails if the protocol tags changed
// since it was written (the ids would no longer mean the same).
func (t *Tokenizer) UnmarshalJSON(b []byte) error {
	var v struct {
		Alphabet []byte   `json:"alphabet"`
		Words    []string `json:"words"`
		Tags     []string
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if strings.Join(v.Tags, " ") != strings.Join(Tags, " ") {
		return fmt.Errorf("agrl: tokenizer was saved with tags %q, this build has %q", v.Tags, Tags)
	}
	nt, err := NewTokenizer(string(v.Alphabet))
	if err != nil {
		return err
	}
	if len(v.Words) > 0 {
		if nt, err = nt.Words(v.Words...); err != nil {
			return err
		}
	}
	*t = *nt
	return nil
}
