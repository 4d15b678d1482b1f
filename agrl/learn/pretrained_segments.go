package learn

import (
	"fmt"

	"agrl.dev/agrl/learn/hfgraph"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// Segmented training steps: where one sequence's whole training graph would not fit the call
// budget on the go backend (agrl.PretrainedLM.CallMemory, 4 GiB by default; callRowBytes
// estimates 13 GB for 2,048 positions at the SmolLM2-135M shape, 14.5 GB measured, most of it
// the attention's width × width tensors of 30 layers and the activations the backward pass
// keeps), a micro-batch's gradients are taken segment by segment instead (hfgraph's Embed,
// Layer, HeadStats):
//
//  1. forward, layer by layer, keeping only the residual stream entering each layer (and,
//     with LoRA dropout, the RNG state each layer starts from);
//  2. the head over chunks of positions (headChunk), giving the log-probs, entropies and top-1
//     flags of every position, without gradients;
//  3. the loss over those statistics, and its gradient with respect to the log-probs and
//     entropies;
//  4. backward through the head, chunk by chunk, recomputing its forward pass: the gradient
//     of Σ logp·dlogp + entropy·dentropy with respect to the residual stream (and, with full
//     fine-tuning, the final norm and the head);
//  5. backward through the layers, last first, each recomputing its forward pass from the
//     stream it kept: the gradient of Σ y·dy with respect to its input and its trainable
//     weights (the vector–Jacobian product);
//  6. with full fine-tuning, the embedding's gradient from the first layer's input gradient.
//
// One layer's graph serves every layer (the weights are its inputs), so a width compiles six
// small graphs (seven with full fine-tuning: the embedding's backward pass). The forward
// passes run twice: with LoRA, whose backward pass through the frozen weights costs about one
// forward pass, half again the whole graph's arithmetic; with full fine-tuning about a third.
// The memory held is the streams (the L+1 layer inputs, each freed once its layer's backward
// pass has read it, the stream's gradient, and host copies of the last stream and of its
// gradient: width·hidden floats a row each) plus one layer's or one head chunk's working set.
// The gradients are the whole graph's to rounding (TestSegmentedStep).

// headChunkBytes bounds the memory of one head chunk's graph: about six float32 tensors of
// the vocabulary's width per position (logits, log-softmax, its exponential, and in the
// backward pass their gradients). A variable for tests only.
var headChunkBytes = 1 << 30

// headChunk is the number of positions one head graph takes, for rows rows: a multiple of 16,
// at least 16, at most the positions there are (positions, rounded up to 16).
func headChunk(vocab, rows, positions int) int {
	c := int(float64(headChunkBytes) / (6 * 4 * float64(vocab) * float64(rows)))
	c = max(16, c/16*16)
	return min(c, (positions+15)/16*16)
}

// headChunks lays positions 0 … np-1 of rows rows out as chunks of chunk positions each,
// the last padded with zeros.
type headChunks struct{ rows, np, chunk int }

// span is the positions chunk ci holds.
func (h headChunks) span(ci int) (lo, hi int) { return ci * h.chunk, min((ci+1)*h.chunk, h.np) }

// chunkOf copies chunk ci of all — rows of rowLen positions (rowLen ≥ np), per values a
// position — into a new [rows, chunk, per] slice.
func chunkOf[T float32 | int32](h headChunks, all []T, ci, per, rowLen int) []T {
	out := make([]T, h.rows*h.chunk*per)
	lo, hi := h.span(ci)
	for r := range h.rows {
		copy(out[r*h.chunk*per:(r*h.chunk+hi-lo)*per], all[(r*rowLen+lo)*per:])
	}
	return out
}

// putChunk is chunkOf's inverse: it copies the real positions of chunk ci, part
// [rows, chunk, per], into all.
func putChunk(h headChunks, all, part []float32, ci, per, rowLen int) {
	lo, hi := h.span(ci)
	for r := range h.rows {
		copy(all[(r*rowLen+lo)*per:(r*rowLen+hi)*per], part[r*h.chunk*per:])
	}
}

// segmented reports whether a training call of width positions goes segment by segment: on
// the go backend, where even one row's whole graph exceeds the call budget (CallMemory; or,
// in tests, from segmentFrom positions on). It depends on the width alone, so a run takes each width's
// gradients the same way on every machine, and a resumed run as the uninterrupted one did.
func (p *PretrainedPolicy) segmented(width int) bool {
	if p.segmentFrom > 0 {
		return width >= p.segmentFrom
	}
	return p.goBackend && callRowBytes(p.cfg, width) > p.callBudget()
}

// segExecs are a trainer's segment graphs (built on first use).
type segExecs struct {
	layer, layerBack, stats, headBack, embed, embedBack *model.Exec
	// layerTrain are the indices, among a layer's variables (hfgraph.LayerVariables), of the
	// trainable ones, the same in every layer; headTrain, among HeadVariables.
	layerTrain, headTrain []int
	// index maps each trainable variable's path to its index in trainVars.
	index map[string]int
}

// segGraphs builds the segment graphs.
func (t *pretrainedTrainer) segGraphs() (*segExecs, error) {
	if t.seg != nil {
		return t.seg, nil
	}
	p := t.p
	idx := map[string]int{}
	for i, v := range p.trainVars() {
		idx[v.Path()] = i
	}
	s := &segExecs{index: idx}
	for i, v := range p.graph.LayerVariables(0) {
		if _, ok := idx[v.Path()]; ok {
			s.layerTrain = append(s.layerTrain, i)
		}
	}
	for i, v := range p.graph.HeadVariables() {
		if _, ok := idx[v.Path()]; ok {
			s.headTrain = append(s.headTrain, i)
		}
	}
	// view returns the model the layer graphs read, and the index of their first weight.
	view := func(in []*graph.Node, first int) (*hfgraph.Model, int) {
		if t.dropout {
			return p.graph.Dropout(in[first]), first + 1
		}
		return p.graph, first
	}
	builders := []struct {
		e  **model.Exec
		fn func(_ *model.Scope, in []*graph.Node) []*graph.Node
	}{
		{&s.embed, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			return []*graph.Node{p.graph.Embed(in[0], in[1])}
		}},
		// in: x, lengths, [rng], weights → y, [rng]
		{&s.layer, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			m, k := view(in, 2)
			y, rng := m.Layer(in[0], in[1], in[k:])
			if rng != nil {
				return []*graph.Node{y, rng}
			}
			return []*graph.Node{y}
		}},
		// in: x, lengths, dy, [rng], weights → dx, d(trainable weights)
		{&s.layerBack, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			m, k := view(in, 3)
			y, _ := m.Layer(in[0], in[1], in[k:])
			nodes := []*graph.Node{in[0]}
			for _, i := range s.layerTrain {
				nodes = append(nodes, in[k+i])
			}
			return graph.Gradient(graph.ReduceAllSum(graph.Mul(y, in[2])), nodes...)
		}},
		// in: x chunk, targets, valid → logp, entropy, top1
		{&s.stats, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			logp, ent, top1 := p.graph.HeadStats(in[0], in[1], in[2], graph.Const(in[0].Graph(), t.invT))
			return []*graph.Node{logp, ent, top1}
		}},
		// in: x chunk, targets, valid, dlogp, dentropy → dx, d(trainable head weights)
		{&s.headBack, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			g := in[0].Graph()
			logp, ent, _ := p.graph.HeadStats(in[0], in[1], in[2], graph.Const(g, t.invT))
			sum := graph.Add(graph.ReduceAllSum(graph.Mul(logp, in[3])), graph.ReduceAllSum(graph.Mul(ent, in[4])))
			nodes := []*graph.Node{in[0]}
			hv := p.graph.HeadVariables()
			for _, i := range s.headTrain {
				nodes = append(nodes, hv[i].NodeValue(g))
			}
			return graph.Gradient(sum, nodes...)
		}},
		// in: tokens, lengths, dx0 → d(embedding table)
		{&s.embedBack, func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			x := p.graph.Embed(in[0], in[1])
			return graph.Gradient(graph.ReduceAllSum(graph.Mul(x, in[2])), p.graph.EmbedVariable().NodeValue(in[0].Graph()))
		}},
	}
	for _, b := range builders {
		e, err := p.newExec("pretrained-segment", b.fn)
		if err != nil {
			return nil, err
		}
		*b.e = e
	}
	t.seg = s
	return s, nil
}

