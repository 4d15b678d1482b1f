package bpe

import (
	"unicode/utf8"
)

// The byte-level alphabet of GPT-2: every byte is written as one printable character so that
// a vocabulary of strings can hold arbitrary bytes. The bytes '!'..'~', '¡'..'¬' and '®'..'ÿ'
// stand for themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) take the
// characters U+0100, U+0101, … in byte order, so the space becomes 'Ġ' (U+0120) and the newline
// 'Ċ' (U+010A).
var (
	byteChar [256]rune       // byte -> its character
	charByte [256 + 68]int16 // character -> its byte, -1 for characters outside the alphabet
)

func init() {
	for i := range charByte {
		charByte[i] = -1
	}
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = next
			next++
		}
		byteChar[b] = r
		charByte[r] = int16(b)
	}
}

// tokenBytes turns a vocabulary string of the byte-level alphabet into the bytes it stands for.
// ok is false when the string holds a character outside the alphabet; such a character stands
// for its own UTF-8 bytes.
func tokenBytes(tok string) (b []byte, ok bool) {
	b = make([]byte, 0, len(tok))
	ok = true
	for _, r := range tok {
		if r < rune(len(charByte)) && charByte[r] >= 0 {
			b = append(b, byte(charByte[r]))
			continue
		}
		ok = false
		b = utf8.AppendRune(b, r)
	}
	return b, ok
}

// byteLevel writes bytes in the byte-level alphabet (the form tokenizer.json's vocabulary uses).
func byteLevel(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteChar[c])
	}
	return string(out)
}

// appendValid appends b to dst with every ill-formed UTF-8 sequence replaced by U+FFFD, one
// U+FFFD per maximal subpart (Unicode §3.9 "U+FFFD substitution of maximal subparts"; what the
// WHATWG TextDecoder, the reference decoder, and Rust's String::from_utf8_lossy do). A lead byte
// followed by fewer valid continuation bytes than it announces is one maximal subpart: "\xE2\x82"
// becomes one U+FFFD, not two (Go's utf8.DecodeRune would count each byte).
func appendValid(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		n, lo, hi := seqInfo(c)
		if n == 0 { // a byte that never starts a sequence
			dst = append(dst, "\uFFFD"...)
			i++
			continue
		}
		j := i + 1
		for k := 1; k < n; k++ {
			if j >= len(b) || b[j] < lo || b[j] > hi {
				break
			}
			j++
			lo, hi = 0x80, 0xBF
		}
		if j-i == n {
			dst = append(dst, b[i:j]...)
		} else {
			dst = append(dst, "\uFFFD"...)
		}
		i = j
	}
	return dst
}

// validString returns s with ill-formed UTF-8 replaced as appendValid does.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendValid(nil, []byte(s)))
}

// seqInfo gives the length of the UTF-8 sequence that lead byte c starts (0: c starts none) and
// the range its second byte must fall in (Unicode Table 3-7, Well-Formed UTF-8 Byte Sequences).
func seqInfo(c byte) (n int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
