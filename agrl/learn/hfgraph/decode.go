package hfgraph

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// CacheShape is the shape of one sequence's KV cache in Decode's graphs, for capacity
// positions: [layers, 2, key-value heads, capacity, head_dim] float32, keys at index 0 of the
// second axis and values at 1, each position's keys already rotated (RoPE at its absolute
// position). A cache of length n holds the sequence's first n positions in slots 0 … n−1; the
// slots after them are ignored (Decode masks them), whatever they hold.
func (m *Model) CacheShape(capacity int) shapes.Shape {
	c := m.cfg
	return shapes.Make(dtypes.Float32, c.NumHiddenLayers, 2, c.NumKeyValueHeads, capacity, c.HeadDim)
}

// Decode runs new tokens of a batch of sequences through the decoder on top of their KV
// caches, the incremental form of Logits: what sampling needs on a backend that keeps the
// caches in its own memory (XLA on a GPU).
//
//	caches  B nodes of CacheShape(C), one per sequence, all of the same capacity C
//	ids     [B, S] int32: row b holds counts[b] new tokens (1 … S), then padding (ignored)
//	starts  [B] int32: the positions each cache holds already (its length)
//	counts  [B] int32
//
// It returns logits [B, vocab]: row b scores the token after the sequence's last new token, as
// Logits does for the whole sequence; and the B updated caches, each with slots
// starts[b] … starts[b]+S−1 overwritten (those past starts[b]+counts[b] with padding's keys,
// ignored later). Every row needs starts[b] + counts[b] ≤ C, which the graph cannot check:
// new positions past the capacity are dropped, so the caller must grow caches first. RoPE positions count from 0 at each sequence's first token;
// queries attend to the cache's first starts[b] slots and causally to the real new tokens.
func (m *Model) Decode(caches []*graph.Node, ids, starts, counts *graph.Node) (logits *graph.Node, updated []*graph.Node) {
	c := m.cfg
	b, s := len(caches), 0
	if is := ids.Shape(); is.Rank() == 2 && is.DType == dtypes.Int32 {
		s = is.Dimensions[1]
		if is.Dimensions[0] != b {
			s = 0
		}
	}
	for _, x := range []*graph.Node{starts, counts} {
		if sh := x.Shape(); sh.Rank() != 1 || sh.DType != dtypes.Int32 || sh.Dimensions[0] != b {
			s = 0
		}
	}
	if b == 0 || s == 0 {
		panic(fmt.Errorf("hfgraph: Decode wants B ≥ 1 caches, ids [B, S] int32, starts and counts [B] int32; got %d caches, %s, %s, %s",
			b, ids.Shape(), starts.Shape(), counts.Shape()))
	}
	capacity := caches[0].Shape().Dimensions[3]
	for i, k := range caches {
		if want := m.CacheShape(capacity); !k.Shape().Equal(want) {
			panic(fmt.Errorf("hfgraph: Decode: cache %d has shape %s, want %s", i, k.Shape(), want))
		}
	}
	if capacity > c.MaxPositionEmbeddings {
		panic(fmt.Errorf("hfgraph: Decode: cache capacity %d exceeds max_position_embeddings %d", capacity, c.MaxPositionEmbeddings))
	}
	g := ids.Graph()
	w := m.graphWeights(g)
	hd, nq, nkv, nl := c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads, c.NumHiddenLayers
	grp := nq / nkv
	eps := c.RMSNormEps

	iota := graph.Iota(g, shapes.Make(dtypes.Int32, b, s), 1) // [B, S]: i
	isNew := graph.LessThan(iota, graph.InsertAxes(counts, -1))
	tok := graph.Where(isNew, ids, graph.ScalarZero(g, dtypes.Int32))
	x := w.embedRows(tok) // [B, S, H]

	// RoPE at absolute positions start+i, from the tables of positions 0 … C−1 (clamped, so
	// that a padding row past the capacity still reads a table entry).
	pos := graph.Add(iota, graph.InsertAxes(starts, -1))
	pos = graph.Clamp(graph.ScalarZero(g, dtypes.Int32), pos, graph.Scalar(g, dtypes.Int32, capacity-1))
	cosT, sinT := m.ropeTables(g, capacity) // [1, C, 1, hd]
	gatherPos := func(t *graph.Node) *graph.Node {
		t = graph.Reshape(t, capacity, hd)
		return graph.Reshape(graph.Gather(t, graph.InsertAxes(pos, -1)), b, s, 1, hd)
	}
	cos, sin := gatherPos(cosT), gatherPos(sinT)

	bias := decodeBias(starts, counts, b, s, capacity, nkv, grp) // [B·nkv, grp·S, C+S]
	scale := 1 / math.Sqrt(float64(hd))
	old := graph.Stack(caches, 0) // [B, L, 2, nkv, C, hd]
	all := graph.AxisRange()
	newKV := make([]*graph.Node, 0, 2*nl) // per layer: keys then values, [B, nkv, S, hd]

	for l := range w.layers {
		lw := &w.layers[l]
		h := rmsNorm(x, lw.inputNorm, eps)
		q := graph.Reshape(w.project(h, &lw.proj[qProj]), b, s, nq, hd)
		k := graph.Reshape(w.project(h, &lw.proj[kProj]), b, s, nkv, hd)
		v := graph.Reshape(w.project(h, &lw.proj[vProj]), b, s, nkv, hd)
		if lw.qNorm != nil {
			q, k = rmsNorm(q, lw.qNorm, eps), rmsNorm(k, lw.kNorm, eps)
		}
		q, k = rope(q, cos, sin), rope(k, cos, sin)
		k = graph.TransposeAllAxes(k, 0, 2, 1, 3) // [B, nkv, S, hd]
		v = graph.TransposeAllAxes(v, 0, 2, 1, 3)
		newKV = append(newKV, k, v)

		layer := func(kv int) *graph.Node { // the cache's keys (0) or values (1) of layer l: [B, nkv, C, hd]
			t := graph.Slice(old, all, graph.AxisElem(l), graph.AxisElem(kv), all, all, all)
			return graph.Reshape(t, b, nkv, capacity, hd)
		}
		keys := graph.Concatenate([]*graph.Node{layer(0), k}, 2) // [B, nkv, C+S, hd]
		vals := graph.Concatenate([]*graph.Node{layer(1), v}, 2)
		q = graph.Reshape(graph.TransposeAllAxes(graph.Reshape(q, b, s, nkv, grp, hd), 0, 2, 3, 1, 4), b*nkv, grp*s, hd)
		kT := graph.Reshape(graph.TransposeAllAxes(keys, 0, 1, 3, 2), b*nkv, hd, capacity+s)
		vals = graph.Reshape(vals, b*nkv, capacity+s, hd)
		sc := graph.DotGeneral(q, []int{2}, []int{0}, kT, []int{1}, []int{0}) // [B·nkv, grp·S, C+S]
		sc = graph.Add(graph.MulScalar(sc, scale), bias)
		a := graph.DotGeneral(graph.Softmax(sc, -1), []int{2}, []int{0}, vals, []int{1}, []int{0}) // [B·nkv, grp·S, hd]
		a = graph.Reshape(graph.TransposeAllAxes(graph.Reshape(a, b, nkv, grp, s, hd), 0, 3, 1, 2, 4), b, s, nq*hd)
		x = graph.Add(x, w.project(a, &lw.proj[oProj]))

		h = rmsNorm(x, lw.postNorm, eps)
		gate, up := w.project(h, &lw.proj[gateProj]), w.project(h, &lw.proj[upProj])
		x = graph.Add(x, w.project(graph.Mul(silu(gate), up), &lw.proj[downProj]))
	}

	// The hidden state of each row's last new token, then the head: [B, V].
	last := graph.AddScalar(counts, -1)
	bIdx := graph.Iota(g, shapes.Make(dtypes.Int32, b), 0)
	x = graph.Gather(x, graph.Stack([]*graph.Node{bIdx, last}, -1)) // [B, H]
	x = rmsNorm(x, w.norm, eps)
	logits = matmul(x, w.head, 1)

	// The new positions' keys and values, [B, L, 2, nkv, S, hd], written into each cache at
	// its start: slot j takes new position j−start where 0 ≤ j−start < S, and keeps its value
	// elsewhere. (A select over the whole cache rather than DynamicUpdateSlice, which the go
	// backend lacks; without buffer donation XLA copies the whole cache for either.)
	upd := graph.Reshape(graph.Stack(newKV, 1), b, nl, 2, nkv, s, hd)
	upd = graph.TransposeAllAxes(upd, 0, 4, 1, 2, 3, 5) // [B, S, L, 2, nkv, hd]
	slot := graph.Iota(g, shapes.Make(dtypes.Int32, capacity), 0)
	updated = make([]*graph.Node, b)
	for i, cache := range caches {
		row := graph.Reshape(graph.Slice(upd, graph.AxisElem(i), all, all, all, all, all), s, nl, 2, nkv, hd)
		rel := graph.Sub(slot, graph.Reshape(graph.Slice(starts, graph.AxisElem(i)))) // [C]
		in := graph.LogicalAnd(graph.GreaterOrEqual(rel, graph.ScalarZero(g, dtypes.Int32)), graph.LessThan(rel, graph.Scalar(g, dtypes.Int32, s)))
		rel = graph.Clamp(graph.ScalarZero(g, dtypes.Int32), rel, graph.Scalar(g, dtypes.Int32, s-1))
		moved := graph.TransposeAllAxes(graph.Gather(row, graph.InsertAxes(rel, -1)), 1, 2, 3, 0, 4) // [L, 2, nkv, C, hd]
		in = graph.BroadcastToDims(graph.Reshape(in, 1, 1, 1, capacity, 1), nl, 2, nkv, capacity, hd)
		updated[i] = graph.Where(in, moved, cache)
	}
	return logits, updated
}

