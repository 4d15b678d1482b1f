package learn

import (
	"agrl.dev/agrl"

	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// decays reports whether weight decay applies to the named weight.
func decays(name string) bool {
	base := name[strings.LastIndex(name, "/")+1:]
	return strings.HasSuffix(base, "_w") || base == "embed" || base == "pos"
}

// TrainBatch is one batch of token sequences for a Trainer. Per-token values are aligned with
// Tokens: entry j belongs to token j (entry 0, the BOS, is never a target), exactly like
// Episode.Tokens, Episode.LossMask and Episode.LogProbs.
type TrainBatch struct {
	Tokens [][]int32
	// Values holds the per-token inputs the loss reads, by name ("mask", "adv", "old_logp"…);
	// every name the Trainer was built with must be present.
	Values map[string][][]float32
}

// LossInputs are the graph nodes a LossFunc builds its loss from. Every node is [B, T-1]
// float32, about the target token j+1 at position j; rows and positions that are padding have
// Valid 0 and every value 0.
type LossInputs struct {
	// LogProbs are log π(token[j+1] | token[..j]) under the current weights, at the trainer's
	// temperature; Entropy the entropy of that next-token distribution.
	LogProbs, Entropy *graph.Node
	// Top1 is 1 where the target is the most likely token (for accuracies), else 0.
	Top1 *graph.Node
	// Values are the batch's per-token values, shifted to align with the targets.
	Values map[string]*graph.Node
	// Valid is 1 on real target tokens and 0 on padding.
	Valid *graph.Node
	// Sums holds, for each value name, the scalar sum of that value over the real target
	// tokens of the whole batch. Normalise by these (for instance a token mean by
	// Sums["mask"]), never by sums over the nodes above: the trainer may split a batch into
	// shards computed concurrently, and the loss and metrics of the shards are added up.
	// A token mean divides by the whole batch's token count, never a shard's or micro-batch's.
	Sums map[string]*graph.Node
}

// LossFunc builds a scalar loss (to minimise) and named scalar metrics from a batch's
// per-token statistics. Mask it yourself: only policy-generated tokens belong in the loss.
// Loss and metrics must add up over shards of the batch: sums over tokens divided by the
// whole-batch LossInputs.Sums (see there).
type LossFunc func(in LossInputs) (loss *graph.Node, metrics map[string]*graph.Node)

// Trainer takes optimizer steps on a Policy with a given loss. Its AdamW state lives in the
// policy's store under "/opt/<name>", so checkpoints save it and a resumed run continues with
// the same moments and step count.
type Trainer struct {
	p        *Policy
	name     string
	opt      agrl.AdamW
	loss     LossFunc
	values   []string
	invT     float32
	shards   int
	gradExec *model.Exec // loss, metrics and gradients of one shard
	hostExec *model.Exec // the host path's loss, metrics and their gradients (host.go)
	arena    arena       // the host path's buffers, reused from step to step
	evalExec *model.Exec // loss and metrics of one shard
	updExec  *model.Exec // AdamW update from the shards' gradients
	metrics  []string    // metric names in output order (fixed at the first build)

	metricsOnce sync.Once
}

const optScope = "/opt"

// NewTrainer builds a trainer named name (its optimizer state is kept under that name) that
// minimises loss, reading the named per-token values of each batch. temperature is the one
// log-probs are computed at (1 for SFT; the sampling temperature for RL).
func (p *Policy) NewTrainer(name string, loss LossFunc, values []string, opt agrl.AdamW, temperature float64) (*Trainer, error) {
	var errs []error
	if err := opt.Validate(); err != nil {
		errs = append(errs, err)
	}
	if name == "" || strings.ContainsAny(name, "/ ") {
		errs = append(errs, fmt.Errorf("trainer name %q; want a non-empty word", name))
	}
	if loss == nil {
		errs = append(errs, errors.New("nil loss"))
	}
	if math.IsNaN(temperature) || temperature <= 0 {
		errs = append(errs, fmt.Errorf("temperature %v; want > 0", temperature))
	}
	vals := slices.Clone(values)
	sort.Strings(vals)
	if len(slices.Compact(slices.Clone(vals))) != len(vals) {
		errs = append(errs, fmt.Errorf("duplicate value names in %q", values))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("agrl: NewTrainer: %w", errors.Join(errs...))
	}
	t := &Trainer{p: p, name: name, opt: opt, loss: loss, values: vals, invT: float32(1 / temperature), shards: p.workers()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := t.ensureState(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Trainer) statePath(parts ...string) string {
	return model.JoinPath(append([]string{optScope, t.name}, parts...)...)
}

// ensureState creates the optimizer variables (zero moments, step 0) unless they exist, for
// instance after loading a checkpoint.
func (t *Trainer) ensureState() error {
	create := func(path string, shape shapes.Shape) error {
		if t.p.store.GetVariable(path) != nil {
			return nil
		}
		return catch(func() error {
			v, err := t.p.store.CreateVariable(path, tensors.FromShape(shape))
			if err == nil {
				v.SetTrainable(false)
			}
			return err
		})
	}
	if err := create(t.statePath("step"), shapes.Make(dtypes.Float32)); err != nil {
		return err
	}
	for _, w := range t.p.arch.weightSpecs() {
		shape := shapes.Make(dtypes.Float32, w.dims...)
		for _, m := range []string{"m", "v"} {
			if err := create(t.statePath(m, w.name), shape); err != nil {
				return fmt.Errorf("agrl: optimizer state for %s: %w", w.name, err)
			}
		}
	}
	return nil
}

// Steps returns the number of optimizer steps taken (restored from checkpoints).
func (t *Trainer) Steps() int {
	t.p.mu.RLock()
	defer t.p.mu.RUnlock()
	return t.steps()
}

func (t *Trainer) steps() int { return stepCount(t.p.store, t.statePath("step")) }

// stepCount reads an optimizer's step counter (0 when it has none yet).
func stepCount(store *model.Store, path string) int {
	v := store.GetVariable(path)
	if v == nil {
		return 0
	}
	val, err := v.Value()
	if err != nil {
		return 0
	}
	return int(tensors.MustCopyFlatData[float32](val)[0])
}

// Shards sets how many parts each batch is split into, computed concurrently (the go backend
// runs most ops on one core, so two shards use both cores of a 2-core machine). The default is
// the policy's (see Policy.Shards).
func (t *Trainer) Shards(n int) *Trainer {
	t.shards = max(1, n)
	return t
}

// lossGraph builds the loss and metrics of one shard. Inputs: tokens [B, T], one [B, T]
// float32 per value name, then one scalar whole-batch sum per value name.
func (t *Trainer) lossGraph(in []*graph.Node) (w *weights, loss *graph.Node, metrics []*graph.Node) {
	p := t.p
	g := in[0].Graph()
	tokens := in[0]
	tl := tokens.Shape().Dimensions[1]
	w = p.mustWeights(g)
	logp, ent, top1 := p.arch.tokenStats(w, tokens, graph.Const(g, t.invT)) // [B, T-1]
	shift := func(x *graph.Node) *graph.Node { return graph.Slice(x, graph.AxisRange(), graph.AxisRange(1, tl)) }
	li := LossInputs{LogProbs: logp, Entropy: ent, Top1: top1, Values: map[string]*graph.Node{}, Sums: map[string]*graph.Node{},
		Valid: graph.ConvertDType(graph.LogicalAnd(graph.NotEqual(shift(tokens), graph.Const(g, agrl.PAD)),
			graph.NotEqual(shift(tokens), graph.Const(g, agrl.BOS))), dtypes.Float32)} // a BOS target starts the next packed sequence
	nv := len(t.values)
	for i, name := range t.values {
		li.Values[name] = shift(in[1+i])
		li.Sums[name] = in[1+nv+i]
	}
	loss, metrics = t.lossAndMetrics(li)
	return w, loss, metrics
}

// lossAndMetrics evaluates the trainer's loss on li and returns it with the metrics in the
// trainer's fixed order.
func (t *Trainer) lossAndMetrics(li LossInputs) (loss *graph.Node, metrics []*graph.Node) {
	return evalLoss(t.loss, li, &t.metricsOnce, &t.metrics)
}

// evalLoss builds loss on li and returns the loss with its metrics as float32 scalars in the
// order of *names, which the first call fixes (sorted; once guards it: shards may build graphs
// concurrently). It panics (inside graph building, where GoMLX reports it as an error) on a
// loss that is not a scalar or a metric missing or not a scalar.
func evalLoss(loss LossFunc, li LossInputs, once *sync.Once, names *[]string) (*graph.Node, []*graph.Node) {
	l, ms := loss(li)
	if l == nil || !l.Shape().IsScalar() {
		panic(fmt.Errorf("loss must be a scalar node, got %v", l))
	}
	keys := make([]string, 0, len(ms))
	for k := range ms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	once.Do(func() { *names = keys })
	var metrics []*graph.Node
	for _, k := range *names {
		m, ok := ms[k]
		if !ok || !m.Shape().IsScalar() {
			panic(fmt.Errorf("metric %q missing or not a scalar", k))
		}
		metrics = append(metrics, graph.ConvertDType(m, dtypes.Float32))
	}
	return l, metrics
}

// weightVars returns the weight variables in weightSpecs order.
func (p *Policy) weightVars() []*model.Variable {
	specs := p.arch.weightSpecs()
	vars := make([]*model.Variable, len(specs))
	for i, s := range specs {
		vars[i] = p.store.GetVariable(model.JoinPath(lmScope, s.name))
	}
	return vars
}

// gradGraph outputs a shard's loss, metrics and the gradient of its loss for every weight.
func (t *Trainer) gradGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	_, loss, metrics := t.lossGraph(in)
	g := in[0].Graph()
	vars := t.p.weightVars()
	nodes := make([]*graph.Node, len(vars))
	for i, v := range vars {
		nodes[i] = v.NodeValue(g)
	}
	out := append([]*graph.Node{loss}, metrics...)
	return append(out, graph.Gradient(loss, nodes...)...)
}

// evalGraph outputs a shard's loss and metrics.
func (t *Trainer) evalGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	_, loss, metrics := t.lossGraph(in)
	return append([]*graph.Node{loss}, metrics...)
}

// updateGraph adds up the pieces' gradients (inputs: lr, then pieces × weights gradients),
// applies AdamW and returns the global gradient norm before clipping.
func (t *Trainer) updateGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	p := t.p
	lr := in[0]
	specs := p.arch.weightSpecs()
	nw := len(specs)
	shards := (len(in) - 1) / nw
	vars := p.weightVars()
	params := make([]adamParam, nw)
	for i, s := range specs {
		gr := in[1+i]
		for sh := 1; sh < shards; sh++ {
			gr = graph.Add(gr, in[1+sh*nw+i])
		}
		params[i] = adamParam{w: vars[i], grad: gr, decay: decays(s.name),
			m: p.store.GetVariable(t.statePath("m", s.name)), v: p.store.GetVariable(t.statePath("v", s.name))}
	}
	return []*graph.Node{adamW(t.opt.Spec(), lr, p.store.GetVariable(t.statePath("step")), params)}
}

