package agrl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// LM configures a policy language model: a pre-LayerNorm decoder-only transformer with learned
// (or rotary, RoPE) positions over a byte-level Tokenizer. It is a value: every setter returns a copy, so
// presets and sweeps never alias.
//
//	pol, err := learn.NewPolicy(agrl.TinyLM().Layers(4).Seed(7)) // agrl.dev/agrl/learn builds it
//
// The zero value is not usable; start from TinyLM or SmallLM.
type LM struct {
	tok                                *Tokenizer
	width, layers, heads, context, mlp int
	backend                            string
	seed                               uint64
	initStd                            float64
	shards                             int
	positions                          Positions
}

// Positions selects how the model encodes token positions.
type Positions int

const (
	// Learned adds a learned embedding of each absolute position (GPT-2 style): one vector of
	// parameters per position of the context.
	Learned Positions = iota
	// RoPE rotates queries and keys by their position (Su et al. 2021, "RoFormer"): attention
	// then depends only on relative offsets, and it costs no parameters. The presets use it:
	// it overtook Learned on longer warm starts (numbers in docs/experiments.md).
	RoPE
)

// String returns "learned" or "rope".
func (p Positions) String() string {
	if p == RoPE {
		return "rope"
	}
	return "learned"
}

// TinyLM is the CPU preset: the ASCII tokenizer with DigitPairs (vocabulary 209), width 128,
// 2 layers, 4 heads, RoPE positions, a 512-token context (enough for a 4-hop multihop episode)
// and a 512-wide MLP: about 0.45M parameters, trains in minutes on two cores. The backend
// defaults to learn.BackendFromEnv() (go:ops_sequential unless overridden).
func TinyLM() LM {
	return LM{tok: presetTokenizer(), positions: RoPE, width: 128, layers: 2, heads: 4, context: 512, mlp: 512, seed: 1, initStd: 0.02}
}

// SmallLM is the GPU preset: TinyLM's tokenizer and positions, width 512, 8 layers, 8 heads,
// a 1024-token context and a 2048-wide MLP (about 25M parameters). Pair it with
// Backend("xla:cuda").
func SmallLM() LM {
	return LM{tok: presetTokenizer(), positions: RoPE, width: 512, layers: 8, heads: 8, context: 1024, mlp: 2048, seed: 1, initStd: 0.02}
}

// presetTokenizer is the presets' tokenizer: printable ASCII plus the 100 digit pairs, which
// halve the numbers a policy copies into tool calls and answers, so a small model copies them
// more reliably (measured in docs/experiments.md).
func presetTokenizer() *Tokenizer {
	t, err := ASCIITokenizer().Words(DigitPairs()...)
	if err != nil {
		panic(err) // the words are constants
	}
	return t
}

// Positions sets the position encoding (RoPE in the presets).
func (c LM) Positions(p Positions) LM { c.positions = p; return c }

// Tokenizer sets the tokenizer; its VocabSize is the model's vocabulary.
func (c LM) Tokenizer(t *Tokenizer) LM { c.tok = t; return c }

// Width sets the model width d (the residual stream size).
func (c LM) Width(d int) LM { c.width = d; return c }

// Layers sets the number of transformer blocks.
func (c LM) Layers(n int) LM { c.layers = n; return c }

// Heads sets the number of attention heads; it must divide Width.
func (c LM) Heads(n int) LM { c.heads = n; return c }

// Context sets the longest sequence (prompt, actions and observations) the model reads.
func (c LM) Context(n int) LM { c.context = n; return c }

// MLP sets the hidden width of each block's feed-forward layer (usually 4×Width).
func (c LM) MLP(n int) LM { c.mlp = n; return c }

// Backend sets the compute backend configuration ("go:ops_sequential", "xla:cuda"…); ""
// means learn.BackendFromEnv(). learn.ParseBackend lists the accepted configurations.
func (c LM) Backend(config string) LM { c.backend = config; return c }

// Shards sets into how many parts training batches and sampling batches are split and run
// concurrently. The go backend runs most ops on a single core, so on a 2-core machine two
// shards use both cores. 0 (the default) means one per core (GOMAXPROCS) on the learner's host
// path (agrl/learn: the go backend with its vector kernels; results do not depend on the
// count), 2 on the go backend's graphs when GOMAXPROCS >= 2, else 1 (XLA parallelises each op
// itself).
func (c LM) Shards(n int) LM { c.shards = n; return c }

// Seed sets the seed of the weight initialisation.
func (c LM) Seed(seed uint64) LM { c.seed = seed; return c }

// InitStd sets the standard deviation of the initial weights (0.02 as in GPT-2; the residual
// projections are scaled down by 1/√(2·Layers)).
func (c LM) InitStd(std float64) LM { c.initStd = std; return c }

// LMSpec is every setting of an LM, for the learner that builds it (agrl.dev/agrl/learn) and
// for tools that read a configuration.
type LMSpec struct {
	Tokenizer                          *Tokenizer
	Width, Layers, Heads, Context, MLP int
	// Backend is the compute backend configuration; "" means the learner's default.
	Backend   string
	Seed      uint64
	InitStd   float64
	Shards    int
	Positions Positions
}

