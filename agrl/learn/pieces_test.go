package learn

import (
	"math"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"github.com/gomlx/gomlx/core/tensors"
)

// checkPlan checks that a plan covers every sequence exactly once, within maxRows a piece,
// shortest first within a piece, and that every worker has work.
func checkPlan(t *testing.T, lens []int, plan piecePlan, maxRows int) {
	t.Helper()
	seen := make([]int, len(lens))
	for _, piece := range plan.pieces {
		if len(piece) == 0 || len(piece) > maxRows {
			t.Fatalf("piece of %d sequences (max %d): %v", len(piece), maxRows, plan.pieces)
		}
		for i, j := range piece {
			seen[j]++
			if i > 0 && lens[piece[i-1]] > lens[j] {
				t.Fatalf("piece not sorted by length: %v", piece)
			}
		}
	}
	for j, n := range seen {
		if n != 1 {
			t.Fatalf("sequence %d in %d pieces", j, n)
		}
	}
	var ran []int
	for w, ks := range plan.workers {
		if len(ks) == 0 {
			t.Fatalf("worker %d has no piece", w)
		}
		ran = append(ran, ks...)
	}
	slices.Sort(ran)
	for k := range plan.pieces {
		if k >= len(ran) || ran[k] != k {
			t.Fatalf("pieces run %v, want each of %d once", ran, len(plan.pieces))
		}
	}
}

// positions returns the padded token positions the plan computes.
func (pl piecePlan) positions(lens []int, context int) int {
	total := 0
	for _, piece := range pl.pieces {
		longest := 0
		for _, i := range piece {
			longest = max(longest, lens[i])
		}
		total += bucketBatch(len(piece)) * padLen(longest, context)
	}
	return total
}

func TestPlanPieces(t *testing.T) {
	// 32 lengths spread like the calc warm start's demonstrations (mean ≈ 40, max 74).
	lens := []int{22, 74, 31, 36, 28, 45, 62, 33, 25, 38, 51, 29, 36, 41, 66, 24,
		35, 30, 58, 27, 39, 34, 47, 23, 36, 70, 26, 32, 43, 37, 55, 31}
	plan := planPieces(lens, 2, 64, 512, true)
	checkPlan(t, lens, plan, 16)
	whole := bucketBatch(16) * bucketLen(74, 512) * 2 // two shards padded to the longest
	got := plan.positions(lens, 512)
	if got*10 > whole*7 {
		t.Errorf("pieces compute %d positions, the whole batch %d: want at least 30%% fewer", got, whole)
	}
	if len(plan.workers) != 2 {
		t.Errorf("%d workers used, want 2", len(plan.workers))
	}

	// All lengths alike: both workers still get half of the batch.
	same := slices.Repeat([]int{40}, 32)
	plan = planPieces(same, 2, 64, 512, true)
	checkPlan(t, same, plan, 16)
	if len(plan.workers) != 2 {
		t.Errorf("equal lengths: %d workers used, want 2", len(plan.workers))
	}

	// One sequence, more workers than sequences.
	plan = planPieces([]int{9}, 4, 64, 512, true)
	checkPlan(t, []int{9}, plan, 1)

	// Without splitting: contiguous pieces in batch order, at most maxRows each.
	plan = planPieces(slices.Repeat([]int{40}, 100), 1, 64, 512, false)
	if len(plan.pieces) != 2 || plan.pieces[0][0] != 0 || plan.pieces[1][0] != 50 || len(plan.workers) != 1 {
		t.Errorf("unsplit plan %v / %v", len(plan.pieces), plan.workers)
	}
}