// adamParam is one weight of an AdamW step: its variable, its moment variables, its gradient
// (summed over shards and micro-batches) and whether weight decay applies to it.
type adamParam struct {
	w, m, v *model.Variable
	grad    *graph.Node
	decay   bool
}

// adamW builds one AdamW step in lr's graph: the global gradient norm (returned, before
// clipping), clipping to o.ClipNorm, the step counter and moments updated with bias
// corrections folded into the step size, and decoupled weight decay on the weights that decay.
func adamW(o agrl.AdamWSpec, lr *graph.Node, stepVar *model.Variable, params []adamParam) *graph.Node {
	g := lr.Graph()
	sumSq := graph.Const(g, float32(0))
	for _, p := range params {
		sumSq = graph.Add(sumSq, graph.ReduceAllSum(graph.Square(p.grad)))
	}
	norm := graph.Sqrt(sumSq)
	scale := graph.Const(g, float32(1))
	if o.ClipNorm > 0 { // scale = min(1, clip / norm)
		scale = graph.Min(scale, graph.Div(graph.Const(g, float32(o.ClipNorm)), graph.Add(norm, graph.Const(g, float32(1e-6)))))
	}
	step := graph.Add(stepVar.NodeValue(g), graph.Const(g, float32(1)))
	stepVar.SetNodeValue(step)
	c := func(v float64) *graph.Node { return graph.Const(g, float32(v)) }
	b1, b2 := c(o.Beta1), c(o.Beta2)
	// Bias corrections folded into the step size: lr·√(1-β2^t)/(1-β1^t).
	corr1 := graph.OneMinus(graph.Pow(b1, step))
	corr2 := graph.OneMinus(graph.Pow(b2, step))
	stepSize := graph.Div(graph.Mul(lr, graph.Sqrt(corr2)), corr1)
	epsHat := graph.Mul(c(o.Eps), graph.Sqrt(corr2))
	for _, p := range params {
		w := p.w.NodeValue(g)
		gr := graph.Mul(p.grad, scale)
		m := graph.Add(graph.Mul(b1, p.m.NodeValue(g)), graph.Mul(c(1-o.Beta1), gr))
		v := graph.Add(graph.Mul(b2, p.v.NodeValue(g)), graph.Mul(c(1-o.Beta2), graph.Square(gr)))
		p.m.SetNodeValue(m)
		p.v.SetNodeValue(v)
		upd := graph.Mul(stepSize, graph.Div(m, graph.Add(graph.Sqrt(v), epsHat)))
		if o.WeightDecay > 0 && p.decay {
			upd = graph.Add(upd, graph.Mul(graph.Mul(lr, c(o.WeightDecay)), w))
		}
		p.w.SetNodeValue(graph.Sub(w, upd))
	}
	return norm
}

