package bpe

import (
	"slices"
	"sync"
	"unicode/utf8"
)

// NFC: Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), the normalizer of the Qwen tokenizers. The standard library has none, so
// this is a small one over tables generated from Node.js (nfc_tables.go, gen_nfc.mjs).

// Hangul syllables compose and decompose by arithmetic (Unicode §3.12).
const (
	hangulS = 0xAC00 // first syllable
	hangulL = 0x1100 // first leading consonant
	hangulV = 0x1161 // first vowel
	hangulT = 0x11A7 // one before the first trailing consonant
	countL  = 19
	countV  = 21
	countT  = 28
	countN  = countV * countT
	countS  = countL * countN
)

type nfcData struct {
	compose map[[2]rune]rune
	unsafe  map[rune]bool // code points that may make a string non-NFC (see nfcUnsafe)
}

var nfcTables = sync.OnceValue(func() *nfcData {
	d := &nfcData{compose: make(map[[2]rune]rune, len(nfcPairs)), unsafe: map[rune]bool{}}
	for _, p := range nfcPairs {
		d.compose[[2]rune{p[0], p[1]}] = p[2]
		d.unsafe[p[1]] = true // may compose with what precedes it (NFC_QC=Maybe)
	}
	for _, r := range nfcQCNo {
		d.unsafe[r] = true
	}
	for r := range nfcClass {
		d.unsafe[r] = true
	}
	return d
})

// nfcUnsafe reports whether r can make a string that holds it change under NFC: it changes on
// its own, is a non-starter (may need reordering), or may compose with the character before
// it. A string without such characters is already NFC (the NFC_Quick_Check "Yes" answer).
func (d *nfcData) nfcUnsafe(r rune) bool {
	if r < 0x300 {
		return false // nothing below U+0300 changes or combines backwards
	}
	if r >= hangulV && r < hangulV+countV || r > hangulT && r < hangulT+countT {
		return true // Hangul vowels and trailing consonants join the syllable before them
	}
	return d.unsafe[r]
}

// nfc returns s in Normalization Form C.
func nfc(s string) string {
	// Fast path: ASCII, then the quick check.
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s
	}
	d := nfcTables()
	// start is where the character before s[j] begins: a starter that may compose with s[j].
	start := max(i-1, 0)
	for j := i; j < len(s); {
		r, w := utf8.DecodeRuneInString(s[j:])
		if d.nfcUnsafe(r) {
			return s[:start] + nfcSlow(d, s[start:])
		}
		start = j
		j += w
	}
	return s
}

// nfcSlow normalizes s fully: decompose, reorder the marks by class, compose.
func nfcSlow(d *nfcData, s string) string {
	rs := make([]rune, 0, len(s))
	for _, r := range s {
		rs = decompose(rs, r)
	}
	reorder(rs)
	rs = compose(d, rs)
	return string(rs)
}

func decompose(dst []rune, r rune) []rune {
	if r >= hangulS && r < hangulS+countS {
		k := r - hangulS
		dst = append(dst, hangulL+k/countN, hangulV+(k%countN)/countT)
		if t := k % countT; t != 0 {
			dst = append(dst, hangulT+t)
		}
		return dst
	}
	if m, ok := nfcDecomp[r]; ok {
		for _, c := range m {
			dst = append(dst, c)
		}
		return dst
	}
	return append(dst, r)
}

// reorder sorts each run of non-starters by class, keeping the order of equal classes
// (the Canonical Ordering Algorithm).
func reorder(rs []rune) {
	for i := 0; i < len(rs); {
		if nfcClass[rs[i]] == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(rs) && nfcClass[rs[j]] != 0 {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(nfcClass[a]) - int(nfcClass[b]) })
		}
		i = j
	}
}

// compose runs the Canonical Composition Algorithm over a decomposed, reordered string in place.
func compose(d *nfcData, rs []rune) []rune {
	out := rs[:0]
	starter := -1 // index in out of the last starter, -1 before the first
	last := -1    // class of the last character kept after the starter; -1: none yet
	for _, c := range rs {
		cc := int(nfcClass[c])
		if starter >= 0 && (last == -1 || last != 0 && last < cc) {
			// c is not blocked from the starter.
			if p, ok := composePair(d, out[starter], c); ok {
				out[starter] = p
				continue
			}
		}
		if cc == 0 {
			starter, last = len(out), -1
		} else {
			last = cc
		}
		out = append(out, c)
	}
	return out
}

func composePair(d *nfcData, a, b rune) (rune, bool) {
	if a >= hangulL && a < hangulL+countL && b >= hangulV && b < hangulV+countV {
		return hangulS + ((a-hangulL)*countV+(b-hangulV))*countT, true
	}
	if a >= hangulS && a < hangulS+countS && (a-hangulS)%countT == 0 && b > hangulT && b < hangulT+countT {
		return a + (b - hangulT), true
	}
	p, ok := d.compose[[2]rune{a, b}]
	return p, ok
}
