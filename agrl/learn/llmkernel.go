package learn

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"agrl.dev/agrl/llm"
)

// The pretrained models' host forward pass (agrl/llm: the sampler of PretrainedPolicy) runs its
// matrix products on the host trainer's vector kernels where they run (GOEXPERIMENT=simd builds
// on AVX-512 or AVX2 CPUs): y = x·wᵀ becomes gemm over a transposed copy of w, [in, out], so
// that the kernels' 16-wide vectors run along the outputs — for a whole prompt (rows = its
// tokens) and for one decoding step alike. The copies are made on first use and dropped when
// the model's weights are collected. A projection the model holds transposed already
// (llm.Model.Share: a GoMLX store's [in, out] variable) is multiplied as it is, by the same
// product, so sharing changes no bit. The LM head has a kernel of its own that reads it in
// place, with no copy (headNT, headkernel.go). Measured in docs/llm.md ("Speed").
func init() {
	if hostKernels {
		llm.SetLinear(hostLinear)
		llm.SetLinearT(productTInto)
		llm.SetProduct(hostProduct)
		llm.SetAttention(hostAttend)
		llm.SetSharedAttention(hostAttendShared)
		llm.SetHead(headNT)
		llm.SetMul(hostMul)
		llm.SetTranspose(hostTranspose)
		llm.SetExpSum(expSum)
	} // llm.SetSwiGLU's kernels install themselves (swiglu_simd.go)
}

// hostTranspose is llm.SetTranspose's kernel: transposeBlock over the cores.
func hostTranspose(dst []float32, ldd int, src []float32, r, c, lds int, add bool) {
	transposeWorkers(runtime.GOMAXPROCS(0), dst, ldd, src, r, c, lds, add)
}

// hostMul is llm.SetMul's kernel (the LoRA backward pass, pretrained_host.go): C (+)= op(A)·B
// on the gemm kernels, the rows over the cores, or for a few rows the columns.
func hostMul(m, n, k int, a []float32, ai, ak int, b []float32, ldb int, c []float32, ldc int, add bool) {
	workers := runtime.GOMAXPROCS(0)
	if m >= 8*workers || n < 64*workers {
		gemmRowsK(workers, m, n, k, a, ai, ak, b, ldb, c, ldc, add)
		return
	}
	chunked(workers, n, 16, 64, func(lo, hi int) {
		gemmK(m, hi-lo, k, a, ai, ak, b[lo:], ldb, c[lo:], ldc, add)
	})
}

// transposed maps a weight (its first element, weakly) to its transposed copy.
var transposed sync.Map // weak.Pointer[float32] → []float32

func transposedOf(w []float32, out, in int) []float32 {
	first := unsafe.SliceData(w)
	key := weak.Make(first)
	if v, ok := transposed.Load(key); ok {
		if wt := v.([]float32); len(wt) == len(w) {
			return wt
		}
		return transpose(w, out, in) // another slice starting at the same element: no caching
	}
	wt := transpose(w, out, in)
	if v, loaded := transposed.LoadOrStore(key, wt); loaded {
		return v.([]float32)
	}
	runtime.AddCleanup(first, func(k weak.Pointer[float32]) { transposed.Delete(k) }, key)
	return wt
}

// hostLinear is llm.SetLinear's kernel: x [rows, in] times wᵀ (w [out, in]).
func hostLinear(x []float32, rows, in int, w []float32, out int) []float32 {
	return productT(x, rows, in, transposedOf(w, out, in), out)
}

// hostProduct is llm.SetProduct's kernel: hostLinear for a w that may change (a LoRA
// adapter's), transposed afresh at every call (into a buffer of llm.Floats' pool) and kept
// nowhere.
func hostProduct(y, x []float32, rows, in int, w []float32, out int) {
	wt := llm.Floats(out * in)
	transposeBlock(wt, out, w, out, in, in, false)
	productTInto(y, x, rows, in, wt, out)
	llm.PutFloats(wt)
}

// productT is x [rows, in] times wt [in, out], over the cores: by rows for many rows, by
// outputs for a few (each element one chain of multiply-adds either way).
func productT(x []float32, rows, in int, wt []float32, out int) []float32 {
	y := make([]float32, rows*out)
	productTInto(y, x, rows, in, wt, out)
	return y
}

