package learn

import (
	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/learn/hfgraph"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// PretrainedPolicy is a pretrained Hugging Face model (agrl.Pretrained) as a GRPO policy: the
// checkpoint's weights, frozen, plus trainable LoRA adapters — or, with agrl.PretrainedLM.Full,
// every weight trainable (see pretrained_full.go: the sampler then follows the store's weights,
// the base model and the KL reference are frozen copies, a checkpoint is a whole model
// directory). It implements Model, so the GRPO trainer, its loss, evaluation and run directory
// are the Tiny model's.
//
//   - Sampling plays the environment in the model's own chat and tool-call format through
//     agrl/llm/agent (token-in, token-out: an episode's Tokens are the prompt's ids, the ids
//     sampled and the observations' ids appended, never a re-encoded transcript), on the host
//     with agrl/llm's forward pass and the current adapters.
//   - Scoring and training run the same decoder as GoMLX graphs (agrl/learn/hfgraph) on the
//     configured backend: per-token log-probs agree with the sampler's to about 1e-6 (the
//     learner's, with LoRA dropout, are under its random masks).
//   - The KL reference is the base model (adapters off): no second copy of the weights; after
//     a warm start, the warm-started policy (the base with a frozen copy of its adapters).
//     With full fine-tuning it is a frozen copy of the weights (the model directory's, or the
//     warm start's).
//   - A checkpoint holds the adapters in PEFT's format (adapter_config.json and
//     adapter_model.safetensors, readable by PEFT and by llm.LoadAdapters), the optimizer
//     state and policy.json (with full fine-tuning, the whole model as a Hugging Face model
//     directory instead of the adapters); resuming restores both bit for bit.
//
// Make one with LoadPretrained; a GRPO run with GRPO.Pretrained makes its own.
type PretrainedPolicy struct {
	// spec's Dir is the model directory (a hub id's is its download); model names the model
	// as agrl.Pretrained was given it (a directory or a hub id), which checkpoints and the
	// adapters' base_model_name_or_path record.
	spec          agrl.PretrainedSpec
	model         string
	digest        string // hf.Fingerprint of the model directory's weights, which checkpoints record
	cfg           hf.Config
	base          *llm.Model    // the checkpoint's weights on the host, for sampling
	agent         *agent.Policy // the base model in its chat format (no adapters)
	backend       compute.Backend
	backendConfig string
	store         *model.Store
	graph         *hfgraph.Model // base + adapters, in the store
	seed          uint64         // the seed the adapters were drawn from; LoRA dropout's masks follow from it
	// warm is set for a run with a warm start: GRPO's KL reference is then the warm-started
	// policy (the base with the warm start's adapters, frozen), not the base.
	warm bool

	mu        sync.Mutex
	host      *llm.Adapters          // the adapters as the sampler reads them (nil with full fine-tuning)
	stale     bool                   // the store's trainable weights changed since the sampler's copy was made
	scoreExec map[string]*model.Exec // by view: "" (the adapters), "base", "reference"
	// full is set for full fine-tuning (agrl.PretrainedLM.Full): every base weight is
	// trainable, cur samples with the store's current weights, and the base and the reference
	// are frozen copies (frozen, by view) of their own weights. Where the store keeps float32
	// in Go memory (sharesStore) cur's model reads the store's own slices, which live holds by
	// tensor name (nil while cur's model has weights of its own); elsewhere it is a host copy
	// made after each update.
	full   bool
	cur    *agent.Policy
	live   map[string][]float32
	frozen map[string]*pretrainedFrozen
	loaded CheckpointInfo
	// optState holds the optimizer state read from a checkpoint, until a learner takes it.
	optState map[string][]float32

	// graphDecoding is set when rollouts decode with the graph on the backend
	// (agrl.PretrainedLM.Decoding); decoders holds its decoder of each view.
	graphDecoding bool
	// goBackend is set on the go backend, whose graph calls are sized by memory (callRows).
	goBackend bool
	// graphScoring makes Score use the graph where it would use the host model (tests
	// compare the two).
	graphScoring bool
	// graphTraining makes LoRA steps take the graph where they would take the host
	// (pretrained_host.go; tests compare the two, and check the graph path).
	graphTraining bool
	// checkpointTraces makes a host LoRA step checkpoint every sequence's trace, whatever
	// fits (tests and benchmarks compare the two; see hostPlan).
	checkpointTraces bool
	// segmentFrom, when positive, makes training calls of this many positions or more go
	// segment by segment (tests; see segmented).
	segmentFrom int
	decMu       sync.Mutex
	decoders    map[string]*graphDecoder
}

// GraphDecoding reports whether rollouts decode with the model's graph on the backend (the KV
// caches in its memory) rather than on the host: agrl.PretrainedLM.Decoding.
func (p *PretrainedPolicy) GraphDecoding() bool { return p.graphDecoding }

// sampler is pol set to decode with view m of the graph when the policy decodes on the
// backend, else pol itself (the host).
func (p *PretrainedPolicy) sampler(pol *agent.Policy, m *hfgraph.Model, view string) *agent.Policy {
	if !p.graphDecoding {
		return pol
	}
	p.decMu.Lock()
	defer p.decMu.Unlock()
	d := p.decoders[view]
	if d == nil {
		d = newGraphDecoder(p, m, view)
		p.decoders[view] = d
	}
	return pol.WithDecoder(d)
}

// pretrainedScope is the store scope of the model's variables.
const pretrainedScope = "/hf"

// LoadPretrained loads the model directory of p and adds fresh LoRA adapters (B zero: the
// policy starts as the pretrained model, bit for bit; A drawn from seed, as PEFT initialises
// it) — or, with p.Full(), makes every weight trainable.
func LoadPretrained(p agrl.PretrainedLM, seed uint64) (*PretrainedPolicy, error) {
	return loadPretrained(p, seed, "", nil)
}

// MustLoadPretrained is LoadPretrained for notebooks: it panics on error.
func MustLoadPretrained(p agrl.PretrainedLM, seed uint64) *PretrainedPolicy {
	pp, err := LoadPretrained(p, seed)
	if err != nil {
		panic(err)
	}
	return pp
}

// loadPretrained is LoadPretrained, resuming from the newest loadable checkpoint of ckdir when
// ckdir is not "" (warn hears about damaged checkpoints skipped).
func loadPretrained(p agrl.PretrainedLM, seed uint64, ckdir string, warn func(string)) (*PretrainedPolicy, error) {
	if err := errors.Join(p.Validate(), backendProblem(p.Spec().Backend)); err != nil {
		return nil, err
	}
	s := p.Spec()
	modelName := s.Dir
	if s.Hub {
		dir, err := fetchHub(s.Dir, s, os.Stderr)
		if err != nil {
			return nil, err
		}
		s.Dir, s.Hub = dir, false
	}
	if err := checkModelFits(s.Dir, s, usableMemory()); err != nil {
		return nil, err
	}
	var pol *agent.Policy
	if s.ChatFormat != "" {
		f, err := chat.ByName(s.ChatFormat)
		if err != nil {
			return nil, fmt.Errorf("agrl: %w", err)
		}
		pol, err = agent.LoadFormat(s.Dir, f)
		if err != nil {
			return nil, fmt.Errorf("agrl: loading %s: %w", s.Dir, err)
		}
	} else {
		var err error
		if pol, err = agent.Load(s.Dir); err != nil {
			var unknown *chat.UnknownTemplateError
			if errors.As(err, &unknown) {
				return nil, fmt.Errorf("agrl: loading %s: %w; name the format the model was tuned on with PretrainedLM.ChatFormat (agrl train -chat-format): one of %s",
					s.Dir, err, strings.Join(agrl.ChatFormats(), ", "))
			}
			return nil, fmt.Errorf("agrl: loading %s: %w", s.Dir, err)
		}
	}
	if s.System != "" {
		pol = pol.System(s.System)
	}
	dtype := dtypes.Float32
	if s.Weights == "bfloat16" {
		// The sampler reads the values the graphs read.
		dtype = dtypes.BFloat16
		m, err := bf16Rounded(pol.Model(), s.Dir)
		if err != nil {
			return nil, fmt.Errorf("agrl: %s: %w", s.Dir, err)
		}
		if m != pol.Model() {
			if pol, err = pol.WithModel(m); err != nil {
				return nil, err
			}
		}
	}
	backend, err := NewBackend(s.Backend)
	if err != nil {
		return nil, err
	}
	bc, _ := ParseBackend(s.Backend)
	pp := &PretrainedPolicy{spec: s, model: modelName, cfg: pol.Model().Config(), base: pol.Model(), agent: pol, backend: backend,
		backendConfig: bc.String(), store: model.NewStore(), scoreExec: map[string]*model.Exec{}, seed: seed,
		full: s.Full, frozen: map[string]*pretrainedFrozen{}, decoders: map[string]*graphDecoder{},
		graphDecoding: s.Decoding == "graph" || (s.Decoding == "" && (bc.Name != "go" || s.Compute == "bfloat16")),
		goBackend:     bc.Name == "go"}
	if pp.graph, err = hfgraph.FromLLMAs(pp.store, pretrainedScope, pp.base, dtype); err != nil {
		return nil, fmt.Errorf("agrl: %s: %w", s.Dir, err)
	}
	if err := pp.graph.SetCompute(pp.computeDType()); err != nil {
		return nil, err
	}
	if pp.full {
		// Every weight trains; the sampler's copy is rebuilt from the store after updates
		// (no shared buffers: the store's values change at every step).
		if err := pp.graph.TrainBase(true); err != nil {
			return nil, fmt.Errorf("agrl: %w", err)
		}
		pp.cur = pol
		// Where the backend's buffers are Go memory, the checkpoint's frozen copy in the store
		// (the base model's scores; GRPO's KL reference unless a warm start made another) is
		// made now, before anything samples, and the host model of the checkpoint shares its
		// memory instead of holding a copy of its own.
		if backend.HasSharedBuffers() {
			f, err := pp.frozenBase()
			if err != nil {
				return nil, err
			}
			g, err := f.graphOf()
			if err != nil {
				return nil, err
			}
			if err := pp.shareWeights(g, pp.base); err != nil {
				return nil, fmt.Errorf("agrl: %s: %w", s.Dir, err)
			}
		}
	} else {
		if err := pp.graph.AddLoRA(s.LoRA, seed); err != nil {
			return nil, fmt.Errorf("agrl: %w", err)
		}
		if err := pp.shareWeights(pp.graph, pp.base); err != nil {
			return nil, fmt.Errorf("agrl: %s: %w", s.Dir, err)
		}
		if pp.host, err = pp.graph.Adapters(pp.base); err != nil {
			return nil, err
		}
		pp.host.BaseModel = modelName
	}
	if pp.digest, err = hf.Fingerprint(s.Dir); err != nil {
		return nil, fmt.Errorf("agrl: %w", err)
	}
	if ckdir == "" {
		collectLoadGarbage()
		return pp, nil
	}
	if err := checkBaseDigest(ckdir, modelName, pp.digest); err != nil {
		return nil, err
	}
	what := "loading the adapters"
	if pp.full {
		what = "loading the fine-tuned weights"
	}
	info, err := loadNewest(ckdir, what, warn, func(c string) (checkpointMark, error) {
		meta, err := pp.restore(c)
		return checkpointMark{Stage: meta.Stage, Step: meta.Step, SFTStep: meta.SFTStep, Kernels: meta.Kernels}, err
	})
	if err != nil {
		return nil, err
	}
	pp.loaded = info
	collectLoadGarbage()
	return pp, nil
}

// collectLoadGarbage runs a collection once a model is loaded. Loading leaves gigabytes of
// garbage behind (the checkpoint's values decoded to float32, then copied into the backend's
// layout: 4.5 GB at the Qwen3-0.6B shape) while the heap's next collection is set by what was
// live before it, so without one the rollouts that follow take every new buffer from memory
// the process has not touched yet, and run slower until the runtime happens to collect
// (measured in docs/llm.md, "Speed": prefill, decoding and batched decoding 1.25–1.86× faster
// at that shape with it).
func collectLoadGarbage() { runtime.GC() }

// computeDType is the dtype of the graphs' products with the base weights
// (agrl.PretrainedLM.Compute).
func (p *PretrainedPolicy) computeDType() dtypes.DType {
	if p.spec.Compute == "bfloat16" {
		return dtypes.BFloat16
	}
	return dtypes.Float32
}

// fetchHub downloads hub model id (agrl.Pretrained("owner/name")) into the hub cache, unless
// it is there already, and returns its directory. Progress goes to w as plain lines (a
// notebook's output shows them as they come): each file when it starts and ends, and a large
// one's size so far every few seconds. A model whose config says it cannot fit this machine
// for s (checkModelFits) is refused before its weights are downloaded.
func fetchHub(id string, s agrl.PretrainedSpec, w io.Writer) (string, error) {
	if dir, ok := hf.Cached(id, hf.HubOptions{}); ok {
		return dir, nil
	}
	var file string // the file being reported
	var ended bool  // its end has been reported
	var last time.Time
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	var tooLarge error // checkModelFits's refusal, returned as it is
	fits := func(dir string) error { tooLarge = checkModelFits(dir, s, usableMemory()); return tooLarge }
	dir, err := hf.Download(context.Background(), id, hf.HubOptions{BeforeWeights: fits, Progress: func(name string, done, total int64) {
		switch {
		case name != file:
			file, ended, last = name, false, time.Now()
			fmt.Fprintf(w, "downloading %s: %s\n", id, name)
			if done != total {
				return
			}
		case ended || done != total && time.Since(last) < 5*time.Second:
			return
		}
		ended, last = done == total, time.Now()
		switch {
		case done == total:
			fmt.Fprintf(w, "downloading %s: %s: done, %s\n", id, name, mb(done))
		case total > 0:
			fmt.Fprintf(w, "downloading %s: %s: %s of %s\n", id, name, mb(done), mb(total))
		default:
			fmt.Fprintf(w, "downloading %s: %s: %s\n", id, name, mb(done))
		}
	}})
	if tooLarge != nil {
		return "", tooLarge
	}
	if err != nil {
		return "", fmt.Errorf("agrl: model %s: no such directory, and as a hub id: %w", id, err)
	}
	return dir, nil
}

// bf16Rounded returns m with every weight rounded to the nearest bfloat16 (ties to even), or m
// itself when every weight is a bfloat16 value already (a checkpoint saved in bfloat16).
func bf16Rounded(m *llm.Model, dir string) (*llm.Model, error) {
	w := m.WeightsView()
	round := func(v float32) float32 { return hf.BF16ToFloat32(hf.Float32ToBF16(v)) }
	exact := true
	for _, x := range w {
		for _, v := range x {
			if round(v) != v {
				exact = false
				break
			}
		}
		if !exact {
			break
		}
	}
	if exact {
		return m, nil
	}
	r := make(map[string][]float32, len(w))
	for name, x := range w {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = round(v)
		}
		r[name] = y
	}
	return llm.FromWeights(m.Config(), dir, r)
}