// validate checks a batch against the trainer's value names.
func (t *Trainer) validate(b TrainBatch) error {
	if err := t.p.checkSeqs(b.Tokens); err != nil {
		return err
	}
	var errs []error
	for _, name := range t.values {
		vs, ok := b.Values[name]
		if !ok {
			errs = append(errs, fmt.Errorf("value %q missing from the batch", name))
			continue
		}
		if len(vs) != len(b.Tokens) {
			errs = append(errs, fmt.Errorf("value %q has %d rows for %d sequences", name, len(vs), len(b.Tokens)))
			continue
		}
		for i := range vs {
			if len(vs[i]) != len(b.Tokens[i]) {
				errs = append(errs, fmt.Errorf("value %q row %d has %d entries for %d tokens", name, i, len(vs[i]), len(b.Tokens[i])))
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: bad training batch: %w", errors.Join(errs...))
	}
	return nil
}

// pieceArgs cuts a validated batch into pieces (see planPieces) and returns each piece's graph
// inputs: tokens, the per-token values and the whole-batch value sums; the plan; and the
// batch's target count.
func (t *Trainer) pieceArgs(b TrainBatch) ([][]any, piecePlan, int) {
	sums := make([]float32, len(t.values))
	for k, name := range t.values {
		for _, row := range b.Values[name] {
			for _, v := range row[1:] {
				sums[k] += v
			}
		}
	}
	n := 0
	lens := make([]int, len(b.Tokens))
	for i, s := range b.Tokens {
		n += len(s) - 1
		lens[i] = len(s)
	}
	if t.p.splitsPieces() && packable(b.Tokens) {
		args, plan := t.packedArgs(b, lens, sums)
		return args, plan, n
	}
	plan := planPieces(lens, t.shards, maxPieceRows, t.p.arch.Context, t.p.splitsPieces())
	out := make([][]any, len(plan.pieces))
	for k, piece := range plan.pieces {
		rows := make([][]int, len(piece)) // one sequence per row, padded to the piece's longest
		longest := 0
		for i, j := range piece {
			rows[i] = []int{j}
			longest = max(longest, lens[j])
		}
		out[k] = t.rowArgs(b, rows, bucketBatch(len(rows)), padLen(longest, t.p.arch.Context), sums)
	}
	return out, plan, n
}

// packedArgs packs the batch's sequences into rows (packRows: several sequences per row, each
// attending only to itself, see forward) of at least packRow tokens, and spreads the rows over
// the workers, one graph call each: every call is full, none is padded to its longest
// sequence, and the workers get the same number of rows.
func (t *Trainer) packedArgs(b TrainBatch, lens []int, sums []float32) ([][]any, piecePlan) {
	width := padLen(min(max(slices.Max(lens), packRow), t.p.arch.Context), t.p.arch.Context)
	rows := packRows(lens, width)
	workers := max(1, min(t.shards, len(rows)))
	var plan piecePlan
	out := make([][]any, workers)
	for w := range workers {
		mine := rows[w*len(rows)/workers : (w+1)*len(rows)/workers]
		out[w] = t.rowArgs(b, mine, len(mine), width, sums)
		plan.pieces = append(plan.pieces, slices.Concat(mine...))
		plan.workers = append(plan.workers, []int{w})
	}
	return out, plan
}

// rowArgs lays the batch's sequences out as one graph call's inputs: a [nRows, width] token
// tensor in which row r holds the sequences rows[r] back to back (PAD after them, and in rows
// past len(rows)), the per-token values laid out the same way, then the whole-batch sums.
func (t *Trainer) rowArgs(b TrainBatch, rows [][]int, nRows, width int, sums []float32) []any {
	tok := make([]int32, nRows*width)
	vals := make([][]float32, len(t.values))
	for k := range vals {
		vals[k] = make([]float32, nRows*width)
	}
	for r, row := range rows {
		at := r * width
		for _, i := range row {
			copy(tok[at:], b.Tokens[i])
			for k, name := range t.values {
				copy(vals[k][at:], b.Values[name][i])
			}
			at += len(b.Tokens[i])
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(tok, nRows, width)}
	for k := range vals {
		args = append(args, tensors.FromFlatDataAndDimensions(vals[k], nRows, width))
	}
	for _, v := range sums {
		args = append(args, v)
	}
	return args
}

// maxPieceRows is the most sequences one training graph call holds.
const maxPieceRows = 64

// ensureExecs builds the trainer's executors on first use.
func (t *Trainer) ensureExecs() error {
	var err error
	if t.gradExec == nil {
		if t.gradExec, err = t.p.newExec("train-grad", t.gradGraph); err != nil {
			return err
		}
	}
	if t.evalExec == nil {
		if t.evalExec, err = t.p.newExec("train-eval", t.evalGraph); err != nil {
			return err
		}
	}
	if t.updExec == nil {
		if t.updExec, err = t.p.newExec("train-update", t.updateGraph); err != nil {
			return err
		}
	}
	return nil
}

// Step takes one optimizer step on the batch and reports it.
func (t *Trainer) Step(b TrainBatch) (agrl.StepStats, error) {
	start := time.Now()
	if err := t.validate(b); err != nil {
		return agrl.StepStats{}, err
	}
	host := t.p.onHost()
	var pieces [][]any
	var plan piecePlan
	n := 0
	if host {
		for _, s := range b.Tokens {
			n += len(s) - 1
		}
	} else {
		pieces, plan, n = t.pieceArgs(b)
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if err := t.ensureExecs(); err != nil {
		return agrl.StepStats{}, err
	}
	step := t.steps() + 1
	lr := t.opt.LearningRate(step)
	var st agrl.StepStats
	if host {
		var grads [][]float32
		var err error
		if st, grads, err = t.hostGrads(b); err != nil {
			return agrl.StepStats{}, fmt.Errorf("agrl: train step gradients: %w", err)
		}
		st.GradNorm = math.NaN() // a non-finite loss is reported below and never applied
		if finite(st.Loss) {
			if st.GradNorm, err = t.hostUpdate(grads, lr); err != nil {
				return agrl.StepStats{}, fmt.Errorf("agrl: train step update: %w", err)
			}
		}
	} else {
		outs, err := runPieces(t.gradExec, pieces, plan)
		if err != nil {
			return agrl.StepStats{}, fmt.Errorf("agrl: train step gradients: %w", err)
		}
		st = t.stats(outs)
		args := []any{float32(lr)}
		for _, o := range outs {
			for _, gr := range o[1+len(t.metrics):] {
				args = append(args, gr)
			}
		}
		res, err := call(t.updExec, args...)
		for _, o := range outs {
			for _, gr := range o[1+len(t.metrics):] {
				_ = gr.FinalizeAll()
			}
		}
		if err != nil {
			return agrl.StepStats{}, fmt.Errorf("agrl: train step update: %w", err)
		}
		st.GradNorm = float64(tensors.MustCopyFlatData[float32](res[0])[0])
	}
	st.Step, st.LR, st.Tokens, st.Seconds = step, lr, n, time.Since(start).Seconds()
	if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) || math.IsNaN(st.GradNorm) {
		return st, fmt.Errorf("agrl: train step %d: loss %v, grad norm %v", step, st.Loss, st.GradNorm)
	}
	return st, nil
}

// Eval computes the loss and metrics on a batch without changing the weights.
func (t *Trainer) Eval(b TrainBatch) (agrl.StepStats, error) {
	start := time.Now()
	if err := t.validate(b); err != nil {
		return agrl.StepStats{}, err
	}
	pieces, plan, n := t.pieceArgs(b)
	t.p.mu.RLock()
	defer t.p.mu.RUnlock()
	t.p.execMu.Lock()
	err := t.ensureExecs()
	t.p.execMu.Unlock()
	if err != nil {
		return agrl.StepStats{}, err
	}
	outs, err := runPieces(t.evalExec, pieces, plan)
	if err != nil {
		return agrl.StepStats{}, fmt.Errorf("agrl: eval: %w", err)
	}
	st := t.stats(outs)
	st.Step, st.Tokens, st.Seconds = t.steps(), n, time.Since(start).Seconds()
	return st, nil
}

// stats adds up the shards' losses and metrics.
func (t *Trainer) stats(outs [][]*tensors.Tensor) agrl.StepStats {
	scalar := func(x *tensors.Tensor) float64 {
		v := float64(tensors.MustCopyFlatData[float32](x)[0])
		_ = x.FinalizeAll()
		return v
	}
	var st agrl.StepStats
	if len(t.metrics) > 0 {
		st.Metrics = map[string]float64{}
	}
	for _, o := range outs {
		st.Loss += scalar(o[0])
		for i, k := range t.metrics {
			st.Metrics[k] += scalar(o[1+i])
		}
	}
	return st
}
