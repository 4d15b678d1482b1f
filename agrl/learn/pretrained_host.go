package learn

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"agrl.dev/agrl/llm"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// Training steps on the host: where the policy scores on the host (hostScoring: the go
// backend, float32 products) and the host kernels run (GOEXPERIMENT=simd builds on AVX-512 or
// AVX2 CPUs), a LoRA learner takes each micro-batch's gradients with
// agrl/llm's Trace and Backward instead of the GoMLX graph: the forward pass the sampler runs
// (the same kernels, the same bits), kept for a backward pass through the frozen weights to
// the adapters. A full fine-tuning learner does the same with Trace.BackwardWeights, into
// gradient sums of every weight in the store's layout (llm.WeightGrads, the projections [in,
// out]), the LM head's added from its logits' gradient (dzᵀ·hidden); its host model is the
// store's current weights, read in place (syncLive: the update, in place too, is the next
// step's model at no cost). The loss stays the learner's GoMLX LossFunc over the per-token
// statistics, as in the segmented step (pretrained_segments.go), which also gives its
// gradient with respect to them; the optimizer's update is the graph's arithmetic on the
// host (hostUpdate), so optimizer state, checkpoints and resume are the same either way.
//
// For each micro-batch (the graph path's chunks, so progress and the loss's shapes are the
// same; without dropout, the sequences that share a prompt come together, a group's
// micro-batches one after another, pretrained_share.go):
//
//  1. each sequence is traced (its positions 0 … n-2; the last token is only a target; or,
//     in a group, those past the prompt, traced after the prompt's trace, made once for the
//     group), and the LM head gives each position's log-prob of its target, entropy and
//     top-1 flag (the logits are then dropped);
//  2. the loss and its gradient with respect to those statistics (one small graph call);
//  3. each sequence's head again, its logits' gradient (hostPass's output layer:
//     invT·(dlogp·(onehot − p) − dent·p·(log p + H))), the hidden states' gradient through
//     the head (and, fine-tuning every weight, the head's own), and Trace.Backward into the
//     adapters' gradient sums (Trace.BackwardWeights into every weight's); after a group's
//     last micro-batch, the prompt's backward pass (prefixBackward).
//
// The gradients equal the graph's to rounding (TestHostLoRAStepMatchesGraph,
// TestHostFullStepMatchesGraph). The traces are
// kept whole while the micro-batch fits the call budget (CallMemory), and checkpointed past
// it (llm.TraceOptions.Checkpointed: each layer's input only, each layer run again in the
// backward pass); a micro-batch that does not fit even so trains through the graphs instead,
// which split it segment by segment (hostPlan). With LoRA dropout each sequence draws its own
// masks (llm.TraceOptions.Dropout), seeded by dropoutSeed of the step and its place in the
// batch: not the graphs' masks (those are drawn over a call's tensors), the same whatever the
// micro-batches, and the same again on a resume with the same settings (changing CallMemory,
// MicroBatch or the backend on resume can move a micro-batch between the host and the
// graphs, and so change its masks). Measured in docs/llm.md ("LoRA steps on the host",
// "Checkpointed traces and LoRA dropout on the host").

// hostTraining reports whether a learner's steps take the host path: LoRA (with or without
// dropout) or full fine-tuning, on a policy that scores on the host with the host kernels
// installed.
func (t *pretrainedTrainer) hostTraining() bool {
	p := t.p
	return hostKernels && (p.full || p.graph.LoRA() != nil) && p.hostScoring() && !p.graphTraining
}

// lossGraph: in logp, entropy, top1, valid [R, T-1], one [R, T] per value, one sum per value →
// loss, metrics, dlogp, dentropy.
func (t *pretrainedTrainer) lossGraph(_ *model.Scope, in []*graph.Node) []*graph.Node {
	nv := len(t.values)
	tl := in[3].Shape().Dimensions[1] + 1 // the values' width: one more than the statistics'
	li := LossInputs{LogProbs: in[0], Entropy: in[1], Top1: in[2], Valid: in[3],
		Values: map[string]*graph.Node{}, Sums: map[string]*graph.Node{}}
	for i, name := range t.values {
		li.Values[name] = graph.Slice(in[4+i], graph.AxisRange(), graph.AxisRange(1, tl))
		li.Sums[name] = in[4+nv+i]
	}
	loss, metrics := evalLoss(t.loss, li, &t.once, &t.metrics)
	out := append([]*graph.Node{loss}, metrics...)
	return append(out, graph.Gradient(loss, in[0], in[1])...)
}

