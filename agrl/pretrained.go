package agrl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
)

// PretrainedLM configures a pretrained open-weight model — a Hugging Face model directory of
// the Llama 3.x / SmolLM2, Qwen2/2.5 or Qwen3 families — as the policy of a GRPO run, trained
// through LoRA adapters (the base weights stay frozen; the KL reference is the base with the
// adapters off, so it costs no second copy) or, for small models, by full fine-tuning (Full).
// It is a value: every setter returns a copy.
//
//	g := calc.Recipe().Pretrained(agrl.Pretrained("models/Qwen3-0.6B").LoRA(16, 32))
//
// The learner (agrl.dev/agrl/learn) loads it: the model talks its own chat and tool-call format
// (agrl/chat), and the episodes it trains on are the token ids it sampled (token-in,
// token-out). The defaults are PEFT's usual choice for RL fine-tuning: rank 16, alpha 32, no
// dropout, every linear projection of every layer (q, k, v, o, gate, up, down).
type PretrainedLM struct {
	// dir is the model directory, or a hub id when hub is set.
	dir     string
	hub     bool
	rank    int
	alpha   float64
	dropout float64
	targets []string
	backend string
	// decoding is where rollouts decode (Decoding): "", "host" or "graph".
	decoding string
	micro    int
	// callGiB bounds a graph call's memory on the go backend (CallMemory), in GiB.
	callGiB float64
	system  string
	// full trains every weight instead of adapters (Full).
	full bool
	// weights is the base weights' storage on the backend (Weights): "", "float32" or
	// "bfloat16".
	weights string
	// chatFormat names the chat format (ChatFormat); "" means the model's own template's.
	chatFormat string
	// compute is the dtype of the graphs' products with the base weights (Compute): "",
	// "float32" or "bfloat16".
	compute string
}

// Pretrained names the pretrained policy's model: a model directory (config.json,
// model.safetensors or sharded weights with their index, tokenizer.json, and
// tokenizer_config.json with the chat template), or, when no such path exists, a Hugging Face
// hub id such as "Qwen/Qwen3-0.6B" (so a two-part relative path that does not exist, such as
// "models/Qwen3-0.6B" before its download, is looked up on the hub when the model loads). A relative directory is made absolute, so that a run
// records (and resumes with) the same model whatever the working directory. A hub id is
// recorded as it is and downloaded when the learner loads the model (hf.Download: once, into
// $AGRL_HUB_CACHE or the user cache directory's agrl/hub; HF_ENDPOINT and HF_TOKEN apply;
// progress on stderr), so that later loads, resumes included, read the cached copy without
// the network. Building the value contacts nothing.
func Pretrained(model string) PretrainedLM {
	p := PretrainedLM{dir: model, rank: 16, alpha: 32, targets: llm.LoRAModules(), micro: 8, callGiB: DefaultCallMemoryGiB}
	if _, err := os.Stat(model); err != nil && hf.IsHubID(model) {
		p.hub = true
		return p
	}
	if abs, err := filepath.Abs(model); err == nil && model != "" {
		p.dir = abs // recorded in config.json and checkpoints: the same model from any directory
	}
	return p
}

// modelDir is the directory whose config.json describes the model: dir itself, or for a hub
// id its cached download (ok false when it has not been downloaded yet).
func (p PretrainedLM) modelDir() (dir string, ok bool) {
	if p.hub {
		return hf.Cached(p.dir, hf.HubOptions{})
	}
	return p.dir, true
}

// LoRA sets the adapters' rank r and alpha (their output is scaled by alpha/r), and trains
// adapters (undoing Full).
func (p PretrainedLM) LoRA(rank int, alpha float64) PretrainedLM {
	p.rank, p.alpha, p.full = rank, alpha, false
	return p
}

// Full trains every weight of the model — embeddings, norms, projections, head — instead of
// LoRA adapters (full fine-tuning; LoRA undoes it). It is for small models: the learner holds
// the weights, their gradients and AdamW's two moments in float32 (16 bytes a parameter), a
// copy for the sampler, and GRPO's KL reference, which is then a frozen copy of the weights
// (a LoRA run's reference is the base with the adapters off, which costs nothing). Weight
// decay applies to the matrices, not to the norms and biases. A checkpoint holds the whole
// model as a Hugging Face model directory (config.json, model.safetensors, the tokenizer
// files), which agrl.Pretrained and transformers read. The LoRA settings (rank, alpha,
// targets, dropout) do not apply: a dropout other than 0 is a validation error.
func (p PretrainedLM) Full() PretrainedLM { p.full = true; return p }

