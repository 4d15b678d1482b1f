package bpe

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// TestNFCGolden checks nfc against String.prototype.normalize("NFC") (testdata/nfc.json.gz,
// from check.mjs): every code point with a decomposition, its NFD form, and random stacks of
// marks on bases and on starters that compose (Hangul jamo, Indic two-part vowels).
func TestNFCGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "nfc.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Reference string      `json:"reference"`
		Cases     [][2]string `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, c := range g.Cases {
		if got := nfc(c[0]); got != c[1] {
			if bad++; bad <= 10 {
				t.Errorf("nfc(%+q) = %+q, want %+q", c[0], got, c[1])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases differ from %s", bad, len(g.Cases), g.Reference)
	}
	if len(g.Cases) < 5000 {
		t.Errorf("only %d cases", len(g.Cases))
	}
}

func TestNFC(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain ASCII", "plain ASCII"},
		{"café", "café"},                       // already composed
		{"cafe\u0301", "café"},                 // composed
		{"e\u0301\u0301", "é\u0301"},           // one mark composes, the next is blocked by nothing but has no pair
		{"a\u0323\u0307", "\u1ea1\u0307"},      // ạ + dot above: no precomposed ạ̇
		{"s\u0307\u0323", "\u1e69"},            // reordered (220 before 230) then composed twice: ṩ
		{"\u212b", "\u00c5"},                   // Angstrom sign -> Å (a singleton)
		{"\u1100\u1161\u11a8", "\uac01"},       // Hangul L V T -> 각
		{"\uac00\u11a8", "\uac01"},             // LV + T
		{"x\u0301\u0334", "x\u0334\u0301"},     // overlay (class 1) sorts first; no composite
		{"\u0301abc", "\u0301abc"},             // a leading mark stays
		{"\u0b47\u0b3e\u0b57", "\u0b4b\u0b57"}, // Oriya: two starters compose
		{"中文 한국어 😀", "中文 한국어 😀"},               // nothing to do
		{"Ω \u2126 K \u212a", "Ω \u03a9 K K"},  // ohm and kelvin signs are singletons
		{"\u0344", "\u0308\u0301"},             // excluded: a non-starter decomposition
		{"q\u0307\u0323", "q\u0323\u0307"},     // reordered, nothing composes
		{"\u00e9\u0323", "\u1eb9\u0301"},       // é + dot below: the order makes ẹ́
		{"\u1e0b\u0323", "\u1e0d\u0307"},       // ḋ + dot below -> ḍ + dot above
		{"ﬁ", "ﬁ"},                             // compatibility only: NFC keeps it
		{"\u0041\u030a\u0301", "\u01fa"},       // Å then acute: Ǻ
		{"abc\u0065\u0301def\u0041\u030a", "abcédefÅ"},
	} {
		if got := nfc(c.in); got != c.want {
			t.Errorf("nfc(%+q) = %+q, want %+q", c.in, got, c.want)
		}
	}
}

// TestNFCUnsafeBelow0300 backs nfcUnsafe's shortcut: nothing below U+0300 changes under NFC or
// combines with what precedes it.
func TestNFCUnsafeBelow0300(t *testing.T) {
	d := nfcTables()
	for r := range rune(0x300) {
		if d.unsafe[r] {
			t.Errorf("U+%04X is NFC-unsafe", r)
		}
	}
}

// TestNFCIdempotent: NFC(NFC(s)) == NFC(s), and the result is valid UTF-8, for every code point
// followed by marks.
func TestNFCIdempotent(t *testing.T) {
	for r := rune(0); r <= 0x2FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		s := string(r) + "\u0323\u0301"
		n := nfc(s)
		if !utf8.ValidString(n) || nfc(n) != n {
			t.Fatalf("U+%04X: nfc %+q, again %+q", r, n, nfc(n))
		}
	}
}