// shareWeights keeps one copy of the frozen base weights for the graphs and the sampler where
// the backend shares its buffers with the host (the go backend) and stores them in float32:
// each base variable moves into a shared device buffer now (freeing its host-side copy, rather
// than at the first graph call), and the sampler's model drops its own copy of each tensor for
// the store's (llm.Model.Share: the embeddings and norms as they are, the projections as the
// store's [in, out] transposes, which the host kernels multiply by directly). At the
// Qwen3-0.6B shape that is 2.4 GB of float32 less; measured in docs/llm.md ("Memory").
// g's base weights are m's (the policy's graphs and its base model, or under full fine-tuning
// the checkpoint's frozen copy and the checkpoint's host model), and must stay frozen.
func (p *PretrainedPolicy) shareWeights(g *hfgraph.Model, m *llm.Model) error {
	if !p.backend.HasSharedBuffers() {
		return nil
	}
	return p.eachSharedBase(g, func(name string, data []float32, t *tensors.Tensor) error {
		if data == nil { // bfloat16 storage is not the sampler's float32
			return nil
		}
		return m.Share(name, data, strings.HasSuffix(name, "_proj.weight"), t)
	})
}

// eachSharedBase calls f on each base variable of g, by its checkpoint name, after moving its
// value into a buffer the backend shares with the host (if it is not in one already; the
// backend must have shared buffers): data is that buffer's memory where it holds float32
// (nil for another dtype), t the tensor that owns it.
func (p *PretrainedPolicy) eachSharedBase(g *hfgraph.Model, f func(name string, data []float32, t *tensors.Tensor) error) error {
	prefix := g.Scope() + "/base/"
	for _, v := range g.BaseVariables() {
		t, err := v.Value()
		if err != nil {
			return err
		}
		if err := t.MaterializeOnDevice(p.backend, true, 0); err != nil {
			return fmt.Errorf("%s: %w", v.Path(), err)
		}
		var data []float32
		if err := t.ConstFlatData(func(flat any) { data, _ = flat.([]float32) }); err != nil {
			return fmt.Errorf("%s: %w", v.Path(), err)
		}
		if err := f(strings.TrimPrefix(v.Path(), prefix), data, t); err != nil {
			return err
		}
	}
	return nil
}

// Spec returns the policy's settings.
func (p *PretrainedPolicy) Spec() agrl.PretrainedSpec { return p.spec }

