package llm

import (
	"errors"
	"fmt"
	"math"

	"agrl.dev/internal/parallel"
)

// Full fine-tuning on the host: a Trace's BackwardWeights takes the gradient of a loss with
// respect to every weight of the model — the projections and their biases, the RMSNorm gains
// (Qwen3's q/k norms too), the final norm and the embeddings — into WeightGrads, sums laid out
// as the model's own tensors. The LM head's gradient is the caller's, as its loss over the
// logits is (WeightGrads.Head gives the slice to add it to: the embeddings' own when they are
// tied). A projection's weight gradient is one more product per projection than a LoRA
// backward pass takes (dW = dyᵀ·x, as many multiply-adds as its forward product), so a full
// step costs about three forward passes.

// WeightGrads are gradient sums for every weight of a model of one configuration, by
// the checkpoint's tensor names (hf.Config.Tensors), each laid out as the checkpoint stores it
// — or, for the projections when made transposed, as their [in, out] transposes (the layout of
// FromWeightsTransposed and of a GoMLX store, hfgraph.Model.StoredBaseWeights).
type WeightGrads struct {
	g          *Model // its slices hold the sums
	transposed bool
}

// NewWeightGrads returns zero gradient sums for m's weights (its configuration's tensors),
// the projections [in, out] when transposed is set, [out, in] otherwise. With tied
// embeddings there is no lm_head entry: the head's gradient is the embeddings'.
func (m *Model) NewWeightGrads(transposed bool) *WeightGrads {
	zero := func(name string) ([]float32, error) {
		for _, s := range m.cfg.Tensors() {
			if s.Name == name {
				n := 1
				for _, d := range s.Shape {
					n *= d
				}
				return zeros(n), nil
			}
		}
		return nil, fmt.Errorf("no tensor %s", name) // not reached: build asks for cfg's tensors only
	}
	g, err := build(m.cfg, "", zero)
	if err != nil {
		panic(fmt.Errorf("llm: NewWeightGrads: %w", err)) // m's configuration made m
	}
	if transposed {
		for l := range g.layers {
			ly := &g.layers[l]
			for mod := range numModules {
				p := ly.projSlot(mod)
				ly.t[mod], *p = *p, nil // zeros either way: only the layout's meaning changes
			}
		}
	}
	return &WeightGrads{g: g, transposed: transposed}
}

// Transposed reports whether the projections' sums are [in, out] (NewWeightGrads).
func (g *WeightGrads) Transposed() bool { return g.transposed }

// Tensors returns the sums by tensor name: the gradients' own slices, not copies (the
// projections as Transposed says). Clear them with Zero to sum another batch.
func (g *WeightGrads) Tensors() map[string][]float32 {
	out := map[string][]float32{}
	for _, name := range g.g.names() {
		p, l, mod := g.g.slot(name)
		switch {
		case p == nil:
		case *p == nil:
			out[name] = g.g.layers[l].t[mod]
		default:
			out[name] = *p
		}
	}
	return out
}

// Head returns the LM head's gradient sums, [vocab_size, hidden_size] row-major: the slice to
// add dlogitsᵀ·Hidden to (Trace.Hidden). With tied embeddings it is the embeddings' slice.
func (g *WeightGrads) Head() []float32 { return g.g.head }

// Zero clears every sum.
func (g *WeightGrads) Zero() {
	for _, v := range g.Tensors() {
		clear(v)
	}
}

// Release gives the sums' memory back to the pool that traces and NewWeightGrads take their
// buffers from (the collector may still drop it), for a trainer whose next step needs as
// much again. Neither g nor any slice Tensors returned may be used afterwards.
func (g *WeightGrads) Release() {
	for _, v := range g.Tensors() {
		PutFloats(v)
	}
	g.g = nil
}

// projSlot is where ly keeps projection mod's [out, in] weight.
func (ly *layer) projSlot(mod int) *[]float32 {
	switch mod {
	case qProj:
		return &ly.wq
	case kProj:
		return &ly.wk
	case vProj:
		return &ly.wv
	case oProj:
		return &ly.wo
	case gateProj:
		return &ly.gate
	case upProj:
		return &ly.up
	default:
		return &ly.down
	}
}

// bias is projection mod's bias (nil where the family has none).
func (ly *layer) bias(mod int) []float32 {
	return [numModules][]float32{ly.bq, ly.bk, ly.bv, ly.bo, ly.bGate, ly.bUp, ly.bDown}[mod]
}