// Spec returns the settings.
func (c LM) Spec() LMSpec {
	return LMSpec{Tokenizer: c.tok, Width: c.width, Layers: c.layers, Heads: c.heads, Context: c.context,
		MLP: c.mlp, Backend: c.backend, Seed: c.seed, InitStd: c.initStd, Shards: c.shards, Positions: c.positions}
}

// Vocab returns the vocabulary size (the tokenizer's).
func (c LM) Vocab() int {
	if c.tok == nil {
		return 0
	}
	return c.tok.VocabSize()
}

// ContextLen returns the configured context length.
func (c LM) ContextLen() int { return c.context }

// Params counts the model's trainable parameters.
func (c LM) Params() int {
	v, d, m := c.Vocab(), c.width, c.mlp
	perLayer := 4*d + 4*d*d + 2*d*m
	pos := 0
	if c.positions == Learned {
		pos = c.context * d
	}
	return v*d + pos + c.layers*perLayer + 2*d + d*v
}

// FLOPsPerToken estimates the floating-point operations of one forward pass per token at
// sequence length t: 2 per weight multiply-add (embeddings excluded) plus attention's two
// t-long dot products per head dimension (averaged over a causal sequence: t/2 keys).
// A training step costs about 3× the forward pass.
func (c LM) FLOPsPerToken(t int) float64 {
	d, m, v := float64(c.width), float64(c.mlp), float64(c.Vocab())
	weights := float64(c.layers)*(3*d*d+d*d+2*d*m) + d*v
	attn := float64(c.layers) * 2 * d * float64(t) / 2
	return 2*weights + 2*attn
}

// Validate reports every problem of the configuration at once, or nil.
func (c LM) Validate() error {
	var errs []error
	if c.tok == nil {
		errs = append(errs, errors.New("no tokenizer"))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"width", c.width}, {"layers", c.layers}, {"heads", c.heads}, {"context", c.context}, {"mlp", c.mlp}} {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d; want > 0", p.name, p.v))
		}
	}
	if c.heads > 0 && c.width%c.heads != 0 {
		errs = append(errs, fmt.Errorf("width %d is not a multiple of heads %d", c.width, c.heads))
	} else if c.heads > 0 && c.positions == RoPE && (c.width/c.heads)%2 != 0 {
		errs = append(errs, fmt.Errorf("RoPE needs an even head size; width %d / heads %d is odd", c.width, c.heads))
	}
	if c.positions != RoPE && c.positions != Learned {
		errs = append(errs, fmt.Errorf("unknown position encoding %d", c.positions))
	}
	if c.context > 0 && c.context < 8 {
		errs = append(errs, fmt.Errorf("context %d is shorter than 8 tokens", c.context))
	}
	if c.shards < 0 {
		errs = append(errs, fmt.Errorf("shards %d; want >= 0", c.shards))
	}
	if math.IsNaN(c.initStd) || c.initStd <= 0 || c.initStd > 1 {
		errs = append(errs, fmt.Errorf("init std %v; want in (0, 1]", c.initStd))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid LM: %w", errors.Join(errs...))
	}
	return nil
}

// lmJSON is the saved form of an LM configuration (the backend is a run-time choice and is not
// saved).
type lmJSON struct {
	Width     int        `json:"width"`
	Layers    int        `json:"layers"`
	Heads     int        `json:"heads"`
	Context   int        `json:"context"`
	MLP       int        `json:"mlp"`
	Seed      uint64     `json:"seed"`
	InitStd   float64    `json:"init_std"`
	Vocab     int        `json:"vocab"`
	Positions string     `json:"positions,omitempty"`
	Params    int        `json:"params"`
	Tokenizer *Tokenizer `json:"tokenizer"`
}

// MarshalJSON writes the configuration (tokenizer included, backend excluded).
func (c LM) MarshalJSON() ([]byte, error) {
	return json.Marshal(lmJSON{Width: c.width, Layers: c.layers, Heads: c.heads, Context: c.context, MLP: c.mlp,
		Seed: c.seed, InitStd: c.initStd, Vocab: c.Vocab(), Params: c.Params(), Tokenizer: c.tok, Positions: c.positions.String()})
}

// UnmarshalJSON reads a configuration written by MarshalJSON; the backend is left unset.
func (c *LM) UnmarshalJSON(b []byte) error {
	var j lmJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Tokenizer == nil {
		return errors.New("agrl: saved LM has no tokenizer")
	}
	*c = LM{tok: j.Tokenizer, width: j.Width, layers: j.Layers, heads: j.Heads, context: j.Context, mlp: j.MLP,
		seed: j.Seed, initStd: j.InitStd}
	switch j.Positions {
	case "rope":
		c.positions = RoPE
	case "learned", "": // checkpoints written before RoPE existed used learned positions
	default:
		return fmt.Errorf("agrl: saved LM has unknown position encoding %q", j.Positions)
	}
	if j.Vocab != 0 && j.Vocab != c.Vocab() {
		return fmt.Errorf("agrl: saved LM has vocabulary %d, its tokenizer %d", j.Vocab, c.Vocab())
	}
	return nil
}
