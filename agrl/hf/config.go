package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
)

// A Family is a decoder architecture this package knows, named by its config.json model_type.
// The three share one layout (embeddings, pre-norm attention and SwiGLU blocks, final RMSNorm,
// LM head) and differ in a few tensors; Config.Tensors spells them out.
type Family string

const (
	// Llama is LlamaForCausalLM: Llama 3.x and SmolLM2.
	Llama Family = "llama"
	// Qwen2 is Qwen2ForCausalLM: Qwen2 and Qwen2.5, whose q, k and v projections have biases.
	Qwen2 Family = "qwen2"
	// Qwen3 is Qwen3ForCausalLM, which RMS-normalises each head of q and k (q_norm, k_norm)
	// and gives head_dim explicitly.
	Qwen3 Family = "qwen3"
)

// families maps each supported config.json architecture to its family.
var families = map[string]Family{
	"LlamaForCausalLM": Llama,
	"Qwen2ForCausalLM": Qwen2,
	"Qwen3ForCausalLM": Qwen3,
}

// Architectures lists the supported config.json architectures, sorted.
func Architectures() []string { return slices.Sorted(maps.Keys(families)) }

// The rope_type values of RopeScaling.Type this package computes (besides "", plain RoPE).
const (
	// Llama3Rope is the scaling of Llama 3.1 and later (Llama3InvFreq).
	Llama3Rope = "llama3"
	// LinearRope divides every frequency by Factor (position interpolation).
	LinearRope = "linear"
	// YarnRope is YaRN (YarnInvFreq), which Qwen2.5 and Qwen3 document for contexts past
	// their pretraining length.
	YarnRope = "yarn"
)

// RopeScaling is config.json's rope_scaling: how RoPE frequencies are stretched for contexts
// longer than pretraining's. The zero value (Type "") is plain RoPE. Fields a type does not
// use are zero.
type RopeScaling struct {
	// Type is rope_type: "" (config.json's null or "default"), Llama3Rope, LinearRope or
	// YarnRope.
	Type string
	// Factor is how much longer the target context is than the pretraining one; the low
	// frequencies (all of them, for LinearRope) are divided by it (Llama 3.1: 8, Llama 3.2:
	// 32, Qwen's YaRN: 4).
	Factor float64
	// LowFreqFactor and HighFreqFactor (llama3) bound the band of wavelengths that is
	// interpolated: wavelengths above OriginalMaxPositionEmbeddings/LowFreqFactor are scaled
	// by 1/Factor, those below OriginalMaxPositionEmbeddings/HighFreqFactor are kept (Llama 3:
	// 1 and 4).
	LowFreqFactor, HighFreqFactor float64
	// OriginalMaxPositionEmbeddings is the pretraining context (Llama 3: 8192; required for
	// llama3). For yarn, 0 means the config's max_position_embeddings, as in transformers.
	OriginalMaxPositionEmbeddings int

	// The rest is yarn's; each is optional.

	// AttentionFactor multiplies RoPE's cos and sin, so attention logits by its square. 0:
	// computed from Factor, Mscale and MscaleAllDim (YarnAttentionFactor).
	AttentionFactor float64
	// BetaFast and BetaSlow are the rotation counts over the original context that bound the
	// interpolated band (0: 32 and 1).
	BetaFast, BetaSlow float64
	// Mscale and MscaleAllDim (DeepSeek's spelling) set the default AttentionFactor when both
	// are non-zero.
	Mscale, MscaleAllDim float64
	// NoTruncate is the config's "truncate": false (gpt-oss): the band's ends are not rounded
	// out to whole dimensions.
	NoTruncate bool
}