// Targets sets the adapted projections (names from llm.LoRAModules: "q_proj", "k_proj",
// "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), kept in that order whatever order
// they are given in (a run's settings compare the same on resume); an unknown name stays,
// after them, for Validate to name.
func (p PretrainedLM) Targets(modules ...string) PretrainedLM {
	order := llm.LoRAModules()
	rank := func(m string) int {
		if i := slices.Index(order, m); i >= 0 {
			return i
		}
		return len(order)
	}
	p.targets = slices.Clone(modules)
	slices.SortStableFunc(p.targets, func(a, b string) int { return rank(a) - rank(b) })
	return p
}

// Dropout sets lora_dropout, in [0, 1) (default 0): the learner's training steps zero each
// input entry of every adapter term with this probability (a fresh mask per projection, layer,
// step, learner — warm start or GRPO — and micro-batch on the graphs or sequence in a host
// step, drawn from the run's seed, so a resumed run draws the same ones), as PEFT does in
// training mode; sampling, scoring and the reference policy apply none.
// It is saved with the adapters (PEFT reads it). With dropout the learner's log-probs are not
// the scorer's, so a step record cannot re-derive its loss (agrl inspect says so).
func (p PretrainedLM) Dropout(d float64) PretrainedLM { p.dropout = d; return p }

// Backend sets the compute backend of training and scoring ("" means the learner's default;
// "xla:cuda" on a GPU). On the go backend, with float32 products and host decoding (its
// defaults), scoring runs on the host model, as sampling does.
func (p PretrainedLM) Backend(config string) PretrainedLM { p.backend = config; return p }

// Decoding sets where rollouts run the model: "host" decodes with agrl/llm's KV cache in Go
// memory and its vector kernels (the CPU's fastest way); "graph" with the decoder's GoMLX graph
// on the backend (hfgraph.Model.Decode), the KV caches in the backend's memory — on a GPU,
// sampling then runs on the GPU too. "" (the default) means "host" on the go backend and
// "graph" on any other. The choice changes speed and memory, not what is trained: the two
// agree to float32 rounding (their log-probs to about 1e-6), so a resume may change it.
func (p PretrainedLM) Decoding(mode string) PretrainedLM { p.decoding = mode; return p }

// Weights sets the dtype the frozen base weights are kept in on the backend: "float32" (the
// default, "") or "bfloat16", which halves their memory there (a GPU's, for a 7B model 14 GB
// instead of 28). Storage only: the graphs convert the weights to float32 where they read them
// and compute in float32; host sampling reads bfloat16-rounded weights too, so sampler and
// scorer still agree. A checkpoint saved in bfloat16 (as released models are) then computes
// exactly what it computes in float32; a float32 one is rounded once, at load. It needs LoRA
// (full fine-tuning trains float32 weights), and the adapters stay float32. On the go backend
// it saves nothing (the host kernels' float32 copies stay) and costs a conversion per graph
// call; it is meant for backends with their own memory.
func (p PretrainedLM) Weights(dtype string) PretrainedLM { p.weights = dtype; return p }

// MicroBatch sets how many sequences one graph call scores or differentiates (default 8): a
// training batch is split into micro-batches whose gradients are added up before the one
// optimizer step, so memory does not grow with the group size. On the go backend (the CPU)
// it is the most a call takes: long sequences, and models with a large vocabulary, go fewer
// at a time, so that a call's estimated memory stays within CallMemory (by default 4 GiB: at
// the SmolLM2-135M shape 4 sequences of 256 positions, 2 of 512, 1 of 896); where even one
// sequence's training graph would need more, its gradients are taken segment by segment — the
// embedding, each layer, the head in chunks of positions, every backward pass recomputing its
// forward pass — at 0.6–0.8× the speed, in a fraction of the memory (one sequence of 2,048
// positions at that shape: 2.1 GB instead of 14.5; docs/llm.md).
func (p PretrainedLM) MicroBatch(n int) PretrainedLM { p.micro = n; return p }