func TestPackRows(t *testing.T) {
	lens := []int{74, 22, 40, 40, 60, 90, 128, 10, 36}
	rows := packRows(lens, 128)
	seen := make([]int, len(lens))
	for _, row := range rows {
		used := 0
		for _, i := range row {
			seen[i]++
			used += lens[i]
		}
		if used > 128 {
			t.Errorf("row %v holds %d tokens, capacity 128", row, used)
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("sequence %d packed %d times", i, n)
		}
	}
	total := 0
	for _, l := range lens {
		total += l
	}
	if min := (total + 127) / 128; len(rows) > min+1 {
		t.Errorf("%d rows for %d tokens (at least %d needed)", len(rows), total, min)
	}
	if !packable([][]int32{{1, 5, 6}, {1, 7}}) || packable([][]int32{{1, 5, 1, 6}}) || packable([][]int32{{5, 6}}) {
		t.Error("packable: want true only for sequences that start with BOS and hold no other")
	}
}

// TestPackedRowsScoreLikeSeparateRows: a packed training batch (several sequences per row,
// each attending only to itself, positions from its own BOS) has the loss and metrics of the
// same sequences one per row.
func TestPackedRowsScoreLikeSeparateRows(t *testing.T) {
	p := MustNewPolicy(testLM().Seed(3).Shards(1))
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW(), 1)
	if err != nil {
		t.Fatal(err)
	}
	b := sftBatch(t, p.Tokenizer(), 9)
	packed, err := tr.Eval(b)
	if err != nil {
		t.Fatal(err)
	}
	p.wholeBatches = true // one sequence per row, padded
	whole, err := tr.Eval(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(packed.Loss - whole.Loss); d > 1e-5 || packed.Metrics["tokens"] != whole.Metrics["tokens"] {
		t.Errorf("packed loss %v (%v tokens), one per row %v (%v tokens)", packed.Loss, packed.Metrics["tokens"], whole.Loss, whole.Metrics["tokens"])
	}
	p.wholeBatches = false
	args, _, _ := tr.pieceArgs(b)
	if rows := args[0][0].(*tensors.Tensor).Shape().Dimensions[0]; rows >= len(b.Tokens) {
		t.Errorf("%d sequences packed into %d rows: want fewer rows than sequences", len(b.Tokens), rows)
	}
}

// TestPackedGradientsMatchWholeBatch compares the raw gradients (not an Adam step, which only
// sees their signs) of a packed batch with those of the same sequences one per row, and those
// with GoMLX's own gradients (its matmul gradient, its decomposed softmax and LayerNorm).
func TestPackedGradientsMatchWholeBatch(t *testing.T) {
	grads := func(whole bool) [][]float32 {
		p := MustNewPolicy(testLM().Seed(4).Shards(1))
		p.wholeBatches = whole
		tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.ensureExecs(); err != nil {
			t.Fatal(err)
		}
		args, plan, _ := tr.pieceArgs(sftBatch(t, p.Tokenizer(), 11))
		outs, err := runPieces(tr.gradExec, args, plan)
		if err != nil {
			t.Fatal(err)
		}
		nm := 1 + len(tr.metrics)
		var sum [][]float32
		for _, o := range outs {
			for i, g := range o[nm:] {
				v := tensors.MustCopyFlatData[float32](g)
				if len(sum) <= i {
					sum = append(sum, make([]float32, len(v)))
				}
				for j := range v {
					sum[i][j] += v[j]
				}
			}
		}
		return sum
	}
	compare := func(what string, got, want [][]float32) {
		for i := range want {
			var num, den float64
			for j := range want[i] {
				d := float64(got[i][j] - want[i][j])
				num += d * d
				den += float64(want[i][j]) * float64(want[i][j])
			}
			if den > 0 && math.Sqrt(num/den) > 1e-4 {
				t.Errorf("weight %d: %s differs by %.2g (relative)", i, what, math.Sqrt(num/den))
			}
		}
	}
	packed, whole := grads(false), grads(true)
	compare("the packed gradient from the whole batch's", packed, whole)
	fastMatmulVJP = false
	defer func() { fastMatmulVJP = true }()
	t.Setenv("GOMLX_FUSION", "false")
	compare("the gradient from GoMLX's own (whole batch)", whole, grads(true))
}
