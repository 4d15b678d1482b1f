package bpe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The parts of tokenizer.json (the Hugging Face tokenizers format) this package reads. Fields
// it does not know are ignored: truncation and padding (batching settings), offsets options.

type fileJSON struct {
	Model         json.RawMessage `json:"model"` // modelJSON once its type is known to be BPE
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
}

type addedJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// component is any normalizer, pre-tokenizer, post-processor or decoder: a "type" and settings.
type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split
	Pattern  *struct{ Regex, String *string } `json:"pattern"`
	Behavior string                           `json:"behavior"`
	Invert   bool                             `json:"invert"`
	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Digits
	IndividualDigits bool `json:"individual_digits"`
	// TemplateProcessing
	Single        []templateItem `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
}

type templateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

// parseComponent decodes one component; ok is false for JSON null (or nothing).
func parseComponent(raw json.RawMessage) (c component, ok bool, err error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return c, false, nil
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, false, err
	}
	return c, true, nil
}

// parseMerges reads the merges in either form: "a b" strings (older files) or [a, b] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	// The form is the first element's: a string or an array.
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '[' {
		return nil, errors.New("merges: want a list")
	}
	if rest := bytes.TrimSpace(b[1:]); len(rest) > 0 && rest[0] == '"' {
		var lines []string
		if err := json.Unmarshal(raw, &lines); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(lines))
		for i, s := range lines {
			a, rest, ok := strings.Cut(s, " ")
			if !ok || a == "" || rest == "" || strings.Contains(rest, " ") {
				return nil, fmt.Errorf("merges[%d] %q: want two tokens separated by one space", i, s)
			}
			out[i] = [2]string{a, rest}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges: want strings \"a b\" or pairs [a, b]: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merges[%d]: %d tokens, want a pair [a, b]", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// A preStep is one step of the pre-tokenizer.
type preStep struct {
	kind       stepKind
	split      splitter // stepSplit
	individual bool     // stepDigits
}

type stepKind uint8

const (
	stepSplit stepKind = iota
	stepDigits
	stepPrefixSpace // ByteLevel's add_prefix_space: " " before each piece that lacks one
)

// parsePreTokenizer turns the pre_tokenizer into steps. It must be a ByteLevel, or a Sequence of
// Split (a known pattern) and Digits steps that ends with ByteLevel.
func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	c, ok, err := parseComponent(raw)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if !ok {
		return nil, errors.New("pre_tokenizer: missing; want ByteLevel, or a Sequence ending with ByteLevel")
	}
	parts := []component{c}
	if c.Type == "Sequence" {
		parts = parts[:0]
		for i, r := range c.PreTokenizers {
			p, ok, err := parseComponent(r)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer.pretokenizers[%d]: %w", i, err)
			}
			if ok {
				parts = append(parts, p)
			}
		}
	}
	var steps []preStep
	for i, p := range parts {
		last := i == len(parts)-1
		switch p.Type {
		case "ByteLevel":
			if !last {
				return nil, errors.New("pre_tokenizer: ByteLevel must be the last step")
			}
			if p.AddPrefixSpace {
				steps = append(steps, preStep{kind: stepPrefixSpace})
			}
			if p.UseRegex == nil || *p.UseRegex { // use_regex defaults to true
				steps = append(steps, preStep{kind: stepSplit, split: splitter{}})
			}
			return steps, nil
		case "Split":
			if p.Pattern == nil || p.Pattern.Regex == nil {
				return nil, errors.New("pre_tokenizer: Split: only a Regex pattern is supported")
			}
			sp, ok := splitterFor(*p.Pattern.Regex)
			if !ok {
				return nil, fmt.Errorf("pre_tokenizer: Split: unsupported regex %q (supported: the GPT-2, Qwen2 and Llama 3 patterns)", *p.Pattern.Regex)
			}
			if p.Behavior != "Isolated" || p.Invert {
				return nil, fmt.Errorf("pre_tokenizer: Split: unsupported behavior %q invert %v (want Isolated, invert false)", p.Behavior, p.Invert)
			}
			steps = append(steps, preStep{kind: stepSplit, split: sp})
		case "Digits":
			steps = append(steps, preStep{kind: stepDigits, individual: p.IndividualDigits})
		default:
			return nil, fmt.Errorf("pre_tokenizer: unsupported type %q (supported: ByteLevel, Sequence, Split, Digits)", p.Type)
		}
	}
	return nil, errors.New("pre_tokenizer: must end with ByteLevel (this package reads byte-level BPE only)")
}

// parseNormalizer accepts no normalizer, NFC, or a Sequence of those. It reports whether NFC applies.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	c, ok, err := parseComponent(raw)
	if err != nil || !ok {
		return false, err
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for _, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return false, err
			}
			nfc = nfc || n // NFC twice is NFC once
		}
		return nfc, nil
	}
	return false, fmt.Errorf("normalizer: unsupported type %q (supported: none, NFC, Sequence of NFC)", c.Type)
}

// parsePostProcessor reads the template that AddSpecialTokens applies: TemplateProcessing's
// single template, or nothing for ByteLevel, none, or a Sequence of those.
func parsePostProcessor(raw json.RawMessage, lookup func(string) (int32, bool)) (prefix, suffix []int32, err error) {
	c, ok, err := parseComponent(raw)
	if err != nil || !ok {
		return nil, nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		found := false
		for i, r := range c.Processors {
			p, s, err := parsePostProcessor(r, lookup)
			if err != nil {
				return nil, nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if p != nil || s != nil {
				if found {
					return nil, nil, errors.New("post_processor: more than one TemplateProcessing")
				}
				found, prefix, suffix = true, p, s
			}
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		prefix, suffix = []int32{}, []int32{}
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if it.Sequence.ID != "A" || seen {
					return nil, nil, fmt.Errorf("post_processor: TemplateProcessing: single template with sequence %q", it.Sequence.ID)
				}
				seen = true
			case it.SpecialToken != nil:
				name := it.SpecialToken.ID
				ids := c.SpecialTokens[name].IDs
				if len(ids) == 0 {
					id, ok := lookup(name)
					if !ok {
						return nil, nil, fmt.Errorf("post_processor: TemplateProcessing: unknown special token %q", name)
					}
					ids = []int32{id}
				}
				if seen {
					suffix = append(suffix, ids...)
				} else {
					prefix = append(prefix, ids...)
				}
			}
		}
		if !seen {
			return nil, nil, errors.New("post_processor: TemplateProcessing: single template lacks $A")
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post_processor: unsupported type %q (supported: none, ByteLevel, TemplateProcessing, Sequence)", c.Type)
}

// checkDecoder accepts a ByteLevel decoder only.
func checkDecoder(raw json.RawMessage) error {
	c, ok, err := parseComponent(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if !ok {
		return errors.New("decoder: missing; want ByteLevel")
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("decoder: unsupported type %q (want ByteLevel)", c.Type)
	}
	return nil
}