// Config is the part of a Hugging Face config.json that fixes a supported decoder's tensors
// and arithmetic. ParseConfig fills the fields config.json may omit with transformers'
// defaults for the family.
type Config struct {
	// Architecture is the single entry of config.json's architectures ("LlamaForCausalLM").
	Architecture string
	// Family is model_type; it must agree with Architecture.
	Family Family

	VocabSize        int // vocab_size: rows of embed_tokens and lm_head
	HiddenSize       int // hidden_size: the residual stream's width
	IntermediateSize int // intermediate_size: the MLP's inner width
	NumHiddenLayers  int // num_hidden_layers
	// NumAttentionHeads is num_attention_heads, the query heads.
	NumAttentionHeads int
	// NumKeyValueHeads is num_key_value_heads (grouped-query attention); it divides
	// NumAttentionHeads. Default: NumAttentionHeads.
	NumKeyValueHeads int
	// HeadDim is head_dim. Default: HiddenSize/NumAttentionHeads (Llama, Qwen2), 128 (Qwen3).
	HeadDim int

	RMSNormEps float64 // rms_norm_eps. Default 1e-6.
	RopeTheta  float64 // rope_theta, RoPE's base. Default 10000.
	// RopeScaling is rope_scaling (zero: none).
	RopeScaling RopeScaling
	// MaxPositionEmbeddings is max_position_embeddings. Default 2048 (Llama), 32768 (Qwen).
	MaxPositionEmbeddings int

	// TieWordEmbeddings (tie_word_embeddings) makes lm_head reuse embed_tokens, so the
	// checkpoint has no lm_head.weight. Default false.
	TieWordEmbeddings bool
	// AttentionBias is attention_bias: for Llama and Qwen3, whether q, k, v and o projections
	// have biases. Qwen2 ignores it (see QKVBias). Default false.
	AttentionBias bool
	// MLPBias is Llama's mlp_bias: whether gate, up and down projections have biases. Qwen
	// MLPs never do, so it is false for them. Default false.
	MLPBias bool

	// BOSTokenID is bos_token_id, -1 when the config gives none.
	BOSTokenID int
	// EOSTokenIDs is eos_token_id as a list: config.json gives one id or several (Llama 3.1
	// Instruct ends a turn on any of three).
	EOSTokenIDs []int
	// TorchDType is torch_dtype (transformers 5: dtype), the weights' stored type, such as
	// "bfloat16"; informational.
	TorchDType string
}

// QKVBias reports whether the q, k and v projections have biases: always for Qwen2,
// AttentionBias otherwise.
func (c Config) QKVBias() bool { return c.Family == Qwen2 || c.AttentionBias }

// OutputBias reports whether o_proj has a bias: never for Qwen2, AttentionBias otherwise.
func (c Config) OutputBias() bool { return c.Family != Qwen2 && c.AttentionBias }

