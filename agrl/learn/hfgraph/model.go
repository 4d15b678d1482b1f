package hfgraph

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// DefaultScope is the store scope Load and FromLLM put a model's variables under when they are
// given the scope "".
const DefaultScope = "/hf"

// A Model is a decoder's weights as variables of a GoMLX model.Store, and the builders of its
// graphs (TokenStats, Logits). The base weights are frozen (not trainable) unless TrainBase
// makes them trainable (full fine-tuning); LoRA adapters, once added (AddLoRA, SetAdapters),
// are trainable. Base returns the same model without the adapter
// term, sharing every variable: GRPO's reference policy.
//
// A Model is not safe for concurrent use while adapters are being added or exported; building
// graphs concurrently is safe.
type Model struct {
	*state
	// base is set on the view Base returns: its graphs leave the adapters out.
	base bool
	// rng is set on the view Dropout returns: the RNG state its graph draws LoRA dropout masks
	// from (graph.RNGStateShape).
	rng *graph.Node
	// frozen is set on the views Frozen returns: the scope (under the model's) of the frozen
	// adapter copies their graphs use.
	frozen string
}

// state is what a model and its Base view share.
type state struct {
	cfg     hf.Config
	store   *model.Store
	scope   string
	invFreq []float64
	// ropeScale multiplies RoPE's cos and sin (1 but under YaRN).
	ropeScale float64
	// lora is the adapters' configuration (TargetModules in llm.LoRAModules order), nil
	// without adapters.
	lora *llm.LoRAConfig
	// dtype is the base weights' storage: dtypes.Float32, or dtypes.BFloat16 (LoadAs).
	dtype dtypes.DType
	// compute is the dtype of the projections' products (SetCompute):
	// dtypes.Float32, or dtypes.BFloat16 (inputs and results rounded, float32 sums).
	compute dtypes.DType
}

// Load reads the Hugging Face checkpoint in dir (config.json and model.safetensors, or the
// index and its shards) into new variables of store under scope ("" means DefaultScope). The
// checkpoint must hold exactly the tensors its config implies (hf.Config.Check), as F32, F16 or
// BF16, none NaN or infinite; they are converted to float32 exactly. Every variable is frozen
// (Trainable false). The scope must not hold a model already.
//
// Variables are named scope + "/base/" + the checkpoint's tensor name. Projection weights
// (q/k/v/o_proj, gate/up/down_proj) are stored transposed, [in, out], so that x·W contracts
// W's first axis (the go backend's fast matmul layout); embed_tokens and lm_head keep
// [vocab, hidden], biases and norm weights their shape. With tied embeddings there is no
// lm_head variable: the head reads embed_tokens.
func Load(store *model.Store, scope, dir string) (*Model, error) {
	return LoadAs(store, scope, dir, dtypes.Float32)
}

// LoadAs is Load with the base weights stored as dtype: dtypes.Float32 (Load), or
// dtypes.BFloat16, which halves their memory on the backend. Storage only: every graph converts
// the weights to float32 where it reads them and computes in float32, so a model stored in
// bfloat16 computes exactly what the float32 model of its bfloat16-rounded weights computes
// (nearest, ties to even, hf.Float32ToBF16) — for a checkpoint saved in bfloat16, as released
// models are, exactly what Load's model computes. The adapters stay float32, and bfloat16
// weights cannot be trained (TrainBase refuses).
func LoadAs(store *model.Store, scope, dir string, dtype dtypes.DType) (*Model, error) {
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("hfgraph: %w", err)
	}
	ck, err := hf.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("hfgraph: %w", err)
	}
	defer ck.Close()
	if err := cfg.Check(ck); err != nil {
		return nil, fmt.Errorf("hfgraph: %s: %w", dir, err)
	}
	return fromTensors(store, scope, cfg, dir, dtype, ck.Float32s)
}

