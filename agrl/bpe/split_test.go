package bpe

import (
	"slices"
	"strings"
	"testing"
)

func pieces(p splitter, s string) []string {
	var out []string
	p.split(s, func(x string) { out = append(out, x) })
	return out
}

// splitCases were checked against the reference's regexes (the JS port's SplitPreTokenizer,
// which rewrites the Oniguruma patterns for V8) when they were written; the expected pieces are
// joined with "|".
var splitCases = []struct {
	pattern string
	in      string
	want    string
}{
	// Qwen2: single digits, contractions in any case, a non-letter before letters.
	{PatternQwen2, "Hello world", "Hello| world"},
	{PatternQwen2, "12345", "1|2|3|4|5"},
	{PatternQwen2, "x=12.5", "x|=|1|2|.|5"},
	{PatternQwen2, "I'm you're THEY'LL It'S we'VE", "I|'m| you|'re| THEY|'LL| It|'S| we|'VE"},
	{PatternQwen2, "'sand 'Sand", "'s|and| '|Sand"},
	{PatternQwen2, "don't", "don|'t"},
	{PatternQwen2, "rock'n'roll", "rock|'n|'roll"},
	{PatternQwen2, "it’s", "it|’s"},
	{PatternQwen2, "'ſ", "'ſ"},
	{PatternQwen2, "''s", "''|s"},
	{PatternQwen2, "a  b", "a| | b"},
	{PatternQwen2, "a   b", "a|  | b"},
	{PatternQwen2, "a\tb", "a|\tb"},
	{PatternQwen2, "a \tb", "a| |\tb"},
	{PatternQwen2, "a\nb", "a|\n|b"},
	{PatternQwen2, "a \n b", "a| \n| b"},
	{PatternQwen2, "a\n\n\nb", "a|\n\n\n|b"},
	{PatternQwen2, "a\r\n\r\nb", "a|\r\n\r\n|b"},
	{PatternQwen2, "  \t\n\n x", "  \t\n\n| x"},
	{PatternQwen2, "x \n \n  ", "x| \n \n|  "},
	{PatternQwen2, "trailing   ", "trailing|   "},
	{PatternQwen2, "   leading", "  | leading"},
	{PatternQwen2, " ", " "},
	{PatternQwen2, "\n", "\n"},
	{PatternQwen2, "!!\n\nabc", "!!\n\n|abc"},
	{PatternQwen2, "?\n\nx", "?\n\n|x"},
	{PatternQwen2, " !a", " !|a"},
	{PatternQwen2, "  !", " | !"},
	{PatternQwen2, "\t!", "\t|!"},
	{PatternQwen2, "(x)", "(x|)"},
	{PatternQwen2, "<tool>calc(1)</tool>", "<tool|>calc|(|1|)</|tool|>"},
	{PatternQwen2, "{\"a\": 1}", "{\"|a|\":| |1|}"},
	{PatternQwen2, "$x$", "$x|$"},
	{PatternQwen2, "x²+½", "x|²|+|½"},
	{PatternQwen2, "Ⅻ١٢", "Ⅻ|١|٢"},
	{PatternQwen2, "café", "café"},
	{PatternQwen2, "cafe\u0301s", "cafe|\u0301s"},
	{PatternQwen2, "中文，世界！", "中文|，世界|！"},
	{PatternQwen2, "😀😀 x", "😀😀| x"},
	{PatternQwen2, "a\u00a0b", "a|\u00a0b"},
	{PatternQwen2, "a\u3000\u3000b", "a|\u3000|\u3000b"},
	{PatternQwen2, "a\u0085b", "a|\u0085b"}, // NEL is \s, and not CR or LF
	{PatternQwen2, "a\ufeffb", "a|\ufeffb"},
	{PatternQwen2, "a\u2028b", "a|\u2028b"},
	{PatternQwen2, "\r\rx", "\r\r|x"},
	{PatternQwen2, "x\r", "x|\r"},
	// Llama 3: digits in threes, otherwise the same.
	{PatternLlama3, "1234567", "123|456|7"},
	{PatternLlama3, "3.14159", "3|.|141|59"},
	{PatternLlama3, "a1234b", "a|123|4|b"},
	{PatternLlama3, "x²³¹⁴", "x|²³¹|⁴"},
	{PatternLlama3, "12 345", "12| |345"},
	{PatternLlama3, "I'M", "I|'M"},
	// GPT-2: contractions in lower case only; a space joins the next word, number or symbols.
	{PatternGPT2, "Hello world", "Hello| world"},
	{PatternGPT2, "I'm I'M", "I|'m| I|'|M"},
	{PatternGPT2, "12345 678", "12345| 678"},
	{PatternGPT2, "a  b", "a| | b"},
	{PatternGPT2, "a\n\nb", "a|\n|\n|b"},
	{PatternGPT2, "a \n b", "a| \n| b"},
	{PatternGPT2, "x  ", "x|  "},
	{PatternGPT2, " !! x", " !!| x"},
	{PatternGPT2, "a\tb", "a|\t|b"},
	{PatternGPT2, "abc123def", "abc|123|def"},
	{PatternGPT2, "'sand", "'s|and"},
	{PatternGPT2, "''", "''"},
}