// DefaultCallMemoryGiB is CallMemory's default.
const DefaultCallMemoryGiB = 4

// CallMemory sets the memory, in GiB, that one graph call of scoring or training may take on
// the go backend by agrl's estimate (default 4; other backends ignore it): it sets how many
// sequences a call takes (MicroBatch) and from which length one sequence trains segment by
// segment. More trains long sequences faster where the machine has the memory (the process
// peaks at about twice the live data with Go's default GOGC); less fits a smaller machine. It
// is a setting, not a measure of the machine, so a run splits its batches — and adds up its
// gradients — the same way wherever it runs; a resume may change it (like MicroBatch, it
// changes the rounding of the sums, not what is trained).
func (p PretrainedLM) CallMemory(gib float64) PretrainedLM { p.callGiB = gib; return p }

// System sets the system message of every prompt (default none: the chat format writes its
// own default, if any).
func (p PretrainedLM) System(s string) PretrainedLM { p.system = s; return p }

// ChatFormats are the names PretrainedLM.ChatFormat takes: the chat and tool-call formats of
// agrl/chat (chat.ByName), "llama3", "qwen2.5", "qwen3" and "qwen3-no-thinking" (Qwen3 with
// enable_thinking=false: the generation prompt holds an empty think block).
func ChatFormats() []string { return []string{"llama3", "qwen2.5", "qwen3", "qwen3-no-thinking"} }

// ChatFormat sets the chat and tool-call format the model talks (one of ChatFormats) instead
// of the one its chat template names. By default ("") the format is the one whose template
// tokenizer_config.json holds, byte for byte (agrl/chat is verified against the templates of
// Qwen2.5, Qwen3 and Llama 3.2 Instruct), or, without a template, the family's; an unknown
// template is then an error. Name the format such a model was tuned on: "llama3" for Llama
// 3.1 and 3.3 Instruct (whose templates differ from 3.2's only in built-in tools and the
// date), "qwen2.5" or "qwen3" for their variants; "qwen3-no-thinking" also turns Qwen3's
// reasoning off (shorter turns). It changes the token layout trained on, so a resume keeps it.
func (p PretrainedLM) ChatFormat(name string) PretrainedLM { p.chatFormat = name; return p }

// Compute sets the dtype of the graphs' matrix products with the base weights (every
// projection, in scoring, training and graph decoding): "float32" (the default, "") or
// "bfloat16", mixed precision as GPUs run it fast (an H200's dense bfloat16 matrix rate is
// about twice its TF32 one — which XLA uses for float32 products on CUDA unless the backend
// says tf32=false — by the vendor's figures): each product's inputs and result are rounded to bfloat16
// and its sums kept in float32, while the residual stream, norms, RoPE, attention, the LM
// head (logits stay float32), the LoRA adapters and the optimizer stay float32. It pairs with
// Weights("bfloat16"), which halves the weights' memory. Rollouts then decode with the graph
// by default (Decoding "" means "graph" here, on any backend). Sampler and scorer no longer
// agree to float32's 1e-4: decoding a token at a time and scoring whole sequences round
// slightly different activations, which bfloat16 turns into log-probs up to about 5e-3 apart
// (measured on the tiny Qwen3 fixture; host decoding, in float32, is further off) — the
// mismatch RL on GPUs lives with, and which GRPO's clipped ratios absorb. It changes what is
// computed, so a resume keeps it. It is meant for GPUs (its speed on the CPU's go backend is
// not measured).
func (p PretrainedLM) Compute(dtype string) PretrainedLM { p.compute = dtype; return p }

// PretrainedSpec is every setting of a PretrainedLM, for the learner.
type PretrainedSpec struct {
	// Dir is the model directory, or with Hub set a hub id, which the learner downloads
	// (hf.Download) and then loads from the cache.
	Dir        string
	Hub        bool
	LoRA       llm.LoRAConfig
	Backend    string
	Decoding   string // "", "host" or "graph" (see PretrainedLM.Decoding)
	MicroBatch int
	// CallMemoryGiB bounds a graph call's estimated memory on the go backend (CallMemory).
	CallMemoryGiB float64
	System        string
	// Full is set for full fine-tuning (every weight trained; LoRA is then unused).
	Full bool
	// Weights is the base weights' storage: "" or "float32", or "bfloat16" (PretrainedLM.Weights).
	Weights string
	// ChatFormat names the chat format (PretrainedLM.ChatFormat); "" means the template's.
	ChatFormat string
	// Compute is the products' dtype: "" or "float32", or "bfloat16" (PretrainedLM.Compute).
	Compute string
}