// fromTensors creates the base variables of cfg's model in store under scope, reading each
// tensor of cfg.Tensors() with get; where names the source in errors.
func fromTensors(store *model.Store, scope string, cfg hf.Config, where string, dtype dtypes.DType, get func(name string) ([]float32, error)) (*Model, error) {
	if store == nil {
		return nil, errors.New("hfgraph: nil store")
	}
	if dtype != dtypes.Float32 && dtype != dtypes.BFloat16 {
		return nil, fmt.Errorf("hfgraph: weights stored as %s: want Float32 or BFloat16", dtype)
	}
	scope = cleanScope(scope)
	for v := range store.IterVariables() {
		if strings.HasPrefix(v.Path(), scope+"/base/") || strings.HasPrefix(v.Path(), scope+"/lora/") {
			return nil, fmt.Errorf("hfgraph: the store already holds a model under %s (%s)", scope, v.Path())
		}
	}
	m := &Model{state: &state{cfg: cfg, store: store, scope: scope, invFreq: cfg.InvFreq(), ropeScale: cfg.RopeAttentionFactor(), dtype: dtype,
		compute: dtypes.Float32}}
	for _, spec := range cfg.Tensors() {
		w, err := get(spec.Name)
		if err != nil {
			return nil, fmt.Errorf("hfgraph: %s: %w", where, err)
		}
		for i, v := range w {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("hfgraph: %s: tensor %s: element %d is %v", where, spec.Name, i, v)
			}
		}
		dims := spec.Shape
		if isProjection(spec.Name) { // [out, in] -> [in, out], written into the tensor's storage
			if err := m.createTransposed(m.basePath(spec.Name), w, dims[0], dims[1]); err != nil {
				return nil, err
			}
			continue
		}
		if err := m.createBase(m.basePath(spec.Name), w, dims); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// MustLoad is Load for notebooks: it panics on error.
func MustLoad(store *model.Store, scope, dir string) *Model {
	m, err := Load(store, scope, dir)
	if err != nil {
		panic(err)
	}
	return m
}

// FromLLM puts the weights of an agrl/llm model into new variables of store under scope, as
// Load does for a checkpoint directory. If m is a view with adapters (llm.Model.WithAdapters),
// they are copied too, as SetAdapters copies them, and the Model runs with them.
// The base weights are llm.Model's, bit for bit (read in place, copied once into the store).
func FromLLM(store *model.Store, scope string, m *llm.Model) (*Model, error) {
	return FromLLMAs(store, scope, m, dtypes.Float32)
}

// FromLLMAs is FromLLM with the base weights stored as dtype (see LoadAs).
func FromLLMAs(store *model.Store, scope string, m *llm.Model, dtype dtypes.DType) (*Model, error) {
	if m == nil {
		return nil, errors.New("hfgraph: FromLLM: nil model")
	}
	weights := m.WeightsView() // read only: fromTensors copies (and transposes) into the store
	g, err := fromTensors(store, scope, m.Config(), "FromLLM", dtype, func(name string) ([]float32, error) {
		w, ok := weights[name]
		if !ok {
			return nil, fmt.Errorf("the model has no tensor %s", name)
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	if a := m.Adapters(); a != nil {
		if err := g.SetAdapters(a); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Config returns the model's configuration, as read from its config.json.
func (m *Model) Config() hf.Config {
	c := m.cfg
	c.EOSTokenIDs = append([]int(nil), c.EOSTokenIDs...)
	return c
}

// Store returns the store holding the model's variables.
func (m *Model) Store() *model.Store { return m.store }

// Scope returns the store scope of the model's variables ("/hf"): the base weights are under
// Scope()+"/base", the adapters under Scope()+"/lora".
func (m *Model) Scope() string { return m.scope }

// Base returns the model without its adapters: the same variables, and graphs built without
// the adapter term, so that it computes what the checkpoint alone computes. It is GRPO's
// reference policy (as llm.Model.WithAdapters(nil) is for agrl/llm). Adapters added later to
// either model are shared, and Base's graphs still leave them out.
func (m *Model) Base() *Model { return &Model{state: m.state, base: true, frozen: m.frozen} }

// Dropout returns a view of m for training graphs that applies the adapters' lora_dropout
// (LoRAConfig.Dropout, p) as PEFT does in training mode: in every adapted projection the
// adapter term becomes scale·((drop(x)·A)·B), where drop zeroes each entry of the projection's
// input with probability p and divides the kept ones by 1−p; the base product x·W reads x
// whole. Each projection of each layer draws its own mask, in graph-building order, from rng,
// a node of shape graph.RNGStateShape (a parameter fed from graph.RNGStateFromSeed, for
// instance, so that a training step's masks follow from its seed alone). Without adapters or
// with p = 0 the view computes exactly what m computes. Like Base it shares m's variables; use
// it in the graph that rng belongs to.
func (m *Model) Dropout(rng *graph.Node) *Model {
	if rng == nil || !rng.Shape().Equal(graph.RNGStateShape) {
		panic(fmt.Errorf("hfgraph: Dropout wants an RNG state of shape %s", graph.RNGStateShape))
	}
	return &Model{state: m.state, base: m.base, rng: rng, frozen: m.frozen}
}

// IsBase reports whether m is a view without adapters (see Base).
func (m *Model) IsBase() bool { return m.base }

// BaseVariables returns the base weights (frozen unless TrainBase), in hf.Config.Tensors order.
func (m *Model) BaseVariables() []*model.Variable {
	var vs []*model.Variable
	for _, spec := range m.cfg.Tensors() {
		if v := m.store.GetVariable(m.basePath(spec.Name)); v != nil {
			vs = append(vs, v)
		}
	}
	return vs
}

// TrainBase makes the base weights trainable (on true) or frozen again: with them trainable,
// an optimizer's UpdateGraph over the store's trainable variables, or graph.Gradient over
// BaseVariables, fine-tunes the whole model (full fine-tuning; adapters, if any, stay
// trainable too). Base's view reads the same variables, so once they are trained it no longer
// computes the checkpoint: a full fine-tuning's reference policy needs weights of its own (a
// second model under another scope).
//
// It refuses base weights stored in bfloat16 (LoadAs): their updates would be rounded away.
func (m *Model) TrainBase(on bool) error {
	if on && m.dtype != dtypes.Float32 {
		return fmt.Errorf("hfgraph: TrainBase: the base weights are stored as %s; full fine-tuning needs Float32 weights", m.dtype)
	}
	for _, v := range m.BaseVariables() {
		v.SetTrainable(on)
	}
	return nil
}

// SetCompute sets the dtype of the matrix products with the base weights — every projection
// (not the LM head: logits stay float32), in every graph of m and of its views (Base,
// Frozen): dtypes.Float32 (the
// default), or dtypes.BFloat16, mixed precision as GPUs run it fast: the product's inputs
// (activations and weights) are rounded to bfloat16, their products summed in float32, and the
// sum rounded to bfloat16 (as PyTorch's autocast returns it). Everything else stays float32:
// the residual stream, RMSNorm, RoPE,
// attention's scores and softmax, biases, the LoRA adapters' terms and their gradients (the
// backward pass rounds the products' inputs the same way). Logits then differ from float32
// ones by bfloat16's rounding (about 0.4% of each product's inputs). Call it before building
// graphs: compiled ones keep the dtype they were built with.
func (m *Model) SetCompute(dtype dtypes.DType) error {
	if dtype != dtypes.Float32 && dtype != dtypes.BFloat16 {
		return fmt.Errorf("hfgraph: SetCompute(%s): want Float32 or BFloat16", dtype)
	}
	m.compute = dtype
	return nil
}

// Compute returns the dtype of the products with the base weights (SetCompute).
func (m *Model) Compute() dtypes.DType { return m.compute }

// DType returns the base weights' storage dtype: dtypes.Float32 or dtypes.BFloat16 (LoadAs).
func (m *Model) DType() dtypes.DType { return m.dtype }

// BaseWeights returns a copy of the base weights by their checkpoint names, each row-major in
// the checkpoint's layout (projections transposed back to [out, in]): what llm.FromWeights and
// llm.Model.Save take. With tied embeddings there is no lm_head entry.
func (m *Model) BaseWeights() (map[string][]float32, error) {
	return m.baseWeights("BaseWeights", true)
}

// StoredBaseWeights is BaseWeights with the projections left as the store keeps them, each a
// copy of its [in, out] transpose (what llm.FromWeightsTransposed takes): no transposing back.
func (m *Model) StoredBaseWeights() (map[string][]float32, error) {
	return m.baseWeights("StoredBaseWeights", false)
}

// baseWeights copies the base weights out of the store for the method where, the projections
// transposed back to [out, in] when back is set.
func (m *Model) baseWeights(where string, back bool) (map[string][]float32, error) {
	out := map[string][]float32{}
	for _, spec := range m.cfg.Tensors() {
		v := m.store.GetVariable(m.basePath(spec.Name))
		if v == nil {
			return nil, fmt.Errorf("hfgraph: %s: variable %s missing from the store", where, m.basePath(spec.Name))
		}
		val, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("hfgraph: %s: %s: %w", where, v.Path(), err)
		}
		data := floats(val)
		if back && isProjection(spec.Name) { // stored [in, out]
			data = transpose(data, spec.Shape[1], spec.Shape[0])
		}
		out[spec.Name] = data
	}
	return out, nil
}

// SetBaseWeights replaces the values of the base weights with w, which must hold every tensor
// of the checkpoint's layout (BaseWeights' form), each of its shape's size and finite, and no
// other; nothing is changed when one is not.
func (m *Model) SetBaseWeights(w map[string][]float32) error {
	specs := m.cfg.Tensors()
	var errs []error
	for _, spec := range specs {
		data, ok := w[spec.Name]
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("tensor %s missing", spec.Name))
		case len(data) != n:
			errs = append(errs, fmt.Errorf("tensor %s has %d values for shape %v", spec.Name, len(data), spec.Shape))
		default:
			for i, x := range data {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					errs = append(errs, fmt.Errorf("tensor %s: element %d is %v", spec.Name, i, x))
					break
				}
			}
		}
	}
	if len(w) > len(specs) {
		known := map[string]bool{}
		for _, spec := range specs {
			known[spec.Name] = true
		}
		for name := range w {
			if !known[name] {
				errs = append(errs, fmt.Errorf("unexpected tensor %s", name))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("hfgraph: SetBaseWeights: %w", errors.Join(errs...))
	}
	for _, spec := range specs {
		data, dims := w[spec.Name], spec.Shape
		if isProjection(spec.Name) {
			data, dims = transpose(w[spec.Name], dims[0], dims[1]), []int{dims[1], dims[0]}
		}
		v := m.variable(m.basePath(spec.Name))
		if err := v.SetValue(m.baseTensor(data, dims)); err != nil {
			return fmt.Errorf("hfgraph: SetBaseWeights: %s: %w", v.Path(), err)
		}
	}
	return nil
}

func (m *Model) basePath(name string) string { return m.scope + "/base/" + name }

// variable returns the named variable, or panics (graph building reports errors by panics, as
// GoMLX does; model.Exec turns them into errors).
func (m *Model) variable(path string) *model.Variable {
	v := m.store.GetVariable(path)
	if v == nil {
		panic(fmt.Errorf("hfgraph: variable %s missing from the store", path))
	}
	return v
}

// create makes a variable of the given float32 values and shape.
func (m *Model) create(path string, data []float32, dims []int, trainable bool) error {
	return m.createVar(path, trainable, func() *tensors.Tensor { return tensors.FromFlatDataAndDimensions(data, dims...) })
}

// createBase makes a frozen base variable of the given values and shape, stored as the
// model's dtype.
func (m *Model) createBase(path string, data []float32, dims []int) error {
	return m.createVar(path, false, func() *tensors.Tensor { return m.baseTensor(data, dims) })
}

// createVar makes the variable path of the tensor value builds, turning a panic of either into
// an error naming the variable.
func (m *Model) createVar(path string, trainable bool, value func() *tensors.Tensor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hfgraph: creating %s: %v", path, r)
		}
	}()
	if m.store.GetVariable(path) != nil {
		return fmt.Errorf("hfgraph: variable %s exists already", path)
	}
	v, err := m.store.CreateVariable(path, value())
	if err != nil {
		return fmt.Errorf("hfgraph: creating %s: %w", path, err)
	}
	v.SetTrainable(trainable)
	return nil
}

// baseTensor is a copy of data as a tensor of the base weights' dtype (rounded to bfloat16,
// nearest, ties to even, where they are stored so), written straight into its storage.
func (m *Model) baseTensor(data []float32, dims []int) *tensors.Tensor {
	t := tensors.FromShape(shapes.Make(m.dtype, dims...))
	if t.Size() != len(data) {
		panic(fmt.Errorf("hfgraph: %d values for shape %v", len(data), dims))
	}
	t.MustMutableFlatData(func(flat any) {
		switch flat := flat.(type) {
		case []float32:
			copy(flat, data)
		case []bfloat16.BFloat16:
			for i, x := range data {
				flat[i] = bfloat16.FromBits(hf.Float32ToBF16(x))
			}
		}
	})
	return t
}

// floats returns a copy of t's values as float32 (t is Float32 or BFloat16).
func floats(t *tensors.Tensor) []float32 {
	if t.DType() == dtypes.BFloat16 {
		b := tensors.MustCopyFlatData[bfloat16.BFloat16](t)
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = hf.BF16ToFloat32(x.Bits())
		}
		return out
	}
	return tensors.MustCopyFlatData[float32](t)
}

// createTransposed makes a frozen variable [cols, rows] holding the transpose of the
// row-major [rows, cols] matrix w, transposing straight into the tensor's storage (no
// intermediate copy of a weight that may be hundreds of megabytes).
func (m *Model) createTransposed(path string, w []float32, rows, cols int) error {
	if len(w) != rows*cols {
		return fmt.Errorf("hfgraph: creating %s: %d values for [%d %d]", path, len(w), rows, cols)
	}
	return m.createVar(path, false, func() *tensors.Tensor {
		t := tensors.FromShape(shapes.Make(m.dtype, cols, rows))
		t.MustMutableFlatData(func(flat any) {
			switch flat := flat.(type) {
			case []float32:
				llm.TransposeTiles(flat, rows, w, rows, cols, cols, false)
			case []bfloat16.BFloat16:
				for r := range rows {
					for c := range cols {
						flat[c*rows+r] = bfloat16.FromBits(hf.Float32ToBF16(w[r*cols+c]))
					}
				}
			}
		})
		return t
	})
}

// isProjection reports whether the named checkpoint tensor is a projection weight, [out, in].
func isProjection(name string) bool { return strings.HasSuffix(name, "_proj.weight") }

// transpose returns the [cols, rows] transpose of the row-major [rows, cols] matrix w.
func transpose(w []float32, rows, cols int) []float32 {
	t := make([]float32, len(w))
	llm.TransposeTiles(t, rows, w, rows, cols, cols, false)
	return t
}

// cleanScope turns a scope into an absolute path without a trailing slash.
func cleanScope(scope string) string {
	if scope == "" {
		return DefaultScope
	}
	scope = model.JoinPath("/", scope)
	if scope == "/" {
		return ""
	}
	return scope
}