// segmentedGrads is one micro-batch's gradient call, segment by segment: tok and lens as pad
// lays them out (rows × width), vals the values' [rows, width] tensors, sums their
// whole-batch sums, rng the micro-batch's dropout state (nil without dropout). It returns the
// loss, the metrics (t.metrics order) and adds each trainable variable's gradient into grads
// (trainVars order).
func (t *pretrainedTrainer) segmentedGrads(tok, lens *tensors.Tensor, rows, width int, vals []*tensors.Tensor, sums []float32, rng *tensors.Tensor, add func(i int, g []float32)) (loss float64, metrics []float64, err error) {
	p := t.p
	s, err := t.segGraphs()
	if err != nil {
		return 0, nil, err
	}
	cfg := p.cfg
	nl, hid := cfg.NumHiddenLayers, cfg.HiddenSize
	idx := s.index
	var garbage []*tensors.Tensor
	defer func() {
		for _, g := range garbage {
			_ = g.FinalizeAll()
		}
	}()
	run := func(what string, e *model.Exec, args ...any) ([]*tensors.Tensor, error) {
		out, err := call(e, args...)
		if err != nil {
			return nil, fmt.Errorf("agrl: train step (%s): %w", what, err)
		}
		return out, nil
	}
	weights := func(l int) ([]any, []string, error) {
		vs := p.graph.LayerVariables(l)
		args, paths := make([]any, len(vs)), make([]string, len(vs))
		for i, v := range vs {
			val, err := v.Value()
			if err != nil {
				return nil, nil, err
			}
			args[i], paths[i] = val, v.Path()
		}
		return args, paths, nil
	}

	// 1. Forward through the layers, keeping each layer's input (and RNG state).
	out, err := run("embedding", s.embed, tok, lens)
	if err != nil {
		return 0, nil, err
	}
	xs := []*tensors.Tensor{out[0]}
	var rngs []*tensors.Tensor
	garbage = append(garbage, out[0])
	for l := range nl {
		ws, _, err := weights(l)
		if err != nil {
			return 0, nil, err
		}
		args := []any{xs[l], lens}
		if rng != nil {
			rngs = append(rngs, rng)
			args = append(args, rng)
		}
		out, err := run(fmt.Sprintf("layer %d", l), s.layer, append(args, ws...)...)
		if err != nil {
			return 0, nil, err
		}
		xs = append(xs, out[0])
		garbage = append(garbage, out...)
		if rng != nil {
			rng = out[1]
		}
	}

	// 2. The head's statistics, chunk by chunk, over positions 0 … width-2: position j's
	// target is token j+1, real where j+1 < the row's length.
	np := width - 1
	h := headChunks{rows: rows, np: np, chunk: headChunk(cfg.VocabSize, rows, np)}
	top := tensors.MustCopyFlatData[float32](xs[nl]) // [rows, width, hid]
	_ = xs[nl].FinalizeAll()                         // only the host copy is read from here on
	toks, lengths := tensors.MustCopyFlatData[int32](tok), tensors.MustCopyFlatData[int32](lens)
	targets, valid := make([]int32, rows*np), make([]float32, rows*np)
	for r := range rows {
		for j := range np {
			if int32(j+1) < lengths[r] {
				targets[r*np+j], valid[r*np+j] = toks[r*width+j+1], 1
			}
		}
	}
	type headIn struct{ x, tgt, valid *tensors.Tensor }
	chunks := make([]headIn, (np+h.chunk-1)/h.chunk)
	stats := make([][]float32, 3) // logp, entropy, top1: [rows, np] each
	for k := range stats {
		stats[k] = make([]float32, rows*np)
	}
	for ci := range chunks {
		c := headIn{tensors.FromFlatDataAndDimensions(chunkOf(h, top, ci, hid, width), rows, h.chunk, hid),
			tensors.FromFlatDataAndDimensions(chunkOf(h, targets, ci, 1, np), rows, h.chunk),
			tensors.FromFlatDataAndDimensions(chunkOf(h, valid, ci, 1, np), rows, h.chunk)}
		chunks[ci] = c
		out, err := run("head", s.stats, c.x, c.tgt, c.valid)
		if err != nil {
			return 0, nil, err
		}
		for k, o := range out {
			putChunk(h, stats[k], tensors.MustCopyFlatData[float32](o), ci, 1, np)
			_ = o.FinalizeAll()
		}
	}

	// 3. The loss and its gradient with respect to the statistics.
	loss, metrics, dlogp, dent, err := t.statsLoss(append(stats, valid), rows, np, vals, sums)
	if err != nil {
		return 0, nil, err
	}

	// 4. Backward through the head, chunk by chunk.
	dtop := make([]float32, rows*width*hid)
	hv := p.graph.HeadVariables()
	for ci, c := range chunks {
		split := func(all []float32) *tensors.Tensor {
			return tensors.FromFlatDataAndDimensions(chunkOf(h, all, ci, 1, np), rows, h.chunk)
		}
		out, err := run("head backward", s.headBack, c.x, c.tgt, c.valid, split(dlogp), split(dent))
		if err != nil {
			return 0, nil, err
		}
		putChunk(h, dtop, tensors.MustCopyFlatData[float32](out[0]), ci, hid, width)
		for k, i := range s.headTrain {
			add(idx[hv[i].Path()], tensors.MustCopyFlatData[float32](out[1+k]))
		}
		for _, o := range out {
			_ = o.FinalizeAll()
		}
	}

	// 5. Backward through the layers, last first.
	dy := tensors.FromFlatDataAndDimensions(dtop, rows, width, hid)
	for l := nl - 1; l >= 0; l-- {
		ws, paths, err := weights(l)
		if err != nil {
			return 0, nil, err
		}
		args := []any{xs[l], lens, dy}
		if rng != nil {
			args = append(args, rngs[l])
		}
		out, err := run(fmt.Sprintf("layer %d backward", l), s.layerBack, append(args, ws...)...)
		if err != nil {
			return 0, nil, err
		}
		garbage = append(garbage, out[0])
		if l < nl-1 { // the stream's gradient this call read came from the layer above
			_ = dy.FinalizeAll()
		}
		_ = xs[l].FinalizeAll()
		for k, i := range s.layerTrain {
			j, ok := idx[paths[i]]
			if !ok {
				return 0, nil, fmt.Errorf("agrl: train step: layer %d's weight %s is not trained as layer 0's is", l, paths[i])
			}
			add(j, tensors.MustCopyFlatData[float32](out[1+k]))
			_ = out[1+k].FinalizeAll()
		}
		dy = out[0]
	}

	// 6. The embedding table's gradient, where it is trained.
	if j, ok := idx[p.graph.EmbedVariable().Path()]; ok {
		out, err := run("embedding backward", s.embedBack, tok, lens, dy)
		if err != nil {
			return 0, nil, err
		}
		add(j, tensors.MustCopyFlatData[float32](out[0]))
		_ = out[0].FinalizeAll()
	}
	return loss, metrics, nil
}