// productTInto is productT into y (llm.SetLinearT's kernel), every element written.
//
// Many rows (a prompt, a scoring pass) are split over the cores, each computing its rows
// against all of wt. Fewer than splitRows a core (decoding steps, one per sequence) split the
// outputs instead, in pieces of whole 32-wide blocks of at least decodeChunk columns: a
// decoding step's product streams its weights from memory, and so each core reads only its
// share of them (a row split would read them all on every core), and a projection as narrow
// as SmolLM2-135M's 576 outputs (which 512-wide pieces left to one core) still takes both
// cores' share of the memory's bandwidth. Rows past the last multiple of 8, when more than 2,
// are padded to 8 with zero rows: the 8-row kernel reads the weights once for them, where
// 4-row and single-row kernels read them once for each 4 rows or each row (2 single rows cost
// what the padding does). Every row is still one chain of multiply-adds, so no bit changes
// (TestProductTRows).
func productTInto(y, x []float32, rows, in int, wt []float32, out int) {
	workers := runtime.GOMAXPROCS(0)
	if rows >= splitRows*workers {
		gemmRowsSet(workers, rows, out, in, x, in, 1, wt, out, y, out)
		return
	}
	xs, ys, n := x, y, rows
	if r := rows % 8; r > 2 && gemmRowBlock() == 8 {
		n = rows + 8 - r
		xs, ys = llm.Floats(n*in), llm.Floats(n*out)
		copy(xs, x[:rows*in])
		clear(xs[rows*in:])
	}
	chunked(workers, out, 32, decodeChunk, func(lo, hi int) {
		gemmSet(n, hi-lo, in, xs, in, 1, wt[lo:], out, ys[lo:], out)
	})
	if n != rows {
		copy(y[:rows*out], ys)
		llm.PutFloats(xs, ys)
	}
}

// decodeChunk is the fewest columns productTInto gives a core in a decoding step's product,
// and splitRows the rows a core from which it splits the rows over the cores instead.
const decodeChunk, splitRows = 128, 32

// hostAttend is llm.SetAttention's kernel: causal grouped-query attention as matrix products
// on the host kernels, over the keys as a cache holds them, transposed, in one span or two (a
// clone's shared prefix, then its own positions). A decoding step (T = 1) takes the query
// heads that share a key-value head together, as the rows of one product: their queries lie
// side by side in q, and their results in out. A longer call goes head by head in tiles of
// query rows, so that the scores take at most attnTile values whatever the prompt's length.
// Either way a row's scores are S = q·Kᵀ·(1/√D) over the positions it sees (in a tile, those
// its last row sees: one product per span, into the columns of its positions), each row's
// visible positions go through the vector exp (expSum) and are divided by their sum, the rest
// weigh 0, and the result is S·V (a product over each span's values as the cache holds them,
// the second continuing the first's sums: gemmK's load). Each element is one chain of
// multiply-adds whatever the rows beside it and wherever the spans split the positions, so
// the grouping, the tiles and the sharing change no bit. Each call computes from its own
// arguments only, single-threaded except that the heads of a long prompt, or of a step over
// a long cache, are spread over the cores (attnSpread); its scratch comes from a pool.
func hostAttend(out, q []float32, pre, own llm.Span, T, nq, nkv, D int) {
	n := pre.Len + own.Len
	start := n - T
	kvw, group := nkv*D, nq/nkv
	scale := float32(1 / math.Sqrt(float64(D)))
	// scores writes rows × w scores (the first w positions; w > pre.Len, the queries being in
	// own) into s, rows ld apart, for the rows of a [rows, D] at a[0:] with rows ai apart,
	// against key-value head kh.
	scores := func(rows, w int, a []float32, ai, kh int, s []float32, ld int) {
		if pre.Len > 0 {
			gemmSet(rows, pre.Len, D, a, ai, 1, pre.Keys[kh*D*pre.Stride:], pre.Stride, s, ld)
		}
		gemmSet(rows, w-pre.Len, D, a, ai, 1, own.Keys[kh*D*own.Stride:], own.Stride, s[pre.Len:], ld)
	}
	// weigh writes into c (rows ldc apart) the scores' weighted sum of key-value head kh's
	// values over the first w positions.
	weigh := func(rows, w int, s []float32, ld, kh int, c []float32, ldc int) {
		if pre.Len > 0 {
			gemmSet(rows, D, pre.Len, s, ld, 1, pre.Values[kh*D:], kvw, c, ldc)
		}
		gemmK(rows, D, w-pre.Len, s[pre.Len:], ld, 1, own.Values[kh*D:], kvw, c, ldc, pre.Len > 0)
	}
	// A decoding step (T = 1): the group's heads are the rows [group, D] of q and of out.
	decode := func(kh int, s []float32) {
		scores(group, n, q[kh*group*D:], D, kh, s, n)
		for g := range group {
			llm.Softmax(s[g*n:(g+1)*n], scale)
		}
		weigh(group, n, s, n, kh, out[kh*group*D:], D)
	}
	tile := max(1, min(T, attnTile/n))
	head := func(kh int, s []float32) {
		for g := range group {
			hd := kh*group + g
			for t0 := 0; t0 < T; t0 += tile {
				t1 := min(T, t0+tile)
				w := start + t1 // the positions the tile's last row sees
				scores(t1-t0, w, q[t0*nq*D+hd*D:], nq*D, kh, s, w)
				for t := t0; t < t1; t++ {
					row := s[(t-t0)*w : (t-t0+1)*w]
					llm.Softmax(row[:start+t+1], scale) // its exponentials by expSum (init installs it)
					clear(row[start+t+1:])
				}
				weigh(t1-t0, w, s, w, kh, out[t0*nq*D+hd*D:], nq*D)
			}
		}
	}
	workers := 1
	if T*n*D*nq >= attnSpread { // a prompt, or a step over a long cache: its heads over the cores
		workers = min(nkv, runtime.GOMAXPROCS(0))
	}
	parallel(workers, func(w, nw int) {
		rows := tile
		if T == 1 {
			rows = group
		}
		s := scratch(rows * n)
		defer attnScratch.Put(s)
		for kh := w; kh < nkv; kh += nw {
			if T == 1 {
				decode(kh, *s)
			} else {
				head(kh, *s)
			}
		}
	})
}