// statsLoss runs the learner's loss over per-token statistics (lossGraph, compiled once for
// the host and the segmented steps): stats are the log-probs, entropies, top-1 flags and
// valid flags, [rows, np] each, vals the values' [rows, np+1] tensors, sums their
// whole-batch sums. It returns the loss, the metrics (t.metrics order) and the loss's
// gradients with respect to the log-probs and the entropies.
func (t *pretrainedTrainer) statsLoss(stats [][]float32, rows, np int, vals []*tensors.Tensor, sums []float32) (loss float64, metrics []float64, dlogp, dent []float32, err error) {
	if t.lossExec == nil {
		if t.lossExec, err = t.p.newExec("pretrained-stats-loss", t.lossGraph); err != nil {
			return 0, nil, nil, nil, err
		}
	}
	args := []any{}
	for _, st := range stats {
		args = append(args, tensors.FromFlatDataAndDimensions(st, rows, np))
	}
	for _, v := range vals {
		args = append(args, v)
	}
	for _, x := range sums {
		args = append(args, x)
	}
	out, err := call(t.lossExec, args...)
	if err != nil {
		return 0, nil, nil, nil, fmt.Errorf("agrl: train step (loss): %w", err)
	}
	defer func() {
		for _, o := range out {
			_ = o.FinalizeAll()
		}
	}()
	loss = float64(tensors.MustCopyFlatData[float32](out[0])[0])
	metrics = make([]float64, len(t.metrics))
	for i := range t.metrics {
		metrics[i] = float64(tensors.MustCopyFlatData[float32](out[1+i])[0])
	}
	dlogp = tensors.MustCopyFlatData[float32](out[1+len(t.metrics)])
	dent = tensors.MustCopyFlatData[float32](out[2+len(t.metrics)])
	return loss, metrics, dlogp, dent, nil
}

// hostModel is the host model with the store's current adapters, or under full fine-tuning
// of the store's current weights (p.mu held).
func (p *PretrainedPolicy) hostModel() (*llm.Model, error) {
	if err := p.syncHost(); err != nil {
		return nil, err
	}
	if p.full {
		return p.cur.Model(), nil
	}
	return p.base.WithAdapters(p.host)
}

// hostSums are a host step's gradient sums: the adapters' (LoRA, in PEFT's layout) or every
// weight's (full fine-tuning, the projections [in, out] as the store keeps them).
type hostSums struct {
	adapters *llm.Adapters
	weights  *llm.WeightGrads
}

// backward takes a trace's gradients into the sums, dh being its hidden states' gradient.
func (g hostSums) backward(tr *llm.Trace, dh []float32) error {
	if g.weights != nil {
		return tr.BackwardWeights(dh, g.weights)
	}
	return tr.Backward(dh, g.adapters)
}

// hostGrads is one micro-batch's gradients on the host: seqs laid out as rows × width for the
// loss (pad's layout), each traced as its unit says (hostPlan: whole, or after pre, the
// prompt its group shares, traced once for the group, tracePrefix; checkpointed as the call
// budget needs; LoRA dropout's seed), vals the values' [rows, width] tensors, sums their
// whole-batch sums. It returns the loss and the metrics (t.metrics order) and adds the
// gradients into g: the adapters', or every weight's (the LM head's from its logits'
// gradient, dzᵀ·hidden). With pre, the statistics of each sequence's first positions are the
// prompt's rows' (hostPrefix), and the loss's gradients there are added into pre, whose
// own backward pass runs after the group's last micro-batch (prefixBackward).
func (t *pretrainedTrainer) hostGrads(m *llm.Model, seqs [][]int32, units []hostUnit, pre *hostPrefix, rows, width int, vals []*tensors.Tensor, sums []float32, g hostSums) (float64, []float64, error) {
	p := t.p
	V := p.cfg.VocabSize
	np := width - 1
	stats := make([][]float32, 4) // logp, entropy, top1, valid: [rows, np] each
	for k := range stats {
		stats[k] = make([]float32, rows*np)
	}
	hd := t.newHeadPass(m, width)
	defer hd.release()
	traces := make([]*llm.Trace, len(units))
	// The first pass's log-probs are kept for the backward pass while they fit hostKeepBytes
	// (the probabilities are their exponentials); past it the head runs again.
	lps, ents := make([][]float32, len(units)), make([][]float32, len(units))
	kept := 0.0
	for u, un := range units {
		s, off := seqs[un.seq], 0
		var tr *llm.Trace
		var err error
		if un.after {
			off = len(pre.ids)
			pre.fill(stats, un.seq*np, s)
			tr, err = m.TraceAfter(pre.tr, un.ids, un.opts)
		} else {
			tr, err = m.TraceWith(un.ids, un.opts) // checkSeqs: at least one target
		}
		if err != nil {
			return 0, nil, fmt.Errorf("agrl: train step: %w", err)
		}
		traces[u] = tr
		n := tr.Len()
		ents[u] = make([]float32, n)
		if kept += 4 * float64(n*V); kept <= hostKeepBytes {
			lps[u] = llm.Floats(n * V) // written whole below
		}
		for r0 := 0; r0 < n; r0 += headBlock {
			r1 := min(n, r0+headBlock)
			lp, _ := hd.block(tr.Hidden(), r0, r1, ents[u])
			for r := r0; r < r1; r++ {
				z := lp[(r-r0)*V : (r-r0+1)*V]
				lt, at := z[s[off+r+1]], un.seq*np+off+r
				stats[0][at], stats[1][at], stats[3][at] = lt, ents[u][r], 1
				if lt >= maxOf(z) {
					stats[2][at] = 1
				}
			}
			if lps[u] != nil {
				copy(lps[u][r0*V:], lp)
			}
		}
	}
	loss, metrics, dlogp, dent, err := t.statsLoss(stats, rows, np, vals, sums)
	if err != nil {
		return 0, nil, err
	}
	if !finite(loss) { // the caller reports it; no backward pass through a NaN
		return loss, metrics, nil
	}
	for u, un := range units {
		s, off := seqs[un.seq], 0
		if un.after {
			off = len(pre.ids)
			pre.add(dlogp[un.seq*np:], dent[un.seq*np:], s)
		}
		at := un.seq*np + off
		err := hd.backward(traces[u], lps[u], ents[u], dlogp[at:], dent[at:], s[off+1:], g)
		lps[u], traces[u] = nil, nil
		if err != nil {
			return 0, nil, err
		}
	}
	return loss, metrics, nil
}

