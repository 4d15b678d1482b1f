package agent

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode"

	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/envs/calc"
)

var update = flag.Bool("update", false, "rewrite testdata/tokenizer.json")

// The test tokenizer (testdata/tokenizer.json): Qwen's pre-tokenizer and normalizer over a
// vocabulary of the 256 byte tokens (ids 0-255, in byte order), numMerges merges learnt from
// calc prompts in the three formats, and the special tokens of Qwen and Llama 3, so that one
// file serves every format. The test models have vocabulary testVocab: a few ids past the
// tokenizer's, as real checkpoints pad their embeddings.
const (
	numMerges = 40
	testVocab = 320
)

// addedTokens are the test tokenizer's added tokens and whether each is special, as in the
// real Qwen3 and Llama 3 files.
var addedTokens = []struct {
	content string
	special bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<tool_call>", false}, {"</tool_call>", false}, {"<tool_response>", false}, {"</tool_response>", false},
	{"<think>", false}, {"</think>", false},
	{"<|begin_of_text|>", true}, {"<|end_of_text|>", true}, {"<|start_header_id|>", true},
	{"<|end_header_id|>", true}, {"<|eot_id|>", true}, {"<|eom_id|>", true}, {"<|python_tag|>", true},
}

// byteChars maps each byte to its character in the byte-level alphabet: the printable bytes
// '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves, the others take U+0100, U+0101, … in
// byte order.
func byteChars() [256]rune {
	var m [256]rune
	next := rune(0x100)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}

// corpus is the text the merges are learnt from: calc prompts, turns and observations as the
// three formats write them.
func corpus() string {
	env := calc.New()
	tools := env.Tools()
	var b strings.Builder
	for _, f := range []chat.Format{chat.Qwen25(), chat.Qwen3(), chat.Llama3()} {
		for _, expr := range []string{"12+7*(3-5)", "81/9-4", "6*7"} {
			msgs := []chat.Message{{Role: chat.RoleUser, Content: calc.PromptPrefix + expr}}
			text, err := f.Render(msgs, tools, true)
			if err != nil {
				panic(err)
			}
			b.WriteString(text)
			call, _ := f.FormatAction(agrl.Action{Kind: agrl.ToolCall, Tool: calc.ToolName, Args: expr}, tools)
			b.WriteString(call + f.AppendObservation("42"))
			b.WriteString(f.AppendObservation("invalid action: the action reached the cap of 8 tokens"))
		}
	}
	return b.String()
}

// learnMerges learns n merges from text the way BPE training does, on words cut roughly as
// Qwen's pre-tokenizer cuts them (a run of letters with at most one other character before
// it): the most frequent pair first, ties to the smaller pair in byte order.
func learnMerges(text string, n int) [][2]string {
	for _, a := range addedTokens {
		text = strings.ReplaceAll(text, a.content, "\n")
	}
	chars := byteChars()
	counts := map[string]int{}
	rs := []rune(text)
	for i := 0; i < len(rs); {
		if !unicode.IsLetter(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && unicode.IsLetter(rs[j]) {
			j++
		}
		start := i
		if i > 0 && !unicode.IsDigit(rs[i-1]) && rs[i-1] != '\n' && rs[i-1] != '\r' {
			start = i - 1
		}
		counts[string(rs[start:j])]++
		i = j
	}
	type word struct {
		syms []string
		n    int
	}
	var words []word
	for w, c := range counts {
		var syms []string
		for _, b := range []byte(w) {
			syms = append(syms, string(chars[b]))
		}
		words = append(words, word{syms, c})
	}
	var merges [][2]string
	for range n {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for k := 0; k+1 < len(w.syms); k++ {
				pairs[[2]string{w.syms[k], w.syms[k+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if c > bestN || c == bestN && p[0]+" "+p[1] < best[0]+" "+best[1] {
				best, bestN = p, c
			}
		}
		if bestN == 0 {
			break
		}
		merges = append(merges, best)
		for wi := range words {
			w := &words[wi]
			var out []string
			for k := 0; k < len(w.syms); k++ {
				if k+1 < len(w.syms) && w.syms[k] == best[0] && w.syms[k+1] == best[1] {
					out = append(out, best[0]+best[1])
					k++
				} else {
					out = append(out, w.syms[k])
				}
			}
			w.syms = out
		}
	}
	return merges
}

// tokenizerJSON writes the test tokenizer.
func tokenizerJSON() ([]byte, error) {
	chars := byteChars()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(chars[b])] = b
	}
	merges := learnMerges(corpus(), numMerges)
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var adds []added
	for _, a := range addedTokens {
		adds = append(adds, added{ID: len(vocab) + len(adds), Content: a.content, Special: a.special})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	file := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": adds,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{
				"type":     "Split",
				"pattern":  map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
				"behavior": "Isolated", "invert": false,
			},
			byteLevel,
		}},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(file); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TestTokenizerTestdata checks that testdata/tokenizer.json is what tokenizerJSON writes
// (-update rewrites it).
func TestTokenizerTestdata(t *testing.T) {
	want, err := tokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "tokenizer.json")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what tokenizerJSON writes; run go test -run TestTokenizerTestdata -update", path)
	}
}

// The test models, written once per test binary.
var (
	modelsOnce sync.Once
	modelsDir  string
	modelsErr  error
)

// testConfig is a tiny model of family f with the test vocabulary and a context that holds a
// calc episode in any of the formats.
func testConfig(f hf.Family) hf.Config {
	c := llm.Tiny(f)
	c.VocabSize, c.MaxPositionEmbeddings = testVocab, 2048
	c.BOSTokenID, c.EOSTokenIDs = -1, nil
	return c
}

// modelDir returns the directory of the test model of family f: random weights (seed 1), the
// test tokenizer and no tokenizer_config.json.
func modelDir(t testing.TB, f hf.Family) string {
	t.Helper()
	modelsOnce.Do(func() {
		modelsDir, modelsErr = os.MkdirTemp("", "agent-models")
		if modelsErr != nil {
			return
		}
		tok, err := os.ReadFile(filepath.Join("testdata", "tokenizer.json"))
		if err != nil {
			modelsErr = err
			return
		}
		for _, fam := range []hf.Family{hf.Qwen2, hf.Qwen3, hf.Llama} {
			dir := filepath.Join(modelsDir, string(fam))
			if err := llm.WriteRandom(dir, testConfig(fam), 1, 1); err != nil {
				modelsErr = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
				modelsErr = err
				return
			}
		}
	})
	if modelsErr != nil {
		t.Fatal(modelsErr)
	}
	return filepath.Join(modelsDir, string(f))
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if modelsDir != "" {
		os.RemoveAll(modelsDir)
	}
	os.Exit(code)
}

// loadPolicy loads the test model of family f with format fm (nil: as Load picks it).
func loadPolicy(t testing.TB, f hf.Family, fm chat.Format) *Policy {
	t.Helper()
	var p *Policy
	var err error
	if fm == nil {
		p, err = Load(modelDir(t, f))
	} else {
		p, err = LoadFormat(modelDir(t, f), fm)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mustTask is calc.NewTask that fails the test on an error.
func mustTask(t testing.TB, expr string) agrl.Task {
	t.Helper()
	task, err := calc.NewTask(expr, agrl.Easy)
	if err != nil {
		t.Fatal(fmt.Errorf("task %q: %w", expr, err))
	}
	return task
}