// attnTile is the most scores one tile of hostAttend holds (4 MB); tests lower it.
var attnTile = 1 << 20

// attnSpread is the work (query rows × positions × head_dim × heads) from which hostAttend
// spreads a call's key-value heads over the cores; tests lower it.
var attnSpread = 1 << 22

// attnScratch holds hostAttend's buffers between calls.
var attnScratch sync.Pool

// scratch returns a pooled buffer of n float32s (its values are overwritten before use).
func scratch(n int) *[]float32 {
	if b, ok := attnScratch.Get().(*[]float32); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]float32, n)
	return &b
}

// hostAttendShared is llm.SetSharedAttention's kernel: the decoding steps of sequences that
// share a cached prefix (a rollout's episodes of one prompt), each one query row per head,
// attend over the prefix together. For each key-value head, a chunk of the sequences' query
// rows (the heads of the head's group, sequence after sequence: at least 8 rows, so that the
// 8-row kernel runs) is one product against the prefix's keys and one against its values,
// which read the prefix once for the chunk instead of once per sequence; each sequence's own
// positions are its own products, the scores into the columns after the prefix's and the
// weighted values continuing the prefix's sums (gemmK's load), and each row's softmax runs
// over its whole row. Every element is the chain of multiply-adds hostAttend computes for the
// sequence alone (rows do not change each other's), so the logits keep their bits. The
// (head, chunk) pieces are spread over the cores.
func hostAttendShared(out, q [][]float32, pre llm.Span, own []llm.Span, nq, nkv, D int) {
	E, kvw, group := len(q), nkv*D, nq/nkv
	scale := float32(1 / math.Sqrt(float64(D)))
	per := max(1, (8+group-1)/group) // sequences a chunk
	chunks := (E + per - 1) / per
	W := 0 // the widest row: the prefix and the longest own span
	for _, o := range own {
		W = max(W, pre.Len+o.Len)
	}
	piece := func(kh, ch int, s, qg []float32) {
		e0, e1 := ch*per, min(E, (ch+1)*per)
		rows := (e1 - e0) * group
		for e := e0; e < e1; e++ { // the group's query rows of each sequence, side by side
			copy(qg[(e-e0)*group*D:(e-e0+1)*group*D], q[e][kh*group*D:])
		}
		gemmSet(rows, pre.Len, D, qg, D, 1, pre.Keys[kh*D*pre.Stride:], pre.Stride, s, W)
		for e := e0; e < e1; e++ {
			o, r := own[e], (e-e0)*group
			gemmSet(group, o.Len, D, qg[r*D:], D, 1, o.Keys[kh*D*o.Stride:], o.Stride, s[r*W+pre.Len:], W)
			for g := range group {
				llm.Softmax(s[(r+g)*W:(r+g)*W+pre.Len+o.Len], scale)
			}
		}
		og := qg // the queries are read: the results go in their place
		gemmSet(rows, D, pre.Len, s, W, 1, pre.Values[kh*D:], kvw, og, D)
		for e := e0; e < e1; e++ {
			o, r := own[e], (e-e0)*group
			gemmK(group, D, o.Len, s[r*W+pre.Len:], W, 1, o.Values[kh*D:], kvw, og[r*D:], D, true)
			copy(out[e][kh*group*D:(kh+1)*group*D], og[r*D:(r+group)*D])
		}
	}
	tasks := nkv * chunks
	var next atomic.Int64
	parallel(min(tasks, runtime.GOMAXPROCS(0)), func(w, nw int) {
		rows := per * group
		s, qg := scratch(rows*W), scratch(rows*D)
		defer attnScratch.Put(s)
		defer attnScratch.Put(qg)
		for t := int(next.Add(1)) - 1; t < tasks; t = int(next.Add(1)) - 1 {
			piece(t/chunks, t%chunks, *s, *qg)
		}
	})
}
