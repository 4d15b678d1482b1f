package learn

import (
	"agrl.dev/agrl"

	"errors"
	"slices"
	"sort"
	"sync"

	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// A batch of sequences of mixed lengths is computed in pieces: the sequences are sorted by
// length and cut into runs of similar length, each padded only to its own length bucket, and
// the pieces are spread over the workers (one per core on the go backend) that run them
// concurrently. Padding the whole batch to its longest sequence made half of the calc warm
// start's positions padding (docs/performance.md); the sum over pieces of the per-piece sums
// is the whole batch's, so losses and gradients are unchanged up to float rounding.

// pieceOverhead is the fixed cost of one graph call in units of token positions (measured on
// the go backend: a training call on a handful of rows costs about as much as this many more
// positions), so that the plan does not cut a batch into many tiny pieces.
const pieceOverhead = 96

// piecePlan is how a batch is cut: pieces[k] lists the indices of the batch's sequences that
// piece k holds (sorted by length, shortest first), and workers[w] the pieces worker w runs,
// in order.
type piecePlan struct {
	pieces  [][]int
	workers [][]int
}

// planPieces cuts a batch of sequences with the given lengths into pieces for the given number
// of workers. A piece holds at most maxRows sequences. With split false (backends that pay
// little for padding, or whose graph calls cost more) it cuts the batch in order into the
// fewest equal pieces that fit maxRows, at least one per worker.
func planPieces(lens []int, workers, maxRows, context int, split bool) piecePlan {
	n := len(lens)
	workers = max(1, min(workers, n))
	if !split {
		var plan piecePlan
		count := max(workers, (n+maxRows-1)/maxRows)
		plan.workers = make([][]int, min(workers, count))
		for k := range count {
			lo, hi := k*n/count, (k+1)*n/count
			idx := make([]int, 0, hi-lo)
			for i := lo; i < hi; i++ {
				idx = append(idx, i)
			}
			plan.pieces = append(plan.pieces, idx)
			plan.workers[k%len(plan.workers)] = append(plan.workers[k%len(plan.workers)], k)
		}
		return plan
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lens[order[a]] < lens[order[b]] })
	// No piece may hold more than its worker's share of the batch, so that every worker has
	// work even when all lengths are alike. Smaller caps cut finer, which balances the workers
	// better at the cost of more graph calls: the plan whose busiest worker has the least to
	// do wins.
	share := max(1, min(maxRows, bucketBatch((n+workers-1)/workers)))
	var best piecePlan
	bestLoad := -1
	for rows := share; rows >= 1 && rows*4 >= share; rows /= 2 {
		plan, load := cutPieces(lens, order, workers, rows, context)
		if bestLoad < 0 || load < bestLoad {
			best, bestLoad = plan, load
		}
	}
	return best
}

// cutPieces cuts the sequences, sorted by length in order, into runs of at most rows
// sequences with the least total cost (padded positions plus pieceOverhead a piece), spreads
// them over the workers and returns the plan with the cost of its busiest worker.
func cutPieces(lens, order []int, workers, rows, context int) (piecePlan, int) {
	n := len(order)
	// cost[i]: the cheapest cut of the i shortest sequences; from[i] where its last piece starts.
	cost := make([]int, n+1)
	from := make([]int, n+1)
	for i := 1; i <= n; i++ {
		cost[i] = -1
		longest := padLen(lens[order[i-1]], context)
		for j := i - 1; j >= 0 && i-j <= rows; j-- {
			c := cost[j] + bucketBatch(i-j)*longest + pieceOverhead
			if cost[i] < 0 || c < cost[i] {
				cost[i], from[i] = c, j
			}
		}
	}
	var plan piecePlan
	var pieceCost []int
	for i := n; i > 0; i = from[i] {
		j := from[i]
		plan.pieces = append(plan.pieces, slices.Clone(order[j:i]))
		pieceCost = append(pieceCost, bucketBatch(i-j)*padLen(lens[order[i-1]], context)+pieceOverhead)
	}
	slices.Reverse(plan.pieces)
	slices.Reverse(pieceCost)
	// Longest processing time first: each piece, costliest first, goes to the least loaded
	// worker (ties: the lower index, so plans are deterministic).
	byCost := make([]int, len(plan.pieces))
	for k := range byCost {
		byCost[k] = k
	}
	sort.SliceStable(byCost, func(a, b int) bool { return pieceCost[byCost[a]] > pieceCost[byCost[b]] })
	load := make([]int, workers)
	plan.workers = make([][]int, workers)
	for _, k := range byCost {
		w := 0
		for v := range load {
			if load[v] < load[w] {
				w = v
			}
		}
		load[w] += pieceCost[k]
		plan.workers[w] = append(plan.workers[w], k)
	}
	for w := range plan.workers {
		sort.Ints(plan.workers[w])
	}
	for len(plan.workers) > 0 && len(plan.workers[len(plan.workers)-1]) == 0 {
		plan.workers = plan.workers[:len(plan.workers)-1]
	}
	return plan, slices.Max(load)
}

// runPieces calls e on the arguments of every piece, each worker of the plan running its
// pieces in order, the workers concurrently. outs[k] are piece k's outputs.
func runPieces(e *model.Exec, args [][]any, plan piecePlan) ([][]*tensors.Tensor, error) {
	outs := make([][]*tensors.Tensor, len(args))
	errs := make([]error, len(args))
	var wg sync.WaitGroup
	for _, ks := range plan.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range ks {
				if outs[k], errs[k] = call(e, args[k]...); errs[k] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

// splitsPieces reports whether batches are cut by length (the go backend, where every padded
// position costs its full compute and a graph call little).
func (p *Policy) splitsPieces() bool { return p.backend.String() == "go" && !p.wholeBatches }

// packRow is the shortest row packed batches use: sequences shorter than it share rows.
const packRow = 128

// packRows packs sequences of the given lengths into rows of capacity tokens, first fit by
// decreasing length; each row lists the indices of its sequences in the order they sit.
func packRows(lens []int, capacity int) [][]int {
	order := make([]int, len(lens))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lens[order[a]] > lens[order[b]] })
	var rows [][]int
	var free []int
	for _, i := range order {
		placed := false
		for r := range rows {
			if free[r] >= lens[i] {
				rows[r], free[r] = append(rows[r], i), free[r]-lens[i]
				placed = true
				break
			}
		}
		if !placed {
			rows, free = append(rows, []int{i}), append(free, capacity-lens[i])
		}
	}
	return rows
}

// packable reports whether sequences can share rows: each starts with BOS and holds no other
// (the model starts a new sequence at every BOS).
func packable(seqs [][]int32) bool {
	for _, s := range seqs {
		if len(s) == 0 || s[0] != agrl.BOS || slices.Contains(s[1:], agrl.BOS) {
			return false
		}
	}
	return true
}
