package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"

	"agrl.dev/agrl"
	"agrl.dev/agrl/bpe"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// Policy is a pretrained decoder that plays agrl environments in its own chat format: the
// model (or a LoRA view of it), its tokenizer and its chat.Format, plus the system prompt
// and the number of episodes sampled at once. Make one with Load, LoadFormat or New.
//
// A Policy is immutable: System, Workers, Adapters and WithModel return a changed copy. Its
// methods are safe for concurrent use.
type Policy struct {
	model  *llm.Model
	tok    *bpe.Tokenizer
	format chat.Format
	// stops are the ids of the format's stop strings that the tokenizer has, in the format's
	// order; stops[0] is the one the template writes.
	stops   []int32
	system  string
	workers int
	// dec decodes for sampling; nil means the model on the host (see WithDecoder).
	dec Decoder

	// open starts an empty token stream; nil means the model's own (a KV cache). Tests
	// replace it with a scripted stream.
	open func() stream
}

// Load reads the model directory dir as transformers saves one — config.json, the
// safetensors weights and tokenizer.json — and picks the chat format from
// tokenizer_config.json's chat_template (one of the templates chat.ForTemplate verifies) or,
// when dir has no chat template, from the model family: qwen3 gives chat.Qwen3(), qwen2
// chat.Qwen25() and llama chat.Llama3(). An unverified chat template is an error: use
// LoadFormat with the format it follows.
func Load(dir string) (*Policy, error) {
	f, err := FormatOf(dir)
	if err != nil {
		return nil, err
	}
	return LoadFormat(dir, f)
}

// LoadFormat is Load with the chat format given.
func LoadFormat(dir string, f chat.Format) (*Policy, error) {
	if f == nil {
		return nil, errors.New("agent: LoadFormat needs a chat format")
	}
	m, err := llm.Load(dir)
	if err != nil {
		return nil, err
	}
	tok, err := bpe.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("agent: %s: %w", dir, err)
	}
	return New(m, tok, f)
}

// FormatOf returns the chat format of the model in dir, as Load picks it: from the
// chat_template of tokenizer_config.json (a string, or the entry named "default" of a list of
// named templates), else from config.json's model_type.
func FormatOf(dir string) (chat.Format, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	switch {
	case err == nil:
		tmpl, ok, err := chatTemplate(data)
		if err != nil {
			return nil, fmt.Errorf("agent: %s: tokenizer_config.json: %w", dir, err)
		}
		if ok {
			f, err := chat.ForTemplate(tmpl)
			if err != nil {
				return nil, fmt.Errorf("agent: %s: %w; pass the format it follows to LoadFormat", dir, err)
			}
			return f, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("agent: %w", err)
	}
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	switch cfg.Family {
	case hf.Qwen3:
		return chat.Qwen3(), nil
	case hf.Qwen2:
		return chat.Qwen25(), nil
	case hf.Llama:
		return chat.Llama3(), nil
	}
	return nil, fmt.Errorf("agent: %s: no chat template and no format known for model_type %q; use LoadFormat", dir, cfg.Family)
}

// chatTemplate reads the chat_template of a tokenizer_config.json; ok is false when it has
// none.
func chatTemplate(data []byte) (tmpl string, ok bool, err error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", false, err
	}
	raw := cfg.ChatTemplate
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &tmpl); err == nil {
		return tmpl, true, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", false, errors.New("chat_template is neither a string nor a list of named templates")
	}
	for _, t := range named {
		if t.Name == "default" {
			return t.Template, true, nil
		}
	}
	return "", false, errors.New("chat_template lists no template named \"default\"")
}