// Config returns the model's configuration (its config.json).
func (p *PretrainedPolicy) Config() hf.Config { return p.cfg }

// BackendConfig names the compute backend of scoring and training.
func (p *PretrainedPolicy) BackendConfig() string { return p.backendConfig }

// Checkpoint says which checkpoint the adapters (or fully fine-tuned weights) were restored
// from (zero for fresh ones).
func (p *PretrainedPolicy) Checkpoint() CheckpointInfo { return p.loaded }

// AdapterParams counts the adapters' parameters (0 with full fine-tuning).
func (p *PretrainedPolicy) AdapterParams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host == nil {
		return 0
	}
	return p.host.NumParams()
}

// TrainableParams counts the parameters training updates: the adapters', or with full
// fine-tuning every weight of the model.
func (p *PretrainedPolicy) TrainableParams() int {
	n := 0
	for _, v := range p.trainVars() {
		n += v.Shape().Size()
	}
	return n
}

// IsFull reports whether the policy trains every weight (agrl.PretrainedLM.Full), not adapters.
func (p *PretrainedPolicy) IsFull() bool { return p.full }

// trainVars are the variables training updates: the adapters, or every base weight.
func (p *PretrainedPolicy) trainVars() []*model.Variable {
	if p.full {
		return p.graph.BaseVariables()
	}
	return p.graph.AdapterVariables()
}

// errNoAdapters is the error of the adapter accessors under full fine-tuning.
var errNoAdapters = errors.New("agrl: this policy is fully fine-tuned (agrl.PretrainedLM.Full): it has no LoRA adapters; save the whole model with SaveMerged")

// Graph returns the GoMLX model (base weights and adapters) that scoring and training use.
func (p *PretrainedPolicy) Graph() *hfgraph.Model { return p.graph }

// Agent returns the sampling policy with the current adapters (agrl/llm/agent), or with full
// fine-tuning the current weights: a snapshot, which later training steps do not change.
//
// When the policy decodes on the backend (GraphDecoding), the agent's rollouts and Act do
// too, reading the store's current weights; its Score, TopTokens and Model are the host's.
func (p *PretrainedPolicy) Agent() (*agent.Policy, error) {
	if p.full {
		p.mu.Lock()
		defer p.mu.Unlock()
		m, err := p.ownModel()
		if err != nil {
			return nil, err
		}
		cur, err := p.cur.WithModel(m)
		if err != nil {
			return nil, err
		}
		return p.sampler(cur, p.graph, ""), nil
	}
	a, err := p.Adapters()
	if err != nil {
		return nil, err
	}
	pol, err := p.agent.Adapters(a)
	if err != nil {
		return nil, err
	}
	return p.sampler(pol, p.graph, ""), nil
}

// Adapters returns a copy of the current LoRA adapters (save them with Adapters.Save for PEFT,
// or merge them into a model directory with SaveMerged). A fully fine-tuned policy has none
// (an error).
func (p *PretrainedPolicy) Adapters() (*llm.Adapters, error) {
	if p.full {
		return nil, errNoAdapters
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.syncHost(); err != nil {
		return nil, err
	}
	return p.host.Clone(), nil
}

// SaveAdapters writes the current adapters to dir in PEFT's format.
func (p *PretrainedPolicy) SaveAdapters(dir string) error {
	a, err := p.Adapters()
	if err != nil {
		return err
	}
	return a.Save(dir)
}

// SaveMerged writes the model with the adapters merged into its weights as a Hugging Face model
// directory (config.json, safetensors, the tokenizer files), in dtype (hf.F32 reads back bit
// for bit).
//
// With full fine-tuning it writes the current weights.
func (p *PretrainedPolicy) SaveMerged(dir string, dtype hf.DType) error {
	if p.full {
		p.mu.Lock()
		defer p.mu.Unlock()
		if err := p.syncHost(); err != nil {
			return err
		}
		return p.cur.Model().Save(dir, nil, dtype)
	}
	a, err := p.Adapters()
	if err != nil {
		return err
	}
	return p.base.Save(dir, a, dtype)
}

// syncHost copies the store's adapters to the sampler's copy if they changed (p.mu held). With
// full fine-tuning it points the sampler at the store's current weights (syncLive) where the
// store keeps them in Go memory as float32 (sharesStore), and elsewhere builds a new host
// model of them: new slices, so that the host kernels' transposed copies (cached by weight)
// are made afresh and the old ones are collected with the old model.
func (p *PretrainedPolicy) syncHost() error {
	if !p.stale {
		return nil
	}
	if p.full && p.sharesStore() {
		return p.syncLive()
	}
	if p.full {
		m, err := p.storeCopy()
		if err != nil {
			return err
		}
		cur, err := p.agent.WithModel(m)
		if err != nil {
			return err
		}
		p.cur, p.stale = cur, false
		return nil
	}
	if err := p.graph.ExportAdapters(p.host); err != nil {
		return err
	}
	p.stale = false
	return nil
}

// sharesStore reports whether, under full fine-tuning, the sampler's host model reads the
// store's trainable weights themselves (syncLive): where the backend's buffers are Go memory
// (the go backend) and the store keeps float32, the sampler's layout.
func (p *PretrainedPolicy) sharesStore() bool {
	return p.full && p.backend.HasSharedBuffers() && p.graph.DType() == dtypes.Float32
}

// syncLive makes cur's model read the store's trainable weights in place (p.mu held;
// sharesStore): each variable's value is moved into a buffer the backend shares with the
// host, if it is not in one already, and the model is llm.FromStorage over those slices,
// the projections in the store's [in, out] layout. An update in place on the host
// (hostUpdate: tensors.MutableFlatData writes a shared buffer's memory itself) is then the
// sampler's at no cost, and the run holds one float32 copy of the trained weights, not two:
// nothing is made unless a variable's storage changed (a graph's update, or a checkpoint's
// weights, put new tensors in the store), which the slices' addresses tell. The model keeps
// the tensors reachable, so their memory outlives a replaced value until the model is
// dropped; cur is only read after a syncHost, so never after such a change without one.
func (p *PretrainedPolicy) syncLive() error {
	w := make(map[string][]float32, len(p.live))
	var owners []*tensors.Tensor
	same := true
	err := p.eachSharedBase(p.graph, func(name string, data []float32, t *tensors.Tensor) error {
		if len(data) != t.Shape().Size() {
			return fmt.Errorf("agrl: %s: no float32 values to sample with (%s)", name, t.Shape())
		}
		if old := p.live[name]; len(old) != len(data) || unsafe.SliceData(old) != unsafe.SliceData(data) {
			same = false
		}
		w[name] = data
		owners = append(owners, t)
		return nil
	})
	if err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	if same && len(w) == len(p.live) {
		p.stale = false
		return nil
	}
	m, err := llm.FromStorage(p.cfg, p.spec.Dir, w, owners)
	if err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	cur, err := p.agent.WithModel(m)
	if err != nil {
		return err
	}
	p.cur, p.live, p.stale = cur, w, false
	return nil
}

// ownModel is a host model of the current weights under full fine-tuning that no later
// update changes (p.mu held): cur's, unless cur reads the store in place (syncLive), then a
// copy.
func (p *PretrainedPolicy) ownModel() (*llm.Model, error) {
	if err := p.syncHost(); err != nil {
		return nil, err
	}
	if p.live == nil {
		return p.cur.Model(), nil
	}
	return p.storeCopy()
}

// storeCopy is a host model of a copy of the store's current base weights, in the store's
// layout as it is: the sampler multiplies by the [in, out] projections directly (one copy,
// no transposes; the same bits as the [out, in] weights).
func (p *PretrainedPolicy) storeCopy() (*llm.Model, error) {
	w, err := p.graph.StoredBaseWeights()
	if err != nil {
		return nil, err
	}
	return llm.FromWeightsTransposed(p.cfg, p.spec.Dir, w)
}

// current is the sampling policy the policy's own rollouts and scores use: Agent's, except
// that under full fine-tuning it is cur itself (read in place from the store where
// sharesStore), good until the next update, where Agent makes a snapshot.
func (p *PretrainedPolicy) current() (*agent.Policy, error) {
	if !p.full {
		return p.Agent()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.syncHost(); err != nil {
		return nil, err
	}
	return p.sampler(p.cur, p.graph, ""), nil
}

// Rollout plays one episode per task in the model's chat format with the current adapters
// (see agent.Policy.Rollout). opt.MaxTokens 0 means the model's context.
//
// Under full fine-tuning on the go backend it reads the store's weights in place, as Score
// does: call them between training steps, as the GRPO trainer does, not during one (a
// snapshot from Agent can run alongside training).
//
// Decoding on the backend (GraphDecoding), it reads the store's weights directly: no copy of
// the adapters or weights to the host is made.
func (p *PretrainedPolicy) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	if p.graphDecoding {
		return p.sampler(p.agent, p.graph, "").Rollout(env, tasks, opt)
	}
	pol, err := p.current()
	if err != nil {
		return nil, agrl.RolloutStats{}, err
	}
	return pol.Rollout(env, tasks, opt)
}

// Score computes per-token log-probabilities and entropies with the adapters (the contract of
// Policy.Score: entry i is about token i+1).
func (p *PretrainedPolicy) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	return p.score(seqs, temperature, "", p.graph, p.current)
}

