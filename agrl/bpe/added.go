package bpe

import (
	"strings"
	"unicode"
)

// An AddedToken is one entry of tokenizer.json's added_tokens: a string matched whole in the
// input before anything else runs (chat markers, tool tags), with its own id.
type AddedToken struct {
	ID      int32
	Content string
	// Special marks control tokens (<|im_end|>, <|begin_of_text|>); a plain added token
	// (Qwen's <tool_call>, <think>) is matched the same way but is not special.
	Special bool
	// LStrip and RStrip remove the whitespace on the token's left or right from the text.
	LStrip, RStrip bool
	// Normalized tokens are matched in the normalized text, the others in the raw text.
	Normalized bool
}

// A matcher finds added tokens in text: at the leftmost position where any matches, the longest
// one (so "<|im_start|>" wins over a shorter token it starts with).
type matcher struct {
	root   *trieNode
	first  [256]bool     // the bytes some token starts with
	tokens []*AddedToken // by the index the trie stores
}

type trieNode struct {
	next  map[byte]*trieNode
	token int // index into matcher.tokens + 1; 0: no token ends here
}

func newMatcher(tokens []*AddedToken, content func(*AddedToken) string) *matcher {
	m := &matcher{root: &trieNode{}}
	for _, t := range tokens {
		s := content(t)
		if s == "" {
			continue
		}
		n := m.root
		for i := 0; i < len(s); i++ {
			if n.next == nil {
				n.next = map[byte]*trieNode{}
			}
			c := n.next[s[i]]
			if c == nil {
				c = &trieNode{}
				n.next[s[i]] = c
			}
			n = c
		}
		m.tokens = append(m.tokens, t)
		n.token = len(m.tokens)
		m.first[s[0]] = true
	}
	return m
}

func (m *matcher) empty() bool { return len(m.tokens) == 0 }

// A segment is a stretch of text (token nil) or one added token.
type segment struct {
	text  string
	token *AddedToken
}

// split cuts s into text and added-token segments, appended to dst, then applies the tokens'
// lstrip and rstrip to their neighbouring text.
func (m *matcher) split(dst []segment, s string) []segment {
	if m.empty() {
		return append(dst, segment{text: s})
	}
	first := len(dst)
	start := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		n, end, tok := m.root, 0, 0
		for j := i; j < len(s); j++ {
			if n = n.next[s[j]]; n == nil {
				break
			}
			if n.token != 0 {
				end, tok = j+1, n.token
			}
		}
		if tok == 0 {
			i++
			continue
		}
		if i > start {
			dst = append(dst, segment{text: s[start:i]})
		}
		dst = append(dst, segment{token: m.tokens[tok-1]})
		i, start = end, end
	}
	if start < len(s) {
		dst = append(dst, segment{text: s[start:]})
	}
	segs := dst[first:]
	for k, g := range segs {
		if g.token == nil {
			continue
		}
		if g.token.LStrip && k > 0 && segs[k-1].token == nil {
			segs[k-1].text = strings.TrimRightFunc(segs[k-1].text, unicode.IsSpace)
		}
		if g.token.RStrip && k+1 < len(segs) && segs[k+1].token == nil {
			segs[k+1].text = strings.TrimLeftFunc(segs[k+1].text, unicode.IsSpace)
		}
	}
	return dst
}