// headPass is a host step's LM head over traces' hidden states (newHeadPass): its blocks of
// log-probs and probabilities, and the backward pass through it.
type headPass struct {
	t             *pretrainedTrainer
	head          []float32
	H, V, nw      int
	probs, logits []float32 // a block's probabilities (then the logits' gradient), its logits (then log-probs)
}

// newHeadPass makes the head's buffers for positions of width at most (from the traces' pool,
// llm.Floats; release gives them back).
func (t *pretrainedTrainer) newHeadPass(m *llm.Model, width int) *headPass {
	V := t.p.cfg.VocabSize
	if len(t.ban) != V {
		t.ban = make([]float32, V)
	}
	n := min(headBlock, width) * V
	return &headPass{t: t, head: m.Head(), H: t.p.cfg.HiddenSize, V: V, nw: runtime.GOMAXPROCS(0), probs: llm.Floats(n), logits: llm.Floats(n)}
}

func (hd *headPass) release() { llm.PutFloats(hd.probs, hd.logits) }

// block runs rows r0 … r1-1 of hidden states through the head: their log-probs (in place of
// the logits, [rows, V]), probabilities and entropies (into ent[r0:r1]). The head goes
// headBlock positions at a time, so that its vocabulary-wide rows take bounded memory.
func (hd *headPass) block(hidden []float32, r0, r1 int, ent []float32) (lp, pr []float32) {
	n, H, V := r1-r0, hd.H, hd.V
	lp = hd.logits[:n*V]
	headNTInto(lp, hidden[r0*H:r1*H], n, H, hd.head, V)
	pr = hd.probs[:n*V]
	rowsDo(hd.nw, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			ent[r0+r] = logSoftmaxRow(lp[r*V:(r+1)*V], hd.t.ban, hd.t.invT, pr[r*V:(r+1)*V])
		}
	})
	return lp, pr
}

// backward is a trace's backward pass from the loss's gradients with respect to its rows'
// statistics: row r's log-prob of targets[r] (dlogp[r]) and entropy (dent[r]), lps its rows'
// log-probs if kept (given back to the pool here; else the head runs again), ents their
// entropies. The logits' gradient is invT·(dlogp·(onehot − p) − dent·p·(log p + H)), then the
// hidden states' through the head (and, fine-tuning every weight, the head's own), then the
// trace's backward pass into g.
func (hd *headPass) backward(tr *llm.Trace, lps, ents, dlogp, dent []float32, targets []int32, g hostSums) error {
	return hd.backwardWith(tr, lps, ents, func(r int) (a, e float32) { return dlogp[r], dent[r] },
		func(r int, row []float32) { row[targets[r]] += hd.t.invT * dlogp[r] }, g)
}