// BaseModel returns the model with its adapters off: the pretrained model, GRPO's KL reference
// when the run has no warm start. With full fine-tuning it is a frozen copy of the
// checkpoint's weights, made on first use (its methods report a failure to make it).
func (p *PretrainedPolicy) BaseModel() Model {
	if p.full {
		return fullBase{p}
	}
	return pretrainedBase{p}
}

// pretrainedBase is the base view of a PretrainedPolicy (adapters off).
type pretrainedBase struct{ p *PretrainedPolicy }

func (b pretrainedBase) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	return b.p.sampler(b.p.agent, b.p.graph.Base(), "base").Rollout(env, tasks, opt)
}
func (b pretrainedBase) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	return b.p.score(seqs, temperature, "base", b.p.graph.Base(), hostOf(b.p.agent))
}
func (b pretrainedBase) BackendConfig() string      { return b.p.backendConfig }
func (b pretrainedBase) Checkpoint() CheckpointInfo { return CheckpointInfo{} }

// reference is GRPO's KL reference: the base model, adapters off — or, after a warm start
// (warm), the warm-started policy: the base with a frozen copy of the warm start's adapters,
// saved in dir on first use (PEFT's format) and read back from there on resume.
func (p *PretrainedPolicy) reference(dir string) (Model, error) {
	if p.full {
		return p.fullReference(dir)
	}
	if !p.warm {
		return p.BaseModel(), nil
	}
	var a *llm.Adapters
	var err error
	// The weights file is written last: a reference without it was interrupted while saving.
	if _, statErr := os.Stat(filepath.Join(dir, "adapter_model.safetensors")); statErr == nil {
		if a, err = llm.LoadAdapters(dir, p.base); err != nil {
			return nil, fmt.Errorf("agrl: the KL reference (the warm start's adapters) in %s: %w", dir, err)
		}
	} else {
		if p.loaded.Stage == StageGRPO && p.loaded.Step > 0 {
			return nil, fmt.Errorf("agrl: the KL reference (the warm start's adapters) is missing from %s, and this run resumes at GRPO step %d, whose adapters are not the warm start's: restore the directory, or resume from the warm start's checkpoint", dir, p.loaded.Step)
		}
		if a, err = p.Adapters(); err != nil {
			return nil, err
		}
		if err := a.Save(dir); err != nil {
			return nil, fmt.Errorf("agrl: saving the KL reference (the warm start's adapters): %w", err)
		}
	}
	p.mu.Lock()
	frozen, err := p.graph.Frozen("reference", a)
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("agrl: %w", err)
	}
	ag, err := p.agent.Adapters(a)
	if err != nil {
		return nil, err
	}
	return pretrainedRef{p: p, graph: frozen, agent: ag}, nil
}

// pretrainedRef is the KL reference after a warm start: the base with the warm start's
// adapters, frozen.
type pretrainedRef struct {
	p     *PretrainedPolicy
	graph *hfgraph.Model
	agent *agent.Policy
}

func (r pretrainedRef) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	return r.p.sampler(r.agent, r.graph, "reference").Rollout(env, tasks, opt)
}
func (r pretrainedRef) Score(seqs [][]int32, temperature float64) ([]TokenScores, error) {
	return r.p.score(seqs, temperature, "reference", r.graph, hostOf(r.agent))
}
func (r pretrainedRef) BackendConfig() string      { return r.p.backendConfig }
func (r pretrainedRef) Checkpoint() CheckpointInfo { return CheckpointInfo{} }

func (p *PretrainedPolicy) decode(ids []int32) string { return p.agent.Tokenizer().Decode(ids) }

// demoTokens encodes a demonstration in the model's own chat format, as its rollouts lay
// episodes out (agent.Policy.Demonstration).
func (p *PretrainedPolicy) demoTokens(tools []agrl.Tool, ep *agrl.Episode) ([]int32, []uint8, error) {
	return p.agent.Demonstration(tools, ep)
}

func (p *PretrainedPolicy) contextLen() int { return p.cfg.MaxPositionEmbeddings }

// checkSeqs validates sequences for scoring and training.
func (p *PretrainedPolicy) checkSeqs(seqs [][]int32) error {
	return checkTokenSeqs(seqs, p.cfg.VocabSize, p.cfg.MaxPositionEmbeddings)
}

// goCallBudget is the default bound (agrl.PretrainedLM.CallMemory) on the memory of one
// graph call of scoring or training on the go backend, as callRowBytes estimates it: a
// micro-batch takes fewer than MicroBatch sequences when that many of its width would need
// more (never fewer than one), and a training call whose one sequence would need more goes
// segment by segment (segmented). On the go backend the graph's tensors are the machine's
// memory, and the process's peak is about twice the live data with Go's default GOGC; with
// 4 GiB a call, a GRPO run at the SmolLM2-135M shape whose episodes are 1,004 tokens long
// peaked at 12.5 GB with whole graphs (4.1 GB segmented), where its 8 episodes in one call
// were killed at 24 GB (docs/llm.md, "Micro-batches sized by memory"). It is a setting, not a
// fraction of the machine's memory, so a run splits its batches the same way — and sums its
// gradients in the same order — on every machine. Other backends keep MicroBatch: their
// memory is the device's, sized by the user.
const goCallBudget = agrl.DefaultCallMemoryGiB << 30

// callBudget is the memory one graph call may take on the go backend: the spec's CallMemory
// (goCallBudget by default).
func (p *PretrainedPolicy) callBudget() float64 {
	if p.spec.CallMemoryGiB > 0 {
		return p.spec.CallMemoryGiB * (1 << 30)
	}
	return goCallBudget
}

// callRowBytes estimates the memory one sequence padded to width positions takes in the
// training step's graph on the go backend (the forward's tensors kept for the backward, and
// the backward's): per position, four float32 tensors of the vocabulary's width (logits,
// log-softmax, their gradients) and seven of each layer's projection widths (the hidden
// size, the queries', twice the keys', the MLP's); per layer and query head, 5.5 bytes per
// width × width attention entry (its scores and weights, not all held at once). Fitted to
// the peaks measured at the SmolLM2-135M shape (one sequence of 512, 1,024 and 2,048
// positions, four of 256) and the Qwen3-0.6B shape (one of 256 and 512), within −7% … +28%
// (docs/llm.md); scoring, without a backward pass, takes less.
func callRowBytes(cfg hf.Config, width int) float64 {
	w, L := float64(width), float64(cfg.NumHiddenLayers)
	proj := cfg.HiddenSize + cfg.NumAttentionHeads*cfg.HeadDim + 2*cfg.NumKeyValueHeads*cfg.HeadDim + cfg.IntermediateSize
	perPosition := 4 * (4*float64(cfg.VocabSize) + 7*L*float64(proj))
	return w*perPosition + 5.5*L*float64(cfg.NumAttentionHeads)*w*w
}

// callRows is how many sequences a graph call of width positions takes: MicroBatch, or on the
// go backend the most, up to MicroBatch, whose estimated memory fits callBudget (at least
// one). It depends on the width alone, so each width compiles one shape.
func (p *PretrainedPolicy) callRows(width int) int {
	if !p.goBackend {
		return p.spec.MicroBatch
	}
	return max(1, min(p.spec.MicroBatch, int(p.callBudget()/callRowBytes(p.cfg, width))))
}