// Spec returns the settings.
func (p PretrainedLM) Spec() PretrainedSpec {
	return PretrainedSpec{Dir: p.dir, Hub: p.hub, Backend: p.backend, Decoding: p.decoding, MicroBatch: p.micro, CallMemoryGiB: p.callGiB, System: p.system, Full: p.full, Weights: p.weights,
		ChatFormat: p.chatFormat, Compute: p.compute, LoRA: llm.LoRAConfig{Rank: p.rank, Alpha: p.alpha, Dropout: p.dropout, TargetModules: slices.Clone(p.targets)}}
}

// Validate reports every problem at once: no directory, a directory without config.json (or
// with one of an unsupported architecture), invalid LoRA settings, micro-batch, call memory, decoding,
// weights or compute dtype, or chat format.
func (p PretrainedLM) Validate() error {
	var errs []error
	switch {
	case strings.TrimSpace(p.dir) == "":
		errs = append(errs, errors.New("no model directory"))
	default:
		// A hub id not downloaded yet is checked when the learner has downloaded it.
		if dir, ok := p.modelDir(); ok {
			if _, err := hf.LoadConfig(filepath.Join(dir, "config.json")); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					err = fmt.Errorf("%s is not a Hugging Face model directory (no config.json); download the model there first, or name it by hub id (owner/name)", dir)
				}
				errs = append(errs, err)
			}
		}
	}
	switch {
	case p.full && p.dropout != 0:
		errs = append(errs, fmt.Errorf("lora_dropout %v with full fine-tuning: dropout applies to LoRA adapters only", p.dropout))
	case !p.full:
		if err := p.Spec().LoRA.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.micro < 1 {
		errs = append(errs, fmt.Errorf("micro-batch %d; want >= 1", p.micro))
	}
	if !(p.callGiB >= 0.25 && p.callGiB <= 4096) {
		errs = append(errs, fmt.Errorf("call memory %v GiB; want 0.25 … 4096", p.callGiB))
	}
	switch p.decoding {
	case "", "host", "graph":
	default:
		errs = append(errs, fmt.Errorf("decoding %q; want \"host\", \"graph\" or \"\" (host on the go backend, graph elsewhere)", p.decoding))
	}
	switch p.weights {
	case "", "float32":
	case "bfloat16":
		if p.full {
			errs = append(errs, errors.New("bfloat16 weights with full fine-tuning: full fine-tuning trains float32 weights (bfloat16 storage is for LoRA)"))
		}
	default:
		errs = append(errs, fmt.Errorf("weights %q; want \"float32\" or \"bfloat16\"", p.weights))
	}
	switch p.compute {
	case "", "float32", "bfloat16":
	default:
		errs = append(errs, fmt.Errorf("compute %q; want \"float32\" or \"bfloat16\"", p.compute))
	}
	if p.chatFormat != "" && !slices.Contains(ChatFormats(), p.chatFormat) {
		errs = append(errs, fmt.Errorf("chat format %q; want one of %s (or \"\": the model's own template's)", p.chatFormat, strings.Join(ChatFormats(), ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid pretrained policy: %w", errors.Join(errs...))
	}
	return nil
}

// PretrainedRecord is the pretrained policy in config.json ("pretrained").
type PretrainedRecord struct {
	// Model is the model directory as given; Architecture, Layers, Hidden and Vocab are read
	// from its config.json (empty when it cannot be read).
	Model        string `json:"model"`
	Architecture string `json:"architecture,omitempty"`
	Layers       int    `json:"layers,omitempty"`
	Hidden       int    `json:"hidden,omitempty"`
	Vocab        int    `json:"vocab,omitempty"`
	// Full is set for full fine-tuning (every weight trained; the LoRA fields are then zero).
	Full bool `json:"full,omitempty"`
	// The adapters: rank, alpha, dropout and target modules.
	Rank    int      `json:"lora_rank"`
	Alpha   float64  `json:"lora_alpha"`
	Dropout float64  `json:"lora_dropout"`
	Targets []string `json:"lora_targets"`
	System  string   `json:"system,omitempty"`
	// Backend is the compute backend ("" means the learner's default); MicroBatch the
	// sequences per graph call. Neither changes what is trained, beyond rounding, except
	// under LoRA dropout: they (and CallMemoryGiB) decide where a micro-batch trains, on the
	// graphs (masks per call) or the host (masks per sequence), so a resume that changes them
	// draws other masks from then on.
	Backend    string `json:"backend"`
	Decoding   string `json:"decoding,omitempty"`
	MicroBatch int    `json:"micro_batch"`
	// CallMemoryGiB is CallMemory where it is not the default (DefaultCallMemoryGiB, recorded
	// as 0); like MicroBatch it does not change what is trained (but see Backend's note on
	// dropout).
	CallMemoryGiB float64 `json:"call_memory_gib,omitempty"`
	// Weights is the base weights' storage ("bfloat16"; empty for float32). It changes what is
	// computed for a float32 checkpoint (its weights are rounded), so a resume keeps it.
	Weights string `json:"weights,omitempty"`
	// ChatFormat is the chat format chosen by name (empty: the model's template's); it is
	// the token layout trained on, so a resume keeps it.
	ChatFormat string `json:"chat_format,omitempty"`
	// Compute is "bfloat16" when the graphs' products run in bfloat16 (PretrainedLM.Compute;
	// empty for float32); a resume keeps it.
	Compute string `json:"compute,omitempty"`
}

func (p PretrainedLM) record() *PretrainedRecord {
	r := &PretrainedRecord{Model: p.dir, Rank: p.rank, Alpha: p.alpha, Dropout: p.dropout,
		Targets: slices.Clone(p.targets), System: p.system, Backend: p.backend, Decoding: p.decoding, MicroBatch: p.micro,
		ChatFormat: p.chatFormat}
	if p.callGiB != DefaultCallMemoryGiB {
		r.CallMemoryGiB = p.callGiB
	}
	if p.weights == "bfloat16" {
		r.Weights = p.weights
	}
	if p.compute == "bfloat16" {
		r.Compute = p.compute
	}
	if p.full {
		r.Full, r.Rank, r.Alpha, r.Dropout, r.Targets = true, 0, 0, 0, nil
	}
	if dir, ok := p.modelDir(); ok {
		if c, err := hf.LoadConfig(filepath.Join(dir, "config.json")); err == nil {
			r.Architecture, r.Layers, r.Hidden, r.Vocab = c.Architecture, c.NumHiddenLayers, c.HiddenSize, c.VocabSize
		}
	}
	return r
}

// Pretrained makes the run train a pretrained model with LoRA (or, with PretrainedLM.Full,
// every weight) instead of a Tiny policy (see PretrainedLM); it replaces the policy a recipe set (and Policy replaces it). From and task
// screening do not apply to it (each is a validation error: turn screening off with Screen(0)).
// A warm start trains the adapters (or every weight, with Full) on the demonstrations written in the model's own chat
// format (the rollouts' token layout: agent.Policy.Demonstration), and GRPO's KL reference is
// then the warm-started policy; without one (WarmStartSteps(0)) the pretrained model is the
// start and the reference. The start is evaluated as the "before" of the before/after table.
func (g GRPO) Pretrained(p PretrainedLM) GRPO {
	g.s.Pretrained, g.s.LM, g.s.lmSet = &p, LM{}, false
	return g
}

// pretrainedProblems are Validate's checks of a run with a pretrained policy.
func (g GRPO) pretrainedProblems() []error {
	p := g.s.Pretrained
	if p == nil {
		return nil
	}
	var errs []error
	if err := p.Validate(); err != nil {
		errs = append(errs, err)
	}
	if g.s.From != "" {
		errs = append(errs, errors.New("From does not apply to a pretrained policy (its model directory is the start)"))
	}
	if g.s.Screen > 0 {
		errs = append(errs, errors.New("task screening (Screen) is not supported with a pretrained policy: "+
			"it scores the expert's episodes, which are written in agrl's own action format"))
	}
	if g.s.LossNorm == ConstNorm && g.s.MaxTokens == 0 {
		errs = append(errs, errors.New("dr-grpo loss normalisation needs a token budget (MaxTokens) with a pretrained policy"))
	}
	return errs
}