// backwardWith is backward with each row's gradients given by coef (the loss's gradients with
// respect to its target's log-prob, all targets summed, and its entropy) and its targets'
// one-hot terms added by onehot.
func (hd *headPass) backwardWith(tr *llm.Trace, lps, ents []float32, coef func(r int) (a, e float32), onehot func(r int, row []float32), g hostSums) error {
	H, V, invT := hd.H, hd.V, hd.t.invT
	n := tr.Len()
	dh := llm.Floats(n * H) // written whole, block by block, by the head's products below
	for r0 := 0; r0 < n; r0 += headBlock {
		r1 := min(n, r0+headBlock)
		var lp, pr []float32
		if lps != nil {
			lp, pr = lps[r0*V:r1*V], hd.probs[:(r1-r0)*V]
			rowsDo(hd.nw, r1-r0, func(lo, hi int) {
				copy(pr[lo*V:hi*V], lp[lo*V:hi*V])
				for r := lo; r < hi; r++ {
					expSum(pr[r*V:(r+1)*V], 0)
				}
			})
		} else {
			lp, pr = hd.block(tr.Hidden(), r0, r1, ents)
		}
		dz := pr // the logits' gradient, written over the probabilities as it reads them
		rowsDo(hd.nw, r1-r0, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				row := dz[r*V : (r+1)*V]
				a, e := coef(r0 + r)
				outputGrad(row, lp[r*V:(r+1)*V], row, a, e, ents[r0+r], invT)
				onehot(r0+r, row)
			}
		})
		gemmRowsSet(hd.nw, r1-r0, H, V, dz, V, 1, hd.head, H, dh[r0*H:], H)
		if g.weights != nil { // the head's gradient: dzᵀ·hidden, [V, H]
			hostMul(V, H, r1-r0, dz, 1, V, tr.Hidden()[r0*H:r1*H], H, g.weights.Head(), H, true)
		}
	}
	llm.PutFloats(lps)
	err := g.backward(tr, dh)
	llm.PutFloats(dh)
	if err != nil {
		return fmt.Errorf("agrl: train step: %w", err)
	}
	return nil
}

// headBlock is how many positions go through the LM head at once in a host step (a variable
// for tests): their logits and probabilities take 2·headBlock·vocab float32s (50 MB at
// SmolLM2's 49,152, 156 MB at Qwen3's 151,936).
var headBlock = 128

// A hostUnit is one sequence of a host step's micro-batch (hostPlan): its positions traced
// whole, or, after, those past the prompt its group shares (hostPrefix), traced after it.
type hostUnit struct {
	seq   int     // its place in the micro-batch
	ids   []int32 // the tokens traced
	after bool
	opts  llm.TraceOptions
}

// hostPlan decides how a micro-batch of seqs trains on the host within the call budget
// (CallMemory), m being the host model with its adapters. With prefix > 0, each sequence's
// positions past the prefix its group shares are traced after it (hostPrefix, held
// meanwhile: preHeld bytes); else each sequence is traced whole. The traces are kept whole
// while the micro-batch fits, shortest first, the rest checkpointed
// (llm.TraceOptions.Checkpointed); ok is false where it does not fit even with every trace
// checkpointed (it then trains through the graphs, segment by segment where needed). The
// estimate (hostBytes) counts every trace held at once, the log-probs kept (at most
// hostKeepBytes), the head's block and the largest backward pass's working memory.
func (p *PretrainedPolicy) hostPlan(m *llm.Model, seqs [][]int32, prefix int, preHeld float64) (units []hostUnit, ok bool) {
	for i, s := range seqs {
		units = append(units, hostUnit{seq: i, ids: s[prefix : len(s)-1], after: prefix > 0, opts: llm.TraceOptions{Checkpointed: true}})
	}
	if p.hostBytes(m, units, prefix)+preHeld > p.callBudget() {
		return nil, false
	}
	if p.checkpointTraces {
		return units, true
	}
	order := make([]int, len(units)) // shortest first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(units[a].ids) - len(units[b].ids) })
	for _, i := range order {
		units[i].opts.Checkpointed = false
		if p.hostBytes(m, units, prefix)+preHeld > p.callBudget() {
			units[i].opts.Checkpointed = true
			break
		}
	}
	return units, true
}

// hostBytes estimates the memory a host step's micro-batch of units takes (hostPlan), those
// traced after a prefix of prefix positions (what the prefix holds is its own, prefixBytes).
func (p *PretrainedPolicy) hostBytes(m *llm.Model, units []hostUnit, prefix int) float64 {
	total, held, back := 0.0, 0.0, 0.0
	var dropout float64
	if lora := p.graph.LoRA(); lora != nil {
		dropout = lora.Dropout
	}
	for _, u := range units {
		o, k := u.opts, len(u.ids)
		o.Dropout = dropout
		var h, b float64
		if u.after {
			h, b = m.TraceAfterBytes(prefix, k, o)
		} else {
			h, b = m.TraceBytes(k, o)
		}
		held += h
		back = max(back, b+4*float64(k*p.cfg.HiddenSize)) // and the hidden states' gradient
		total += float64(k)
	}
	V := float64(p.cfg.VocabSize)
	return held + back + min(4*total*V, hostKeepBytes) + 8*float64(headBlock)*V
}