// chunks splits seqs, in order, into micro-batches: each as many sequences as callRows allows
// at the width of its longest.
func (p *PretrainedPolicy) chunks(seqs [][]int32) [][2]int {
	var out [][2]int
	for i := 0; i < len(seqs); {
		j, longest := i+1, len(seqs[i])
		for j < len(seqs) {
			l := max(longest, len(seqs[j]))
			if j-i+1 > p.callRows(padLen(l, p.cfg.MaxPositionEmbeddings)) {
				break
			}
			j, longest = j+1, l
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// pad lays seqs out as a micro-batch of a padLenBuckets width, so that graphs compile for a
// few shapes only (empty rows have length 0): padRows(len(seqs), width) rows.
func (p *PretrainedPolicy) pad(seqs [][]int32) (tokens, lengths *tensors.Tensor, rows, width int, err error) {
	longest := 0
	for _, s := range seqs {
		longest = max(longest, len(s))
	}
	width = padLen(longest, p.cfg.MaxPositionEmbeddings)
	rows = p.padRows(len(seqs), width)
	if len(seqs) > rows {
		return nil, nil, 0, 0, fmt.Errorf("agrl: a micro-batch of %d sequences of width %d, more than the %d rows a call takes", len(seqs), width, rows)
	}
	padded := make([][]int32, rows)
	copy(padded, seqs)
	for i := len(seqs); i < len(padded); i++ {
		padded[i] = []int32{}
	}
	tokens, lengths, err = hfgraph.Pad(padded, width)
	return tokens, lengths, rows, width, err
}

// padRows is how many rows a call of n sequences of width positions computes: callRows(width)
// on other backends, whose graphs are compiled for the device at a cost; on the go backend,
// where a new shape costs little, n rounded up to a power of two, at most callRows(width). A
// batch's last, smaller micro-batch then computes at most as many padding rows as it has
// sequences, less one (a sequence alone, none), where callRows would fill it — up to 7 of 8
// rows of padding at MicroBatch 8. Each width compiles at most ⌈log₂ MicroBatch⌉ + 1 shapes.
// Without LoRA dropout the rows a call computes change no result beyond rounding
// (TestPadRowsSameStep); with it they change the masks drawn (dropoutState).
func (p *PretrainedPolicy) padRows(n, width int) int {
	rows := p.callRows(width)
	if p.goBackend {
		rows = min(rows, bucketBatch(n))
	}
	return rows
}

// pretrainedExecCache is the number of compiled shapes each of the pretrained policy's
// executors keeps (GoMLX refuses a shape past it, it does not evict): scoring and training
// compile up to 37 widths (padLenBuckets) × padRows' row counts (4 at MicroBatch 8, 7 at 64).
const pretrainedExecCache = 512

func (p *PretrainedPolicy) newExec(name string, fn func(scope *model.Scope, inputs []*graph.Node) []*graph.Node) (*model.Exec, error) {
	e, err := newExecOn(p.backend, p.store, name, fn)
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(pretrainedExecCache)
	return e, nil
}

// hostOf gives score a view's host sampler that is fixed (not made on demand, as the
// policy's own is: Agent).
func hostOf(a *agent.Policy) func() (*agent.Policy, error) {
	return func() (*agent.Policy, error) { return a, nil }
}

// hostScoring reports whether Score runs on the host model: on the go backend, with float32
// products, where rollouts decode on the host (the defaults there). The trainer's graph then
// computes what the host computes (float32, to rounding), and the host is 2–3× faster. With
// bfloat16 products the graph's policy is the bfloat16 model, which the reference must be
// scored as; on another backend the graph runs on the device.
func (p *PretrainedPolicy) hostScoring() bool {
	return p.goBackend && p.computeDType() == dtypes.Float32 && !p.graphDecoding && !p.graphScoring
}

// score is Score for one view of the model: m is the view's graph, host gives its host
// sampler. Where hostScoring holds the scores come from the host model, through the same
// kernels and the same log-softmax as the sampler (agent.Policy.ScoreBatch: a token the
// sampler drew scores the log-prob it recorded, bit for bit); otherwise from the graph.
func (p *PretrainedPolicy) score(seqs [][]int32, temperature float64, view string, m *hfgraph.Model, host func() (*agent.Policy, error)) ([]TokenScores, error) {
	if err := p.checkSeqs(seqs); err != nil {
		return nil, err
	}
	if p.hostScoring() {
		ag, err := host()
		if err != nil {
			return nil, err
		}
		sc, err := ag.ScoreBatch(seqs, temperature)
		if err != nil {
			return nil, fmt.Errorf("agrl: %w", err)
		}
		out := make([]TokenScores, len(seqs))
		for i, s := range sc { // agent's entry j is about token j; ours, entry j-1
			out[i] = TokenScores{LogProbs: s.LogProbs[1:], Entropy: s.Entropy[1:]}
		}
		return out, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.scoreExec[view]
	if e == nil {
		var err error
		e, err = p.newExec("score", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			logp, ent, _ := m.TokenStats(in[0], in[1], in[2])
			return []*graph.Node{logp, ent}
		})
		if err != nil {
			return nil, err
		}
		p.scoreExec[view] = e
	}
	invT := invTemperature(temperature)
	out := make([]TokenScores, len(seqs))
	// Shortest first, as a training step (byLength): like lengths share a call's width.
	order := shortestFirst(seqs)
	sorted := make([][]int32, len(seqs))
	for k, i := range order {
		sorted[k] = seqs[i]
	}
	for _, c := range p.chunks(sorted) {
		tok, lens, _, width, err := p.pad(sorted[c[0]:c[1]])
		if err != nil {
			return nil, err
		}
		res, err := call(e, tok, lens, invT)
		if err != nil {
			return nil, fmt.Errorf("agrl: Score: %w", err)
		}
		logp, ent := tensors.MustCopyFlatData[float32](res[0]), tensors.MustCopyFlatData[float32](res[1])
		for k := c[0]; k < c[1]; k++ {
			r, n := (k-c[0])*(width-1), len(sorted[k])-1
			out[order[k]] = TokenScores{LogProbs: slices.Clone(logp[r : r+n]), Entropy: slices.Clone(ent[r : r+n])}
		}
		for _, r := range res {
			_ = r.FinalizeAll()
		}
	}
	return out, nil
}

// checkFinite reports a trainable weight (an adapter's, or any with full fine-tuning) that
// holds NaN or Inf.
func (p *PretrainedPolicy) checkFinite() error {
	for _, v := range p.trainVars() {
		val, err := v.Value()
		if err != nil {
			return err
		}
		for _, x := range tensors.MustCopyFlatData[float32](val) {
			if bad(float64(x)) {
				return fmt.Errorf("weight %s holds %v", v.Path(), x)
			}
		}
	}
	return nil
}

// pretrainedTrainer takes AdamW steps on a PretrainedPolicy's trainable weights (its adapters,
// or every weight with full fine-tuning): the gradients of each
// micro-batch are added up on the host, then one update graph applies them. Its state lives in
// the policy's store under /opt/<name>.
type pretrainedTrainer struct {
	p        *PretrainedPolicy
	name     string
	opt      agrl.AdamW
	loss     LossFunc
	values   []string
	invT     float32
	dropout  bool // LoRA dropout applies: the gradient graph takes an RNG state as its last input
	gradExec *model.Exec
	updExec  *model.Exec
	metrics  []string
	once     sync.Once
	seg      *segExecs // the segment graphs (pretrained_segments.go), built on first use
	// onGrads, when set (tests), sees each step's summed gradients (trainVars order; under
	// full fine-tuning on the host the slices are valid during the call only) before
	// the update.
	onGrads func(grads [][]float32)
	// onDone, when set (onMicroBatches), is told after each micro-batch of a step (with the
	// policy locked: it must not call the policy).
	onDone func(done, total int)
	// lossExec is the loss over per-token statistics (statsLoss) of host and segmented steps,
	// ban the host steps' log-softmax's zero mask.
	lossExec *model.Exec
	ban      []float32
}

func (t *pretrainedTrainer) onMicroBatches(fn func(done, total int)) { t.onDone = fn }

func (p *PretrainedPolicy) newLearner(name string, loss LossFunc, values []string, opt agrl.AdamW, temperature float64) (learner, error) {
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("agrl: NewTrainer: %w", err)
	}
	if loss == nil || !(temperature > 0) {
		return nil, errors.New("agrl: NewTrainer: nil loss or temperature not > 0")
	}
	vals := slices.Clone(values)
	slices.Sort(vals)
	lora := p.graph.LoRA()
	t := &pretrainedTrainer{p: p, name: name, opt: opt, loss: loss, values: vals, invT: float32(1 / temperature),
		dropout: lora != nil && lora.Dropout > 0}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A checkpoint that holds some of this learner's state must hold all of it; one taken
	// before the learner existed (a warm start's, for the GRPO learner) holds none.
	mine := (name == "grpo" && p.loaded.Stage == StageGRPO && p.loaded.Step > 0) ||
		(name == "sft" && p.loaded.Stage == StageSFT && p.loaded.SFTStep > 0)
	for path := range p.optState {
		mine = mine || strings.HasPrefix(path, t.statePath()+"/")
	}
	create := func(path string, shape shapes.Shape) error {
		if p.store.GetVariable(path) != nil {
			return nil
		}
		val := tensors.FromShape(shape)
		saved, ok := p.optState[path]
		if !ok && mine {
			return fmt.Errorf("agrl: the checkpoint's optimizer state has no %s", path)
		}
		if ok {
			if len(saved) != shape.Size() {
				return fmt.Errorf("agrl: optimizer state %s has %d values for shape %s", path, len(saved), shape)
			}
			val = tensors.FromFlatDataAndDimensions(slices.Clone(saved), shape.Dimensions...)
		}
		return catch(func() error {
			v, err := p.store.CreateVariable(path, val)
			if err == nil {
				v.SetTrainable(false)
			}
			return err
		})
	}
	if err := create(t.statePath("step"), shapes.Make(dtypes.Float32)); err != nil {
		return nil, err
	}
	for _, v := range p.trainVars() {
		for _, m := range []string{"m", "v"} {
			if err := create(t.statePath(m)+v.Path(), v.Shape()); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func (t *pretrainedTrainer) statePath(parts ...string) string {
	return model.JoinPath(append([]string{optScope, t.name}, parts...)...)
}

// Steps returns the number of optimizer steps taken (restored from checkpoints).
func (t *pretrainedTrainer) Steps() int {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return t.steps()
}

func (t *pretrainedTrainer) steps() int { return stepCount(t.p.store, t.statePath("step")) }

// gradGraph: inputs tokens [B, T], lengths [B], one [B, T] per value, one scalar sum per
// value, and with LoRA dropout an RNG state; outputs the loss, the metrics and the gradient of
// every trainable variable (the adapters, or with full fine-tuning every weight).
func (t *pretrainedTrainer) gradGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	g := in[0].Graph()
	tl := in[0].Shape().Dimensions[1]
	m := t.p.graph
	if t.dropout {
		m = m.Dropout(in[len(in)-1])
	}
	logp, ent, top1, valid := m.TokenStatsTop1(in[0], in[1], graph.Const(g, t.invT))
	shift := func(x *graph.Node) *graph.Node { return graph.Slice(x, graph.AxisRange(), graph.AxisRange(1, tl)) }
	li := LossInputs{LogProbs: logp, Entropy: ent, Top1: top1, Valid: valid,
		Values: map[string]*graph.Node{}, Sums: map[string]*graph.Node{}}
	nv := len(t.values)
	for i, name := range t.values {
		li.Values[name] = shift(in[2+i])
		li.Sums[name] = in[2+nv+i]
	}
	loss, metrics := evalLoss(t.loss, li, &t.once, &t.metrics)
	out := append([]*graph.Node{loss}, metrics...)
	vars := t.p.trainVars()
	nodes := make([]*graph.Node, len(vars))
	for i, v := range vars {
		nodes[i] = v.NodeValue(g)
	}
	return append(out, graph.Gradient(loss, nodes...)...)
}

// updateGraph: inputs lr and one summed gradient per trainable variable; applies AdamW and
// returns the norm. The LoRA factors all decay alike; with full fine-tuning the matrices
// (embeddings, projections, head) decay and the norms and biases do not.
func (t *pretrainedTrainer) updateGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	store := t.p.store
	vars := t.p.trainVars()
	params := make([]adamParam, len(vars))
	for i, v := range vars {
		params[i] = adamParam{w: v, grad: in[1+i], decay: !t.p.full || v.Shape().Rank() >= 2,
			m: store.GetVariable(t.statePath("m") + v.Path()), v: store.GetVariable(t.statePath("v") + v.Path())}
	}
	return []*graph.Node{adamW(t.opt.Spec(), in[0], store.GetVariable(t.statePath("step")), params)}
}

// Step takes one optimizer step on the batch: gradients micro-batch by micro-batch, added up,
// then one AdamW update of the adapters (or of every weight, with full fine-tuning).
func (t *pretrainedTrainer) Step(b TrainBatch) (agrl.StepStats, error) {
	start := time.Now()
	p := t.p
	if err := p.checkSeqs(b.Tokens); err != nil {
		return agrl.StepStats{}, err
	}
	for _, name := range t.values {
		vs, ok := b.Values[name]
		if !ok || len(vs) != len(b.Tokens) {
			return agrl.StepStats{}, fmt.Errorf("agrl: train batch: value %q missing or with %d rows for %d sequences", name, len(vs), len(b.Tokens))
		}
		for i := range vs {
			if len(vs[i]) != len(b.Tokens[i]) {
				return agrl.StepStats{}, fmt.Errorf("agrl: train batch: value %q row %d has %d entries for %d tokens", name, i, len(vs[i]), len(b.Tokens[i]))
			}
		}
	}
	// Whole-batch sums over the real target tokens (positions 1..n-1), as LossInputs.Sums.
	sums := make([]float32, len(t.values))
	n := 0
	for i, s := range b.Tokens {
		n += len(s) - 1
		for k, name := range t.values {
			for _, v := range b.Values[name][i][1:] {
				sums[k] += v
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if t.gradExec == nil {
		if t.gradExec, err = p.newExec("pretrained-grad", t.gradGraph); err != nil {
			return agrl.StepStats{}, err
		}
	}
	vars := p.trainVars()
	grads := make([][]float32, len(vars))
	add := func(i int, g []float32) { // sums variable i's gradients, in call order
		if grads[i] == nil {
			grads[i] = g
			return
		}
		for j, x := range g {
			grads[i][j] += x
		}
	}
	var st agrl.StepStats
	step := t.steps() + 1
	b = byLength(b, t.values)
	var hostModel *llm.Model
	var sumsOnHost hostSums // the gradients of a host step
	if t.hostTraining() {
		if hostModel, err = p.hostModel(); err != nil {
			return agrl.StepStats{}, err
		}
		if p.full {
			sumsOnHost.weights = hostModel.NewWeightGrads(true)
			defer sumsOnHost.weights.Release() // the next step's, from the pool: nothing keeps them past this step
		} else {
			sumsOnHost.adapters = p.host.NewGradients()
		}
	}
	// On the host without dropout, the sequences that share a prompt train one after another,
	// the prompt traced once for them (pretrained_share.go); dropout draws each sequence's
	// masks, so none is shared.
	var chunks [][2]int
	var shares []hostShare // with sharing, how each micro-batch shares its group's prefix
	if hostModel != nil && !t.dropout && hostSharing {
		b, chunks, shares = p.shareChunks(hostModel, b, t.values)
	} else {
		chunks = p.chunks(b.Tokens)
	}
	var pre *hostPrefix  // the prefix of the group whose micro-batches are running
	groupFinite := false // whether every loss of that group was finite (then the prefix's backward pass runs)
	for ci, c := range chunks {
		seqs := b.Tokens[c[0]:c[1]]
		var sh hostShare
		if shares != nil {
			sh = shares[ci]
		}
		var units []hostUnit
		onHost := false
		if hostModel != nil {
			units, onHost = p.hostPlan(hostModel, seqs, sh.prefix, sh.held)
		}
		if sh.prefix > 0 {
			if !onHost { // shareChunks planned it
				return agrl.StepStats{}, fmt.Errorf("agrl: train step: micro-batch %d does not fit beside its prompt's trace", ci+1)
			}
			if pre == nil {
				if pre, err = t.tracePrefix(hostModel, seqs[0][:sh.prefix], sh.opts); err != nil {
					return agrl.StepStats{}, fmt.Errorf("agrl: train step: %w", err)
				}
				groupFinite = true
			}
		}
		var tok, lens *tensors.Tensor
		var rows, width int
		if onHost { // the loss's shapes: a padLenBuckets width, rows a power of two
			longest := 0
			for _, s := range seqs {
				longest = max(longest, len(s))
			}
			width, rows = padLen(longest, p.cfg.MaxPositionEmbeddings), bucketBatch(len(seqs))
		} else if tok, lens, rows, width, err = p.pad(seqs); err != nil {
			return agrl.StepStats{}, err
		}
		var vals []*tensors.Tensor
		for _, name := range t.values {
			flat := make([]float32, rows*width)
			for i, row := range b.Values[name][c[0]:c[1]] {
				copy(flat[i*width:], row)
			}
			vals = append(vals, tensors.FromFlatDataAndDimensions(flat, rows, width))
		}
		var loss float64
		var metrics []float64
		var rng *tensors.Tensor // the graphs' dropout masks' state
		if t.dropout && !onHost {
			if rng, err = dropoutState(p.seed, t.name, step, ci); err != nil {
				return agrl.StepStats{}, err
			}
		}
		if onHost {
			if t.dropout { // no sharing: each sequence traced whole, with its masks
				for k := range units {
					i := units[k].seq
					units[k].opts.Dropout, units[k].opts.Seed = p.graph.LoRA().Dropout, dropoutSeed(p.seed, t.name, step, c[0]+i)
				}
			}
			var after *hostPrefix
			if sh.prefix > 0 {
				after = pre
			}
			loss, metrics, err = t.hostGrads(hostModel, seqs, units, after, rows, width, vals, sums, sumsOnHost)
			if err == nil && sh.prefix > 0 {
				groupFinite = groupFinite && finite(loss)
				if sh.last {
					if groupFinite {
						err = t.prefixBackward(hostModel, pre, sumsOnHost)
					}
					pre = nil
				}
			}
		} else if p.segmented(width) {
			loss, metrics, err = t.segmentedGrads(tok, lens, rows, width, vals, sums, rng, add)
		} else {
			loss, metrics, err = t.wholeGrads(tok, lens, vals, sums, rng, add)
		}
		if err != nil {
			return agrl.StepStats{}, err
		}
		st.Loss += loss
		if len(t.metrics) > 0 && st.Metrics == nil {
			st.Metrics = map[string]float64{}
		}
		for i, k := range t.metrics {
			st.Metrics[k] += metrics[i]
		}
		if t.onDone != nil {
			t.onDone(ci+1, len(chunks))
		}
	}
	lr := t.opt.LearningRate(step)
	st.Step, st.LR, st.Tokens = step, lr, n
	st.GradNorm = math.NaN()
	if !finite(st.Loss) {
		st.Seconds = time.Since(start).Seconds()
		return st, fmt.Errorf("agrl: train step %d: loss %v", step, st.Loss)
	}
	if hostModel != nil {
		if err := t.storeGrads(sumsOnHost, add); err != nil {
			return st, err
		}
	}
	for i, v := range vars {
		if len(grads[i]) != v.Shape().Size() {
			return st, fmt.Errorf("agrl: train step %d: %d gradient values for %s", step, len(grads[i]), v.Path())
		}
	}
	if t.onGrads != nil {
		t.onGrads(grads)
	}
	if hostModel != nil { // the gradients were the host's: so is the update (hostUpdate)
		if st.GradNorm, err = t.hostUpdate(grads, lr); err != nil {
			return agrl.StepStats{}, fmt.Errorf("agrl: train step update: %w", err)
		}
	} else if st.GradNorm, err = t.graphUpdate(grads, lr); err != nil {
		return agrl.StepStats{}, err
	}
	p.stale = true
	st.Seconds = time.Since(start).Seconds()
	if math.IsNaN(st.GradNorm) || math.IsInf(st.GradNorm, 0) {
		return st, fmt.Errorf("agrl: train step %d: grad norm %v", step, st.GradNorm)
	}
	return st, nil
}

// graphUpdate applies the AdamW step of updateGraph to the summed gradients (trainVars
// order) and returns the global gradient norm before clipping. The caller holds p.mu.
func (t *pretrainedTrainer) graphUpdate(grads [][]float32, lr float64) (float64, error) {
	if t.updExec == nil {
		var err error
		if t.updExec, err = t.p.newExec("pretrained-update", t.updateGraph); err != nil {
			return 0, err
		}
	}
	args := []any{float32(lr)}
	for i, v := range t.p.trainVars() {
		args = append(args, tensors.FromFlatDataAndDimensions(grads[i], v.Shape().Dimensions...))
	}
	res, err := call(t.updExec, args...)
	if err != nil {
		return 0, fmt.Errorf("agrl: train step update: %w", err)
	}
	return float64(tensors.MustCopyFlatData[float32](res[0])[0]), nil
}

// byLength is b's sequences (and names' values) shortest first, in their order where lengths
// tie, so that micro-batches group sequences of like length and pad them to narrower widths:
// a step's loss and gradients are sums over its sequences, which the order changes only by
// rounding (TestPadRowsSameStep), and a batch whose sequences come in another order trains
// the same, bit for bit, unless sequences of equal length swap places (with LoRA dropout
// they then swap masks too).
func byLength(b TrainBatch, names []string) TrainBatch {
	return reorder(b, shortestFirst(b.Tokens), names)
}

// reorder is b's sequences and values in order: order[k] is the sequence put at k.
func reorder(b TrainBatch, order []int, names []string) TrainBatch {
	out := TrainBatch{Tokens: make([][]int32, len(order)), Values: map[string][][]float32{}}
	for _, name := range names {
		out.Values[name] = make([][]float32, len(order))
	}
	for k, i := range order {
		out.Tokens[k] = b.Tokens[i]
		for _, name := range names {
			out.Values[name][k] = b.Values[name][i]
		}
	}
	return out
}

// shortestFirst is the indices of seqs ordered by length, shortest first, in their order
// where lengths tie.
func shortestFirst(seqs [][]int32) []int { return lengthOrder(seqs, 1) }

// wholeGrads is one micro-batch's gradient call through the whole graph (gradGraph): it
// returns the loss and the metrics (t.metrics order) and adds each trainable variable's
// gradient into grads through add (trainVars order).
func (t *pretrainedTrainer) wholeGrads(tok, lens *tensors.Tensor, vals []*tensors.Tensor, sums []float32, rng *tensors.Tensor, add func(i int, g []float32)) (float64, []float64, error) {
	args := []any{tok, lens}
	for _, v := range vals {
		args = append(args, v)
	}
	for _, s := range sums {
		args = append(args, s)
	}
	if rng != nil {
		args = append(args, rng)
	}
	outs, err := call(t.gradExec, args...)
	if err != nil {
		return 0, nil, fmt.Errorf("agrl: train step gradients: %w", err)
	}
	defer func() {
		for _, o := range outs {
			_ = o.FinalizeAll()
		}
	}()
	loss := float64(tensors.MustCopyFlatData[float32](outs[0])[0])
	metrics := make([]float64, len(t.metrics))
	for i := range t.metrics {
		metrics[i] = float64(tensors.MustCopyFlatData[float32](outs[1+i])[0])
	}
	for i, o := range outs[1+len(t.metrics):] {
		add(i, tensors.MustCopyFlatData[float32](o))
	}
	return loss, metrics, nil
}

// dropoutState is the RNG state LoRA dropout draws its masks from on the graphs in micro-batch
// chunk of optimizer step step of the learner named name ("sft", "grpo"): a function of the
// adapters' seed, the learner, the step and the chunk alone (dropoutSeed), so a resumed run
// draws the masks an uninterrupted one draws, and the warm start's steps others than GRPO's.
// The masks are drawn over the call's whole [rows, width, …] tensors, so which mask a
// sequence gets also depends on how its batch is cut (byLength, chunks, padRows): the same
// every time for the same batch and settings. (A host step draws each sequence's own,
// dropoutSeed of its place in the batch: pretrained_host.go.)
func dropoutState(seed uint64, name string, step, chunk int) (*tensors.Tensor, error) {
	return graph.RNGStateFromSeed(int64(dropoutSeed(seed, name, step, chunk) >> 1))
}

// dropoutSeed hashes the adapters' seed, the learner's name, the step and k (a chunk or a
// sequence) into the seed of LoRA dropout's masks.
func dropoutSeed(seed uint64, name string, step, k int) uint64 {
	x := seed ^ 0x6c6f72612e64726f // "lora.dro"
	for i := 0; i < len(name); i++ {
		x = (x ^ uint64(name[i])) * 0x100000001b3
	}
	for _, v := range []uint64{uint64(step), uint64(k)} {
		x = (x ^ v) * 0x9e3779b97f4a7c15
		x ^= x >> 31
	}
	return x
}

// Checkpoints of a pretrained policy: policy.json (kind "pretrained"), the adapters in PEFT's
// format (with full fine-tuning, the whole model as a Hugging Face model directory) and
// optimizer.safetensors (every variable under /opt, by store path).
const (
	kindPretrained = "pretrained"
	optimizerFile  = "optimizer.safetensors"
)

// pretrainedJSON is policy.json of a pretrained policy's checkpoint.
type pretrainedJSON struct {
	Format int       `json:"format"`
	Kind   string    `json:"kind"`
	Model  string    `json:"model"`
	Arch   string    `json:"architecture"`
	Saved  time.Time `json:"saved"`
	Rank   int       `json:"lora_rank"`
	Alpha  float64   `json:"lora_alpha"`
	// Dropout, System and MicroBatch: the PretrainedLM settings, so that the checkpoint alone
	// rebuilds the policy (LoadModel).
	Dropout    float64 `json:"lora_dropout"`
	System     string  `json:"system,omitempty"`
	MicroBatch int     `json:"micro_batch"`
	// CallMemoryGiB is agrl.PretrainedLM.CallMemory (absent from checkpoints written before
	// the setting: the default).
	CallMemoryGiB float64 `json:"call_memory_gib,omitempty"`
	// Targets are the adapted modules, in llm.LoRAModules order.
	Targets []string `json:"lora_targets"`
	Stage   string   `json:"stage,omitempty"`
	Step    int      `json:"step,omitempty"`
	SFTStep int      `json:"sft_step,omitempty"`
	// Kernels is the kernel set of the process that saved it (Kernels).
	Kernels string `json:"kernels,omitempty"`
	// Full is set for full fine-tuning: the checkpoint holds the whole model (config.json,
	// model.safetensors, the tokenizer files) instead of adapters, and the LoRA fields are zero.
	Full bool `json:"full,omitempty"`
	// Weights is "bfloat16" when the base weights were kept so (agrl.PretrainedLM.Weights): the
	// model the adapters were trained on.
	Weights string `json:"weights,omitempty"`
	// ChatFormat is the chat format chosen by name (agrl.PretrainedLM.ChatFormat; empty: the
	// model's template's).
	ChatFormat string `json:"chat_format,omitempty"`
	// Compute is "bfloat16" when the graphs' products ran in bfloat16
	// (agrl.PretrainedLM.Compute).
	Compute string `json:"compute,omitempty"`
	// WeightsDigest is hf.Fingerprint of the model directory's weights when the checkpoint
	// was written (absent from checkpoints written before it was recorded).
	WeightsDigest string `json:"weights_digest,omitempty"`
}

// checkBaseDigest returns an error when the newest checkpoint in ckdir that records the base
// weights' digest recorded another one than digest, the model directory's now: its adapters
// (or its reference, under full fine-tuning) belong to weights the directory no longer holds.
func checkBaseDigest(ckdir, model, digest string) error {
	for _, c := range Checkpoints(ckdir) {
		var meta pretrainedJSON
		b, err := os.ReadFile(filepath.Join(c, policyFile))
		if err != nil || json.Unmarshal(b, &meta) != nil || meta.WeightsDigest == "" {
			continue
		}
		if meta.WeightsDigest != digest {
			return fmt.Errorf("agrl: %s holds other weights than the run trained on (weights digest %s now, %s at %s; "+
				"re-saving the same weights in other files changes it too): the checkpoints belong to the files it held then; put them back, or train a new run on these",
				model, digest, meta.WeightsDigest, filepath.Base(c))
		}
		return nil
	}
	return nil
}

// Save writes the adapters (with full fine-tuning, the whole model as a Hugging Face model
// directory) and the optimizer state as a new checkpoint in dir, atomically,
// keeping the two newest and the warm start's (see Policy.Save for the layout of a checkpoint
// directory).
func (p *PretrainedPolicy) Save(dir string) (string, error) {
	return p.saveMarked(dir, checkpointMark{Stage: p.loaded.Stage, Step: p.loaded.Step, SFTStep: p.loaded.SFTStep})
}

// kernels is what the model's checkpoints record as Kernels: this process's set where its sums
// run on this CPU's kernels (the go backend, or decoding on the host), else "".
func (p *PretrainedPolicy) kernels() string {
	if p.goBackend || !p.graphDecoding {
		return Kernels()
	}
	return ""
}

func (p *PretrainedPolicy) saveMarked(dir string, mark checkpointMark) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.syncHost(); err != nil {
		return "", err
	}
	meta := pretrainedJSON{Format: policyFormat, Kind: kindPretrained, Model: p.model, Arch: p.cfg.Architecture,
		Saved: time.Now().UTC(), System: p.spec.System, MicroBatch: p.spec.MicroBatch,
		CallMemoryGiB: p.spec.CallMemoryGiB,
		Stage:         mark.Stage, Step: mark.Step, SFTStep: mark.SFTStep, Full: p.full, ChatFormat: p.spec.ChatFormat,
		WeightsDigest: p.digest}
	meta.Kernels = p.kernels()
	if p.spec.Compute == "bfloat16" {
		meta.Compute = p.spec.Compute
	}
	if p.graph.DType() == dtypes.BFloat16 {
		meta.Weights = "bfloat16"
	}
	if lora := p.graph.LoRA(); lora != nil {
		meta.Rank, meta.Alpha, meta.Targets, meta.Dropout = lora.Rank, lora.Alpha, lora.TargetModules, lora.Dropout
	}
	return commitCheckpoint(dir, func(tmp string) error {
		b, err := json.MarshalIndent(meta, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileSync(filepath.Join(tmp, policyFile), b); err != nil {
			return err
		}
		if p.full {
			if err := p.cur.Model().Save(tmp, nil, hf.F32); err != nil {
				return err
			}
		} else if err := p.host.Save(tmp); err != nil {
			return err
		}
		opt := map[string]hf.Tensor{}
		for name, data := range p.optState { // restored, not yet taken by a learner
			if p.store.GetVariable(name) == nil {
				opt[name] = hf.F32Tensor(data, len(data))
			}
		}
		for v := range p.store.IterVariables() {
			if len(v.Path()) <= len(optScope) || v.Path()[:len(optScope)+1] != optScope+"/" {
				continue
			}
			val, err := v.Value()
			if err != nil {
				return err
			}
			data := tensors.MustCopyFlatData[float32](val)
			dims := v.Shape().Dimensions
			if len(dims) == 0 {
				dims = []int{1}
			}
			opt[v.Path()] = hf.F32Tensor(data, dims...)
		}
		return hf.WriteFile(filepath.Join(tmp, optimizerFile), opt, map[string]string{"format": "agrl-optimizer"})
	})
}

// restore reads a checkpoint written by saveMarked into p: the adapters (or with full
// fine-tuning the weights) into the store and the sampler's copy, the optimizer state for the
// learner to take.
func (p *PretrainedPolicy) restore(ckdir string) (pretrainedJSON, error) {
	var meta pretrainedJSON
	b, err := os.ReadFile(filepath.Join(ckdir, policyFile))
	if err != nil {
		return meta, err
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, fmt.Errorf("reading %s: %w", policyFile, err)
	}
	if meta.Kind != kindPretrained {
		return meta, errors.New("a checkpoint of a Tiny policy, not of a pretrained one")
	}
	if meta.Format != policyFormat {
		return meta, fmt.Errorf("format %d; this build reads %d", meta.Format, policyFormat)
	}
	if err := p.checkKind(meta.Full); err != nil {
		return meta, err
	}
	var a *llm.Adapters
	if p.full {
		if err := p.restoreFull(ckdir); err != nil {
			return meta, err
		}
	} else {
		if a, err = llm.LoadAdapters(ckdir, p.base); err != nil {
			return meta, err
		}
		if err := p.graph.SetAdapters(a); err != nil {
			return meta, err
		}
		a.BaseModel = p.model
	}
	f, err := hf.Open(filepath.Join(ckdir, optimizerFile))
	if err != nil {
		return meta, err
	}
	defer f.Close()
	state := map[string][]float32{}
	for _, name := range f.Names() {
		v, err := f.Float32s(name)
		if err != nil {
			return meta, err
		}
		for _, x := range v {
			if bad(float64(x)) {
				return meta, fmt.Errorf("%s: optimizer state %s holds %v", optimizerFile, name, x)
			}
		}
		state[name] = v
	}
	if !p.full {
		p.host, p.stale = a, false
	}
	p.optState = state // (with full fine-tuning the host model stays stale: restoreFull)
	return meta, nil
}

// LoadModel restores the newest loadable checkpoint in dir, of a Tiny policy (LoadPolicy) or of
// a pretrained one (its policy.json names the model directory and the adapters' settings, or
// full fine-tuning; the
// model directory must still be where it was), on the given backend ("" means the default,
// or for a pretrained policy the one it was trained on).
func LoadModel(dir, backend string) (Model, error) {
	cands := Checkpoints(dir)
	if len(cands) == 0 {
		return nil, fmt.Errorf("agrl: LoadModel: no checkpoint in %s", dir)
	}
	// The kind from the newest readable policy.json: a damaged newest checkpoint still falls
	// back to an older one of the same kind.
	var meta pretrainedJSON
	for _, c := range cands {
		b, err := os.ReadFile(filepath.Join(c, policyFile))
		if err == nil && json.Unmarshal(b, &meta) == nil {
			break
		}
	}
	if meta.Kind != kindPretrained {
		return LoadPolicy(dir, backend)
	}
	spec := agrl.Pretrained(meta.Model).LoRA(meta.Rank, meta.Alpha).Targets(meta.Targets...).Dropout(meta.Dropout).
		System(meta.System).Backend(backend).Weights(meta.Weights).ChatFormat(meta.ChatFormat).Compute(meta.Compute)
	if meta.Full {
		spec = agrl.Pretrained(meta.Model).Full().System(meta.System).Backend(backend).ChatFormat(meta.ChatFormat).Compute(meta.Compute)
	}
	if meta.MicroBatch > 0 {
		spec = spec.MicroBatch(meta.MicroBatch)
	}
	if meta.CallMemoryGiB > 0 {
		spec = spec.CallMemory(meta.CallMemoryGiB)
	}
	return loadPretrained(spec, 0, dir, func(msg string) { fmt.Fprintln(os.Stderr, "agrl: "+msg) })
}
