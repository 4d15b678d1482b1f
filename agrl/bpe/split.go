package bpe

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer regexes of the tokenizers this package reads. Go's regexp has no lookahead,
// which the (?!\S) in each needs, so each is recognised by its exact text and run by a matcher
// written for it (splitter.match).
const (
	// PatternGPT2 is GPT-2's pattern, the one a ByteLevel pre-tokenizer with use_regex true runs.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// PatternQwen2 is Qwen2's, Qwen2.5's and Qwen3's: cl100k's pattern with single digits.
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternLlama3 is Llama 3's (and OpenAI cl100k's): digits in groups of up to three.
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// A splitter cuts text into the pieces one of the known patterns matches, as a regex engine
// with leftmost-first alternation and backtracking does. Every character is covered by some
// match in each of these patterns, so the pieces tile the text.
//
// Character classes follow the reference: \p{L} is unicode.IsLetter, \p{N} unicode.IsNumber
// (Nd, Nl, No) and \s the White_Space property (unicode.IsSpace), which is what the
// Hugging Face tokenizers get from Oniguruma and the JS port from its \s rewrite. The contractions
// of (?i:…) fold ASCII letters only, as the JS reference does ("'S" and "'Re" match; "'ſ" does not).
type splitter struct {
	cl100k    bool // the Qwen2/Llama 3 family; false: GPT-2
	maxDigits int  // \p{N}{1,maxDigits} (cl100k family)
}

// splitterFor returns the splitter of a known pattern.
func splitterFor(pattern string) (splitter, bool) {
	switch pattern {
	case PatternGPT2:
		return splitter{}, true
	case PatternQwen2:
		return splitter{cl100k: true, maxDigits: 1}, true
	case PatternLlama3:
		return splitter{cl100k: true, maxDigits: 3}, true
	}
	return splitter{}, false
}

// split calls emit with each piece of s in order.
func (p splitter) split(s string, emit func(string)) {
	for i := 0; i < len(s); {
		j := p.match(s, i)
		emit(s[i:j])
		i = j
	}
}

// match returns the end of the match that starts at i (i < len(s); always > i).
func (p splitter) match(s string, i int) int {
	if p.cl100k {
		return p.matchCL100K(s, i)
	}
	return matchGPT2(s, i)
}

// matchCL100K runs (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,n} |
// ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+, first alternative first.
func (p splitter) matchCL100K(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == '\'' {
		if n := contraction(s[i+1:], true); n > 0 {
			return i + 1 + n
		}
	}
	c := classOf(r)
	switch c {
	case classLetter:
		return skip(s, i, classLetter)
	case classNumber:
		j := i + w
		for k := 1; k < p.maxDigits && j < len(s); k++ {
			r2, w2 := utf8.DecodeRuneInString(s[j:])
			if classOf(r2) != classNumber {
				break
			}
			j += w2
		}
		return j
	}
	// [^\r\n\p{L}\p{N}]? before letters: any other character but CR and LF, spaces included.
	if r != '\r' && r != '\n' && i+w < len(s) {
		if r2, _ := utf8.DecodeRuneInString(s[i+w:]); classOf(r2) == classLetter {
			return skip(s, i+w, classLetter)
		}
	}
	if j, ok := punctRun(s, i, r, w, c); ok {
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c == classSpace from here on.
	end := skip(s, i, classSpace)
	for k := end - 1; k >= i; k-- { // \s*[\r\n]+ ends after the run's last CR or LF
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return spaceRun(s, i, end)
}

// matchGPT2 runs 's|'t|'re|'ve|'m|'ll|'d | ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+ |
// \s+(?!\S) | \s+, first alternative first.
func matchGPT2(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == '\'' {
		if n := contraction(s[i+1:], false); n > 0 {
			return i + 1 + n
		}
	}
	c := classOf(r)
	if c == classLetter || c == classNumber {
		return skip(s, i, c)
	}
	if r == ' ' && i+1 < len(s) {
		r2, _ := utf8.DecodeRuneInString(s[i+1:])
		if c2 := classOf(r2); c2 == classLetter || c2 == classNumber {
			return skip(s, i+1, c2)
		}
	}
	if j, ok := punctRun(s, i, r, w, c); ok {
		return j
	}
	return spaceRun(s, i, skip(s, i, classSpace))
}

// punctRun matches ' '?[^\s\p{L}\p{N}]+ at i, where r (w bytes, class c) starts.
func punctRun(s string, i int, r rune, w int, c charClass) (int, bool) {
	if c == classOther {
		return skip(s, i, classOther), true
	}
	if r == ' ' && i+1 < len(s) {
		if r2, _ := utf8.DecodeRuneInString(s[i+1:]); classOf(r2) == classOther {
			return skip(s, i+1, classOther), true
		}
	}
	return 0, false
}

// spaceRun matches \s+(?!\S)|\s+ on the whitespace run s[i:end]: the whole run at the end of
// the text, else the run but its last character (left to prefix the next word), else (a run of
// one before a non-space) the one character.
func spaceRun(s string, i, end int) int {
	if end == len(s) {
		return end
	}
	_, w := utf8.DecodeLastRuneInString(s[i:end])
	if end-w > i {
		return end - w
	}
	return end
}

// contraction returns the length of the contraction suffix (s, t, re, ve, m, ll, d) that s
// starts with, folding ASCII case when fold is set; 0 if none.
func contraction(s string, fold bool) int {
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		b := s[k]
		if fold && b >= 'A' && b <= 'Z' {
			b += 'a' - 'A'
		}
		return b
	}
	switch a := lower(0); a {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

// charClass is the class of a character in the patterns: \p{L}, \p{N}, \s, or anything else.
type charClass uint8

const (
	classOther charClass = iota
	classLetter
	classNumber
	classSpace
)

// asciiClass is classOf for the ASCII characters.
var asciiClass = func() (t [utf8.RuneSelf]charClass) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = slowClass(r)
	}
	return t
}()

func classOf(r rune) charClass {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return slowClass(r)
}

func slowClass(r rune) charClass {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// skip returns the end of the run of class c that starts at i.
func skip(s string, i int, c charClass) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b] != c {
				break
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if slowClass(r) != c {
			break
		}
		i += w
	}
	return i
}

// splitDigits is the Digits pre-tokenizer: numbers (\p{N}, Rust's char::is_numeric) apart from
// the rest, each on its own when individual is set, else in runs.
func splitDigits(s string, individual bool, emit func(string)) {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		j := i + w
		if classOf(r) != classNumber {
			for j < len(s) {
				r2, w2 := utf8.DecodeRuneInString(s[j:])
				if classOf(r2) == classNumber {
					break
				}
				j += w2
			}
		} else if !individual {
			j = skip(s, i, classNumber)
		}
		emit(s[i:j])
		i = j
	}
}