// hostKeepBytes bounds the log-probs a host step keeps from its first pass over the head
// for its backward pass (a position's take the vocabulary's width in float32: 0.2 MB at
// SmolLM2's 49,152, 0.6 MB at Qwen3's 151,936); past it, the rest run the head again. A
// variable for tests.
var hostKeepBytes = float64(1 << 30)

// storeGrads adds a host step's gradient sums to trainVars' through add: the adapters'
// (storeAdapterGrads), or every weight's, which are in the store's layout already.
func (t *pretrainedTrainer) storeGrads(g hostSums, add func(i int, g []float32)) error {
	if g.weights == nil {
		return t.storeAdapterGrads(g.adapters, add)
	}
	vars := t.p.trainVars()
	w := g.weights.Tensors()
	if len(w) != len(vars) {
		return fmt.Errorf("agrl: train step: %d weight gradients for %d trained variables", len(w), len(vars))
	}
	for i, v := range vars {
		name := v.Path()[strings.LastIndex(v.Path(), "/base/")+len("/base/"):]
		if !strings.Contains(v.Path(), "/base/") || len(w[name]) != v.Shape().Size() {
			return fmt.Errorf("agrl: train step: gradient of %d values for variable %s %v", len(w[name]), v.Path(), v.Shape().Dimensions)
		}
		add(i, w[name])
	}
	return nil
}

// storeAdapterGrads converts the adapters' gradient sums g (PEFT's layout: A [r, in], B
// [out, r]) to the store's layout of trainVars ([in, r], [r, out]) and adds each through add.
func (t *pretrainedTrainer) storeAdapterGrads(g *llm.Adapters, add func(i int, g []float32)) error {
	vars := t.p.trainVars()
	params := g.Params()
	if len(params) != len(vars) {
		return fmt.Errorf("agrl: train step: %d adapter gradients for %d trained variables", len(params), len(vars))
	}
	for i, prm := range params {
		dims := vars[i].Shape().Dimensions
		name := strings.TrimSuffix(strings.TrimPrefix(prm.Name, "base_model.model."), ".weight")
		if !strings.HasSuffix(vars[i].Path(), "/"+name) || len(prm.Shape) != 2 || len(dims) != 2 || dims[0] != prm.Shape[1] || dims[1] != prm.Shape[0] {
			return fmt.Errorf("agrl: train step: gradient %s %v does not fit variable %s %v", prm.Name, prm.Shape, vars[i].Path(), dims)
		}
		add(i, transpose(prm.Data, prm.Shape[0], prm.Shape[1]))
	}
	return nil
}

// hostUpdate is updateGraph's AdamW step on the host, for a learner whose steps take their
// gradients there (hostTraining): in place on the store's tensors of trainVars and their
// moments, with the Tiny trainer's host update (hostAdamW, shared: float32, the norm's sum
// of squares in float64, each tensor split over the cores), so that a step
// does not pay the go backend's graph of a dozen elementwise passes over every weight and
// both moments (3.3–5 s a step at the SmolLM2-135M shape under full fine-tuning, against
// well under a second here). It returns the global gradient norm before clipping; a norm
// that is not finite is returned without updating anything (Step reports it). The caller
// holds p.mu.
func (t *pretrainedTrainer) hostUpdate(grads [][]float32, lr float64) (float64, error) {
	p, o := t.p, t.opt.Spec()
	vars := p.trainVars()
	targets := make([]adamTarget, len(vars))
	for i, wv := range vars {
		mv, vv := p.store.GetVariable(t.statePath("m")+wv.Path()), p.store.GetVariable(t.statePath("v")+wv.Path())
		if mv == nil || vv == nil {
			return 0, fmt.Errorf("agrl: optimizer state of %s missing", wv.Path())
		}
		// updateGraph's decay: every LoRA factor; under full fine-tuning the matrices only
		targets[i] = adamTarget{name: wv.Path(), w: wv, m: mv, v: vv, decay: !p.full || wv.Shape().Rank() >= 2}
	}
	return hostAdamW(o, p.store.GetVariable(t.statePath("step")), t.statePath("step"), targets, grads, lr, runtime.GOMAXPROCS(0))
}