// New makes a policy of a loaded model (or a LoRA view from llm.Model.WithAdapters), its
// tokenizer and its chat format. It fails when the tokenizer's vocabulary does not fit the
// model's embedding (a model may have more rows, never fewer) or when the tokenizer lacks the
// format's end-of-turn token (the first of its StopStrings) as one token: the pair does not
// belong together.
func New(m *llm.Model, tok *bpe.Tokenizer, f chat.Format) (*Policy, error) {
	if m == nil || tok == nil || f == nil {
		return nil, errors.New("agent: New needs a model, a tokenizer and a chat format")
	}
	var errs []error
	if v, mv := tok.VocabSize(), m.Config().VocabSize; v > mv {
		errs = append(errs, fmt.Errorf("the tokenizer's vocabulary (%d ids) does not fit the model's (%d)", v, mv))
	}
	var stops []int32
	for i, s := range f.StopStrings() {
		id, ok := tok.TokenID(s)
		if ok && !(len(tok.Encode(s)) == 1 && tok.Encode(s)[0] == id) {
			ok = false // in the vocabulary, but text does not encode to it
		}
		switch {
		case ok:
			stops = append(stops, id)
		case i == 0:
			errs = append(errs, fmt.Errorf("the tokenizer has no token %s, the end of a %s turn", s, f.Name()))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("agent: %w", errors.Join(errs...))
	}
	return &Policy{model: m, tok: tok, format: f, stops: stops}, nil
}

// System returns a copy of the policy that writes s as the system message of every prompt
// (empty, the default: none, and the format writes its own default, if any).
func (p *Policy) System(s string) *Policy {
	q := *p
	q.system = s
	return &q
}

// Workers returns a copy of the policy that plays at most n episodes of a Rollout at once,
// each on its own goroutine, their steps running through the model together (one pass over
// the weights for all of them: llm.Model.NextBatch, which spreads the products and the
// attention over the cores). n < 1, the default, means DefaultBatch (or GOMAXPROCS if
// more): past a few sequences a pass over the weights costs little more, while each episode
// played holds its KV cache (at the Qwen3-0.6B shape, 229 KB a token). The episodes do not
// depend on n: only the speed and the memory do.
func (p *Policy) Workers(n int) *Policy {
	q := *p
	q.workers = max(n, 0)
	return &q
}

// Adapters returns a copy of the policy whose model runs with the LoRA adapters a (see
// llm.Model.WithAdapters), sharing the base model's weights.
func (p *Policy) Adapters(a *llm.Adapters) (*Policy, error) {
	m, err := p.model.WithAdapters(a)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	q := *p
	q.model, q.dec = m, nil
	return &q, nil
}

// WithModel returns a copy of the policy that samples from m instead: the same tokenizer,
// chat format and settings, for a model of the same shapes — another model's weights (a
// fully fine-tuned copy, say). It is an error if m's configuration differs from the policy's
// model's in anything but its weights' values.
func (p *Policy) WithModel(m *llm.Model) (*Policy, error) {
	if m == nil {
		return nil, errors.New("agent: WithModel: nil model")
	}
	if !reflect.DeepEqual(m.Config(), p.model.Config()) {
		return nil, errors.New("agent: WithModel: the model's configuration differs from the policy's")
	}
	q := *p
	q.model, q.dec = m, nil
	return &q, nil
}

// Model returns the model the policy samples from.
func (p *Policy) Model() *llm.Model { return p.model }

// Tokenizer returns the policy's tokenizer.
func (p *Policy) Tokenizer() *bpe.Tokenizer { return p.tok }

// Format returns the policy's chat format.
func (p *Policy) Format() chat.Format { return p.format }

// StopTokens returns the ids that end an action: the format's stop strings that the
// tokenizer has as single tokens (<|im_end|> and <|endoftext|> for Qwen; <|eot_id|>,
// <|eom_id|> and <|end_of_text|> for Llama 3).
func (p *Policy) StopTokens() []int32 { return append([]int32(nil), p.stops...) }

// Context is the longest sequence the model takes: max_position_embeddings.
func (p *Policy) Context() int { return p.model.Config().MaxPositionEmbeddings }

// DefaultBatch is how many episodes a Rollout plays at once by default (see Workers): a
// GRPO group of 16 decodes as one batch.
const DefaultBatch = 16

// numWorkers is how many of jobs run at once: the Workers setting, by default DefaultBatch
// (or GOMAXPROCS if more) when their steps are batched and GOMAXPROCS otherwise (streams that
// run on their own).
func (p *Policy) numWorkers(jobs int, batched bool) int {
	n := p.workers
	if n < 1 {
		n = runtime.GOMAXPROCS(0)
		if batched {
			n = max(n, DefaultBatch)
		}
	}
	return max(1, min(n, jobs))
}

// Prompt returns the token ids an episode starts from: the system message (if set) and the
// user message userPrompt, with tools described, rendered by the format with its generation
// prompt, then encoded once. The rest of the episode is appended to these ids as tokens.
func (p *Policy) Prompt(tools []agrl.Tool, userPrompt string) ([]int32, error) {
	var msgs []chat.Message
	if p.system != "" {
		msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: p.system})
	}
	msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: userPrompt})
	text, err := p.format.Render(msgs, tools, true)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return p.tok.Encode(text), nil
}
