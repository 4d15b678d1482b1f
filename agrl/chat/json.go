package chat

import (
	"strings"
	"unicode/utf8"
)

// The templates serialise tools and arguments with transformers' tojson filter, which is
// Python's json.dumps with ensure_ascii=False: items separated by ", " and keys by ": " on one
// line, or "," and newlines with indent; non-ASCII text kept as is; only '"', '\\' and control
// characters below U+0020 escaped. encoding/json differs (no spaces, HTML escapes), hence
// this small writer. A value is a string, an object or a []any.

// member is one key of an object, in order.
type member struct {
	key   string
	value any
}

// object is a JSON object whose keys keep their order.
type object []member

// toJSON writes v as tojson does without indent.
func toJSON(v any) string {
	var b strings.Builder
	writeJSON(&b, v, 0, 0)
	return b.String()
}

// toJSONIndent writes v as tojson(indent=n) does.
func toJSONIndent(v any, n int) string {
	var b strings.Builder
	writeJSON(&b, v, n, 0)
	return b.String()
}

func writeJSON(b *strings.Builder, v any, indent, depth int) {
	newline := func(d int) {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(" ", indent*d))
	}
	sep := ", "
	if indent > 0 {
		sep = ","
	}
	switch v := v.(type) {
	case string:
		writeJSONString(b, v)
	case object:
		if len(v) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteByte('{')
		for i, m := range v {
			if i > 0 {
				b.WriteString(sep)
			}
			if indent > 0 {
				newline(depth + 1)
			}
			writeJSONString(b, m.key)
			b.WriteString(": ")
			writeJSON(b, m.value, indent, depth+1)
		}
		if indent > 0 {
			newline(depth)
		}
		b.WriteByte('}')
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(sep)
			}
			if indent > 0 {
				newline(depth + 1)
			}
			writeJSON(b, x, indent, depth+1)
		}
		if indent > 0 {
			newline(depth)
		}
		b.WriteByte(']')
	default:
		panic("chat: unexpected JSON value") // unreachable: callers build the values
	}
}

// writeJSONString quotes s as json.dumps(s, ensure_ascii=False) does. Invalid UTF-8 bytes
// become U+FFFD (a Python or JavaScript string cannot hold them).
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
		i++
	}
	b.WriteByte('"')
}