func TestSplitter(t *testing.T) {
	for _, c := range splitCases {
		p, ok := splitterFor(c.pattern)
		if !ok {
			t.Fatalf("pattern %q not known", c.pattern)
		}
		got := pieces(p, c.in)
		if want := strings.Split(c.want, "|"); !slices.Equal(got, want) {
			t.Errorf("%s split %q = %q, want %q", patternName(c.pattern), c.in, got, want)
		}
	}
}

func patternName(p string) string {
	switch p {
	case PatternGPT2:
		return "GPT-2"
	case PatternQwen2:
		return "Qwen2"
	case PatternLlama3:
		return "Llama 3"
	}
	return "?"
}

// TestSplitterTiles: the pieces of every pattern cover the text exactly, none empty.
func TestSplitterTiles(t *testing.T) {
	inputs := []string{"", "a", " \n\t\r x'S 12345 !!\n\n", "\u0301\u0301", "😀 \u00a0\u2028", strings.Repeat(" ", 100) + "x"}
	for _, pat := range []string{PatternGPT2, PatternQwen2, PatternLlama3} {
		p, _ := splitterFor(pat)
		for _, in := range inputs {
			got := pieces(p, in)
			if strings.Join(got, "") != in || slices.Contains(got, "") {
				t.Errorf("%s: %q -> %q", patternName(pat), in, got)
			}
		}
	}
}

func TestSplitDigits(t *testing.T) {
	for _, c := range []struct {
		in         string
		individual bool
		want       string
	}{
		{"abc123def", true, "abc|1|2|3|def"},
		{"abc123def", false, "abc|123|def"},
		{"1", true, "1"},
		{"x", true, "x"},
		{"٣٤x", true, "٣|٤|x"}, // \p{N}, as Rust's char::is_numeric
		{"²½", false, "²½"},
	} {
		var got []string
		splitDigits(c.in, c.individual, func(s string) { got = append(got, s) })
		if want := strings.Split(c.want, "|"); !slices.Equal(got, want) {
			t.Errorf("splitDigits(%q, %v) = %q, want %q", c.in, c.individual, got, want)
		}
	}
}

func TestUnknownPattern(t *testing.T) {
	if _, ok := splitterFor(`\w+|\s+`); ok {
		t.Error("an unknown pattern was taken")
	}
	// One character off is unknown too: the pattern is recognised by its exact text.
	if _, ok := splitterFor(strings.Replace(PatternQwen2, `\p{N}|`, `\p{N}{1,2}|`, 1)); ok {
		t.Error("a changed pattern was taken")
	}
}