// BackwardWeights adds to grads the gradient, with respect to every weight of the trace's
// model but the LM head, of a loss whose gradient with respect to Hidden is dh ([Len,
// hidden_size]): the projections (through the adapters' terms too, when the model has any —
// whose own gradients it does not take), their biases, the norms' gains and the embeddings'
// rows the traced ids read. grads must be of the model's configuration (NewWeightGrads, in
// either layout). BackwardWeights may be called once per trace, instead of Backward; it
// frees the trace's memory as it goes.
func (tr *Trace) BackwardWeights(dh []float32, grads *WeightGrads) error {
	switch {
	case tr.layers == nil:
		return errors.New("llm: BackwardWeights: the trace was used already")
	case tr.open > 0:
		return fmt.Errorf("llm: BackwardWeights: %d traces that continue this one have not run their backward pass", tr.open)
	case grads == nil:
		return errors.New("llm: BackwardWeights: nil gradients")
	case len(dh) != tr.n*tr.m.cfg.HiddenSize:
		return fmt.Errorf("llm: BackwardWeights: %d gradient values for %d positions of %d", len(dh), tr.n, tr.m.cfg.HiddenSize)
	}
	if err := grads.fits(tr.m); err != nil {
		return fmt.Errorf("llm: BackwardWeights: %w", err)
	}
	tr.backward(dh, nil, grads)
	return nil
}

// fits reports gradient sums made for another configuration than m's.
func (g *WeightGrads) fits(m *Model) error {
	a, b := g.g.cfg.Tensors(), m.cfg.Tensors()
	if len(a) != len(b) {
		return fmt.Errorf("gradients of %d tensors for a model of %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || fmt.Sprint(a[i].Shape) != fmt.Sprint(b[i].Shape) {
			return fmt.Errorf("gradient %s %v for the model's %s %v", a[i].Name, a[i].Shape, b[i].Name, b[i].Shape)
		}
	}
	return nil
}

// weightGrad adds projection mod's weight and bias gradients to g (layer l): given dy, the
// gradient of its output [rows, out], and x, its input [rows, in] (as the frozen product
// reads it: no dropout), dW += dyᵀ·x ([out, in]) or its transpose xᵀ·dy ([in, out]), and
// db += Σ rows of dy.
func (g *WeightGrads) weightGrad(l, mod int, dy, x []float32, rows, in, out int) {
	ly := &g.g.layers[l]
	if wt := ly.t[mod]; wt != nil {
		mul(in, out, rows, x, 1, in, dy, out, wt, out, true)
	} else {
		mul(out, in, rows, dy, 1, out, x, in, *ly.projSlot(mod), in, true)
	}
	if b := ly.bias(mod); b != nil {
		columnSums(b, rows, out, func(r, lo, hi int, acc []float64) {
			for j, v := range dy[r*out+lo : r*out+hi] {
				acc[j] += float64(v)
			}
		})
	}
}

// columnSums adds to dst ([n]) the sums over rows of what row adds into acc for the columns
// [lo, hi) (acc[j] standing for column lo+j), summed in float64 in row order: each column is
// summed by one goroutine, so the sums do not depend on how the columns are split.
func columnSums(dst []float32, rows, n int, row func(r, lo, hi int, acc []float64)) {
	parallel.Rows((n+15)/16, func(lo, hi int) {
		lo, hi = lo*16, min(n, hi*16)
		acc := make([]float64, hi-lo)
		for r := range rows {
			row(r, lo, hi, acc)
		}
		for j, v := range acc {
			dst[lo+j] += float32(v)
		}
	})
}

// normGainGrad adds to dw ([n]) the gradient of rmsNorm's gain w given its output's gradient
// dy over the rows of x ([·, n]): dw += Σ rows dy ⊙ x · r, r = 1/sqrt(mean(x²) + eps), r
// computed as rmsNorm computes it.
func normGainGrad(dw, x, dy []float32, n int, eps float64) {
	rows := len(x) / n
	inv := make([]float32, rows)
	parallel.Rows(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var ss float64
			for _, v := range x[r*n : (r+1)*n] {
				ss += float64(v) * float64(v)
			}
			inv[r] = float32(1 / math.Sqrt(ss/float64(n)+eps))
		}
	})
	columnSums(dw, rows, n, func(r, lo, hi int, acc []float64) {
		xr, gr := x[r*n+lo:r*n+hi], dy[r*n+lo:r*n+hi]
		for j, v := range xr {
			acc[j] += float64(gr[j] * (v * inv[r]))
		}
	})
}