// rawConfig is config.json as written; pointers tell an absent (or null) field from a zero.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           *rawRope        `json:"rope_scaling"`
	RopeParameters        *rawRope        `json:"rope_parameters"` // transformers 5
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	BOSTokenID            *int            `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"` // transformers 5
	HiddenAct             string          `json:"hidden_act"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
}

// rawRope is rope_scaling, or transformers 5's rope_parameters, which also holds rope_theta.
type rawRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"` // the older spelling
	RopeTheta                     *float64 `json:"rope_theta"`
	Factor                        float64  `json:"factor"`
	LowFreqFactor                 float64  `json:"low_freq_factor"`
	HighFreqFactor                float64  `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
	AttentionFactor               *float64 `json:"attention_factor"`
	BetaFast                      float64  `json:"beta_fast"`
	BetaSlow                      float64  `json:"beta_slow"`
	Mscale                        float64  `json:"mscale"`
	MscaleAllDim                  float64  `json:"mscale_all_dim"`
	Truncate                      *bool    `json:"truncate"`
}

// LoadConfig reads and validates the config.json at path (see ParseConfig).
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("hf: %w", err)
	}
	c, err := parseConfig(data)
	if err != nil {
		return c, fmt.Errorf("hf: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config.json of a supported architecture (see Architectures), fills
// the fields it omits with transformers' defaults, and validates the result. The sizes
// (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads) are
// required; every problem found is reported, joined in one error.
func ParseConfig(data []byte) (Config, error) {
	c, err := parseConfig(data)
	if err != nil {
		return c, fmt.Errorf("hf: config.json: %w", err)
	}
	return c, nil
}

func parseConfig(data []byte) (Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return Config{}, err
	}
	var errs []error
	c := Config{BOSTokenID: -1, TorchDType: firstNonEmpty(r.TorchDType, r.DType)}

	switch len(r.Architectures) {
	case 0: // rare; model_type then names the family, and Validate reports an unknown one
		c.Architecture, _ = archOf(Family(r.ModelType))
	case 1:
		c.Architecture = r.Architectures[0]
	default:
		errs = append(errs, fmt.Errorf("architectures %q lists %d; want one", r.Architectures, len(r.Architectures)))
	}
	c.Family = Family(r.ModelType)
	if c.Family == "" {
		c.Family = families[c.Architecture]
	}

	required := func(name string, p *int) int {
		if p == nil {
			errs = append(errs, fmt.Errorf("no %s", name))
			return 0
		}
		return *p
	}
	c.VocabSize = required("vocab_size", r.VocabSize)
	c.HiddenSize = required("hidden_size", r.HiddenSize)
	c.IntermediateSize = required("intermediate_size", r.IntermediateSize)
	c.NumHiddenLayers = required("num_hidden_layers", r.NumHiddenLayers)
	c.NumAttentionHeads = required("num_attention_heads", r.NumAttentionHeads)

	c.NumKeyValueHeads = deref(r.NumKeyValueHeads, c.NumAttentionHeads)
	switch {
	case r.HeadDim != nil:
		c.HeadDim = *r.HeadDim
	case c.Family == Qwen3:
		c.HeadDim = 128 // Qwen3Config's default, not hidden/heads
	case c.NumAttentionHeads > 0:
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			errs = append(errs, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d, and no head_dim is given", c.HiddenSize, c.NumAttentionHeads))
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.RMSNormEps = deref(r.RMSNormEps, 1e-6)
	c.RopeTheta = 10000
	if r.RopeParameters != nil && r.RopeParameters.RopeTheta != nil {
		c.RopeTheta = *r.RopeParameters.RopeTheta
	}
	c.RopeTheta = deref(r.RopeTheta, c.RopeTheta)
	rope := r.RopeScaling
	if rope == nil {
		rope = r.RopeParameters
	}
	if rope != nil {
		c.RopeScaling = RopeScaling{
			Type:                          firstNonEmpty(rope.RopeType, rope.Type),
			Factor:                        rope.Factor,
			LowFreqFactor:                 rope.LowFreqFactor,
			HighFreqFactor:                rope.HighFreqFactor,
			OriginalMaxPositionEmbeddings: rope.OriginalMaxPositionEmbeddings,
			BetaFast:                      rope.BetaFast,
			BetaSlow:                      rope.BetaSlow,
			Mscale:                        rope.Mscale,
			MscaleAllDim:                  rope.MscaleAllDim,
			NoTruncate:                    rope.Truncate != nil && !*rope.Truncate,
		}
		if a := rope.AttentionFactor; a != nil {
			if *a == 0 { // the field's 0 means "computed": report it here (validate reports < 0)
				errs = append(errs, errors.New("rope_scaling: attention_factor is 0; want > 0"))
			}
			c.RopeScaling.AttentionFactor = *a
		}
		if c.RopeScaling.Type == "default" {
			c.RopeScaling = RopeScaling{}
		}
	}
	maxPos := 32768
	if c.Family == Llama {
		maxPos = 2048
	}
	c.MaxPositionEmbeddings = deref(r.MaxPositionEmbeddings, maxPos)
	c.TieWordEmbeddings = deref(r.TieWordEmbeddings, false)
	c.AttentionBias = deref(r.AttentionBias, false)
	c.MLPBias = c.Family == Llama && deref(r.MLPBias, false)
	c.BOSTokenID = deref(r.BOSTokenID, -1)

	eos, err := parseIDs(r.EOSTokenID)
	if err != nil {
		errs = append(errs, fmt.Errorf("eos_token_id: %w", err))
	}
	c.EOSTokenIDs = eos

	// The arithmetic of every supported family; a config that changes it is a different model.
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		errs = append(errs, fmt.Errorf("hidden_act %q is not supported (want silu)", r.HiddenAct))
	}
	if r.UseSlidingWindow {
		errs = append(errs, errors.New("use_sliding_window: sliding-window attention is not supported"))
	}

	errs = append(errs, c.validate()...)
	return c, errors.Join(errs...)
}

// parseIDs reads a token id given as null, one integer or a list of integers.
func parseIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("%s is neither an integer nor a list of integers", raw)
	}
	return ids, nil
}

func archOf(f Family) (string, bool) {
	for arch, fam := range families {
		if fam == f {
			return arch, true
		}
	}
	return "", false
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// firstNonEmpty returns a, or b if a is empty.
func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Validate checks c's architecture, sizes and token ids, reporting every problem in one
// error.
func (c Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return fmt.Errorf("hf: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

func (c Config) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	fam, ok := families[c.Architecture]
	switch {
	case c.Architecture == "":
		bad("no architecture (supported: %s)", strings.Join(Architectures(), ", "))
	case !ok:
		bad("unsupported architecture %q (supported: %s)", c.Architecture, strings.Join(Architectures(), ", "))
	case c.Family != fam:
		bad("model_type %q does not match architecture %s (model_type %q)", c.Family, c.Architecture, fam)
	}
	for _, s := range []struct {
		name string
		v    int
		max  int
	}{
		{"vocab_size", c.VocabSize, maxVocab},
		{"hidden_size", c.HiddenSize, maxWidth},
		{"intermediate_size", c.IntermediateSize, maxWidth},
		{"num_hidden_layers", c.NumHiddenLayers, maxLayers},
		{"num_attention_heads", c.NumAttentionHeads, maxHeads},
		{"num_key_value_heads", c.NumKeyValueHeads, maxHeads},
		{"head_dim", c.HeadDim, maxHeadDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings, maxPositions},
	} {
		switch {
		case s.v <= 0:
			bad("%s is %d; want > 0", s.name, s.v)
		case s.v > s.max:
			bad("%s is %d; want at most %d (no decoder this package reads comes near)", s.name, s.v, s.max)
		}
	}
	if c.NumAttentionHeads > 0 && c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		bad("num_key_value_heads %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim > 0 && c.HeadDim%2 != 0 {
		bad("head_dim %d is odd; RoPE rotates pairs of dimensions", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		bad("rms_norm_eps is %v; want > 0", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		bad("rope_theta is %v; want > 0", c.RopeTheta)
	}
	switch err := c.RopeScaling.validate(); {
	case err != nil:
		errs = append(errs, err)
	case c.RopeScaling.Type == YarnRope && !(c.RopeTheta > 1):
		bad("rope_theta is %v; yarn scaling needs > 1", c.RopeTheta)
	case c.RopeScaling.Type != "" && c.HeadDim > 0 && c.HeadDim <= maxRopeCheck && c.RopeTheta > 0:
		// Extreme factors can overflow or underflow what they compute.
		for i, f := range c.InvFreq() {
			if !(f > 0) || math.IsInf(f, 0) {
				bad("rope_scaling (%s) gives RoPE frequency %d the value %v (factor %v); want a positive, finite number", c.RopeScaling.Type, i, f, c.RopeScaling.Factor)
				break
			}
		}
		if a := c.RopeAttentionFactor(); !(a > 0) || math.IsInf(a, 0) {
			bad("rope_scaling (%s) gives the attention factor %v; want a positive, finite number", c.RopeScaling.Type, a)
		}
	}
	ids := c.EOSTokenIDs
	if c.BOSTokenID != -1 {
		ids = append([]int{c.BOSTokenID}, ids...)
	}
	for _, id := range ids {
		if c.VocabSize > 0 && (id < 0 || id >= c.VocabSize) {
			bad("token id %d is outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	return errs
}

// The largest sizes a config may give. Released decoders stay far below them (vocabularies up
// to about 260k, widths up to 16,384 and MLPs to 53,248, 126 layers, 128 heads of up to 256
// dimensions, contexts up to 10M). Within them a tensor's elements and the parameter count
// (under 2^61) fit an int64, so a config that claims more is refused before anything is sized
// from it; products of the count (bytes, copies) are the callers' to compute in float64.
const (
	maxVocab     = 1 << 24
	maxWidth     = 1 << 20
	maxLayers    = 4096
	maxHeads     = 4096
	maxHeadDim   = 1 << 14
	maxPositions = 1 << 30
)

// maxRopeCheck bounds the head_dim whose scaled RoPE frequencies validation computes (real
// heads are 64 to 256 wide; a config claiming more fails the tensor check anyway).
const maxRopeCheck = 1 << 16

func (s RopeScaling) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch s.Type {
	case "":
		return nil
	case Llama3Rope:
		if !(s.Factor > 0) || !finite(s.Factor) {
			bad("factor is %v; want > 0", s.Factor)
		}
		if !(s.LowFreqFactor > 0) || !finite(s.LowFreqFactor) {
			bad("low_freq_factor is %v; want > 0", s.LowFreqFactor)
		}
		if !(s.HighFreqFactor > s.LowFreqFactor) || !finite(s.HighFreqFactor) {
			bad("high_freq_factor %v is not above low_freq_factor %v", s.HighFreqFactor, s.LowFreqFactor)
		}
		if s.OriginalMaxPositionEmbeddings <= 0 {
			bad("original_max_position_embeddings is %d; want > 0", s.OriginalMaxPositionEmbeddings)
		}
	case LinearRope, YarnRope:
		// Factors below 1 would shrink the context; transformers warns about them, agrl
		// refuses them (and, for yarn, betas that invert the band).
		if !(s.Factor >= 1) || !finite(s.Factor) {
			bad("factor is %v; want ≥ 1", s.Factor)
		}
		if s.Type == LinearRope {
			break
		}
		if s.OriginalMaxPositionEmbeddings < 0 {
			bad("original_max_position_embeddings is %d; want > 0, or none for max_position_embeddings", s.OriginalMaxPositionEmbeddings)
		}
		if !(s.AttentionFactor >= 0) || !finite(s.AttentionFactor) {
			bad("attention_factor is %v; want > 0", s.AttentionFactor)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow}, {"mscale", s.Mscale}, {"mscale_all_dim", s.MscaleAllDim}} {
			if !(f.v >= 0) || !finite(f.v) {
				bad("%s is %v; want > 0 (or none for the default)", f.name, f.v)
			}
		}
		if fast, slow := s.betas(); fast < slow {
			bad("beta_fast %v is below beta_slow %v: the band of interpolated frequencies would be inverted", fast, slow)
		}
	case "dynamic":
		return fmt.Errorf(`rope_scaling: rope_type "dynamic" is not supported: its frequencies change with the length of the sequence, which a KV cache of already-rotated keys cannot follow (supported: null, "default", %q, %q, %q)`, Llama3Rope, LinearRope, YarnRope)
	default:
		return fmt.Errorf(`rope_scaling: unsupported rope_type %q (supported: null, "default", %q, %q, %q)`, s.Type, Llama3Rope, LinearRope, YarnRope)
	}
	if len(errs) > 0 {
		return fmt.Errorf("rope_scaling (%s): %w", s.Type, errors.Join(errs...))
	}
	return nil
}