// decodeBias is Decode's additive attention mask [B·nkv, grp·S, C+S], laid out as its stacked
// queries: query i of row b sees cache slot j < C when j < starts[b], and new position C+i'
// when i' ≤ i and i' < counts[b]; maskedScore elsewhere.
func decodeBias(starts, counts *graph.Node, b, s, capacity, nkv, grp int) *graph.Node {
	g := starts.Graph()
	sh := shapes.Make(dtypes.Int32, b, s, capacity+s)
	qi, kj := graph.Iota(g, sh, 1), graph.Iota(g, sh, 2)
	st := graph.BroadcastToDims(graph.Reshape(starts, b, 1, 1), b, s, capacity+s)
	n := graph.BroadcastToDims(graph.Reshape(counts, b, 1, 1), b, s, capacity+s)
	c := graph.Scalar(g, dtypes.Int32, capacity)
	inCache := graph.LogicalAnd(graph.LessThan(kj, c), graph.LessThan(kj, st))
	j := graph.Sub(kj, c) // the new position's index, where kj ≥ C
	isNew := graph.LogicalAnd(graph.GreaterOrEqual(kj, c), graph.LogicalAnd(graph.LessOrEqual(j, qi), graph.LessThan(j, n)))
	visible := graph.LogicalOr(inCache, isNew)
	bias := graph.MulScalar(graph.OneMinus(graph.ConvertDType(visible, dtypes.Float32)), maskedScore)
	bias = graph.BroadcastToDims(graph.Reshape(bias, b, 1, 1, s, capacity+s), b, nkv, grp, s, capacity+s)
	return graph.Reshape(bias, b*nkv, grp*s, capacity+s)
}
