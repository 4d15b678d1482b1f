package agent

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/envs/calc"
)

// TestScoreBatch: scoring a rollout's episodes together with sequences of other lengths (one
// spanning several passes, one of a single token, an empty one) gives each sequence, bit for
// bit, what it gets alone; the log-probs of the sampled tokens are the ones the sampler
// recorded, bit for bit; and every log-prob and entropy agrees with a float64 softmax of the
// whole sequence's logits (llm.Model.Logits).
func TestScoreBatch(t *testing.T) {
	for _, fc := range formats {
		t.Run(string(fc.family), func(t *testing.T) {
			p := loadPolicy(t, fc.family, fc.format)
			const temperature = 0.8
			tasks := []agrl.Task{mustTask(t, "12+30"), mustTask(t, "7*6"), mustTask(t, "81-9")}
			eps, _, err := p.Rollout(calc.New().Turns(2), tasks, agrl.RolloutOptions{
				Sampling: agrl.Sampling{Temperature: temperature, Seed: 3, MaxActionTokens: 12}})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			long := make([]int32, scorePass+scoreRows+37) // two passes, each of several pieces of the head
			for i := range long {
				long[i] = int32(rng.IntN(testVocab))
			}
			seqs := [][]int32{eps[0].Tokens, long, {5}, eps[1].Tokens, nil, eps[2].Tokens}
			got, err := p.ScoreBatch(seqs, temperature)
			if err != nil {
				t.Fatal(err)
			}
			scoresAsAlone(t, p, seqs, got, temperature)
			for i, s := range seqs {
				if len(s) < 2 {
					if len(s) == 1 && (got[i].LogProbs[0] != 0 || got[i].Entropy[0] != 0) {
						t.Fatalf("a one-token sequence scored %v", got[i])
					}
					continue
				}
				rows, err := p.Model().Logits(s[:len(s)-1])
				if err != nil {
					t.Fatal(err)
				}
				for j := 1; j < len(s); j++ {
					ref := logSoftmaxRef(rows[j-1], temperature)
					ent := 0.0
					for _, lp := range ref {
						ent -= math.Exp(lp) * lp
					}
					if d := math.Abs(float64(got[i].LogProbs[j]) - ref[s[j]]); d > 1e-5 {
						t.Fatalf("sequence %d position %d: log-prob %v, reference %v", i, j, got[i].LogProbs[j], ref[s[j]])
					}
					if d := math.Abs(float64(got[i].Entropy[j]) - ent); d > 1e-5 {
						t.Fatalf("sequence %d position %d: entropy %v, reference %v", i, j, got[i].Entropy[j], ent)
					}
				}
			}
			sampled := 0
			for k, ep := range eps {
				i := []int{0, 3, 5}[k]
				for j, m := range ep.LossMask {
					if m == 0 {
						continue
					}
					sampled++
					if math.Float32bits(got[i].LogProbs[j]) != math.Float32bits(ep.LogProbs[j]) {
						t.Fatalf("episode %d position %d: scored %v, the sampler recorded %v", k, j, got[i].LogProbs[j], ep.LogProbs[j])
					}
				}
			}
			if sampled == 0 {
				t.Fatal("no sampled token")
			}
		})
	}
}

// scoresAsAlone fails unless got, ScoreBatch's scores of seqs together, hold for each
// sequence a log-prob and an entropy per token, bit for bit those it scores alone.
func scoresAsAlone(t *testing.T, p *Policy, seqs [][]int32, got []Scores, temperature float64) {
	t.Helper()
	for i, s := range seqs {
		alone, err := p.ScoreBatch([][]int32{s}, temperature)
		if err != nil {
			t.Fatal(err)
		}
		if len(got[i].LogProbs) != len(s) || len(got[i].Entropy) != len(s) {
			t.Fatalf("sequence %d: %d log-probs and %d entropies for %d tokens", i, len(got[i].LogProbs), len(got[i].Entropy), len(s))
		}
		if !sameBits(got[i].LogProbs, alone[0].LogProbs) || !sameBits(got[i].Entropy, alone[0].Entropy) {
			t.Fatalf("sequence %d scores differently in the batch and alone", i)
		}
	}
}

// ScoreBatch refuses bad input with an error that names the sequence, and changes nothing.
func TestScoreBatchErrors(t *testing.T) {
	p := loadPolicy(t, hf.Qwen3, nil)
	maxPos := p.Model().Config().MaxPositionEmbeddings
	for _, c := range []struct {
		seqs [][]int32
		temp float64
		want string
	}{
		{[][]int32{{1, 2}, {1, testVocab}}, 1, "sequence 1: token 320 (position 1) is outside the vocabulary"},
		{[][]int32{{-1, 2}}, 1, "sequence 0: token -1 (position 0)"},
		{[][]int32{{1, 2}, {testVocab + 5}}, 1, "sequence 1: token 325 (position 0)"},
		{[][]int32{{1, 2}, {}, make([]int32, maxPos+2)}, 1, "sequence 2: 2050 tokens exceed max_position_embeddings 2048"},
		{[][]int32{{1, 2}}, math.NaN(), "temperature NaN"},
		{[][]int32{{1, 2}}, -0.5, "temperature -0.5"},
	} {
		if _, err := p.ScoreBatch(c.seqs, c.temp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v at %v: %v, want %q", c.seqs[len(c.seqs)-1][:min(2, len(c.seqs[len(c.seqs)-1]))], c.temp, err, c.want)
		}
	}
	// A context full but for the last token scores.
	if _, err := p.ScoreBatch([][]int32{make([]int32, maxPos+1)}, 1); err != nil {
		t.Errorf("a sequence that fills the context: %v", err)
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestScoreBatchShares: sequences that begin alike share the passes over their common
// beginnings (planScoring: a system prompt shared by two prompts, each prompt by its
// continuations, duplicates, a sequence that ends where its prompt does, one that shares
// fewer than shareMin positions, one spanning several passes from a clone), and each still
// scores, bit for bit, what it scores alone; a GRPO group's episodes of one task, scored
// together, give back the log-probs the sampler recorded, bit for bit.
func TestScoreBatchShares(t *testing.T) {
	p := loadPolicy(t, hf.Qwen3, nil)
	rng := rand.New(rand.NewPCG(7, 7))
	tokens := func(first int32, n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(rng.IntN(testVocab))
		}
		if n > 0 && first >= 0 {
			s[0] = first
		}
		return s
	}
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	sys := tokens(-1, 40)
	pA, pB := cat(sys, tokens(1, 30)), cat(sys, tokens(2, 25))
	s1 := cat(pA, tokens(4, 20))
	seqs := [][]int32{
		cat(pA, tokens(3, 10)), s1, cat(pA, tokens(5, 1)), // one prompt's continuations
		cat(pB, tokens(6, 12)), cat(pB, tokens(7, 12)), // another's, after the same system prompt
		slices.Clone(s1), // a duplicate
		pA,               // ends where its prompt does
		cat(sys[:3], tokens((sys[3]+1)%testVocab, 5)), // shares 3 positions: too few
		{5}, nil, // nothing to score
		cat(pB, tokens(8, 300)), // several passes
	}
	// The plan, worked by hand: [0,40) shared by all but the short one, which runs [0,7)
	// alone; pA's [40,69) and pB's [40,65); then s2's [69,70), s0's [69,79), the duplicates'
	// [69,89) once, s3's and s4's [65,76) and the long one's [65,364).
	fed, levels := 0, planScoring(seqs, []int{0, 1, 2, 3, 4, 5, 6, 7, 10})
	for _, level := range levels {
		for _, j := range level {
			fed += j.to - j.from
		}
	}
	if want := 40 + 7 + 29 + 25 + 1 + 10 + 20 + 11 + 11 + 299; fed != want || len(levels) != 3 {
		t.Errorf("the plan feeds %d positions in %d levels, want %d in 3", fed, len(levels), want)
	}
	const temperature = 0.7
	got, err := p.ScoreBatch(seqs, temperature)
	if err != nil {
		t.Fatal(err)
	}
	scoresAsAlone(t, p, seqs, got, temperature)

	// A group: four episodes of one task share its prompt.
	task := mustTask(t, "12+30")
	eps, _, err := p.Rollout(calc.New().Turns(2), []agrl.Task{task, task, task, task}, agrl.RolloutOptions{
		Sampling: agrl.Sampling{Temperature: temperature, Seed: 9, MaxActionTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	var group [][]int32
	for _, ep := range eps {
		group = append(group, ep.Tokens)
	}
	if levels := planScoring(group, []int{0, 1, 2, 3}); len(levels) < 2 || len(levels[0]) != 1 || len(levels[0][0].seqs) != 4 {
		t.Fatal("the group's episodes do not share their prompt's pass")
	}
	sc, err := p.ScoreBatch(group, temperature)
	if err != nil {
		t.Fatal(err)
	}
	for k, ep := range eps {
		for j, m := range ep.LossMask {
			if m == 1 && math.Float32bits(sc[k].LogProbs[j]) != math.Float32bits(ep.LogProbs[j]) {
				t.Fatalf("episode %d position %d: scored %v, the sampler recorded %v", k, j, sc[k].LogProbs[j], ep.LogProbs[j])
			}
		}
	}
}

// planScoring's plan, on random sets of sequences built to share beginnings (random trees of
// segments, duplicates, sequences that end inside others): every sequence's positions to feed,
// [0, len−1), are covered exactly once by a chain of jobs that each start where their parent
// ends, every job's sequences hold the same tokens over its positions, parents sit one level
// above their children, and no shared job is shorter than shareMin.
func TestPlanScoringCovers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		var seqs [][]int32
		for range 1 + rng.IntN(12) {
			var s []int32
			if len(seqs) > 0 && rng.IntN(4) > 0 { // continue a beginning of an earlier one
				o := seqs[rng.IntN(len(seqs))]
				s = slices.Clone(o[:rng.IntN(len(o)+1)])
			}
			for range rng.IntN(40) {
				s = append(s, int32(rng.IntN(3))) // few distinct tokens: long accidental matches too
			}
			seqs = append(seqs, s)
		}
		var todo []int
		for i, s := range seqs {
			if len(s) >= 2 {
				todo = append(todo, i)
			}
		}
		covered := make([][]int, len(seqs)) // positions fed for each sequence, in order
		depth := map[*scoreJob]int{}
		for d, level := range planScoring(seqs, todo) {
			for _, j := range level {
				depth[j] = d
				if j.to <= j.from {
					t.Fatalf("trial %d: an empty job [%d, %d)", trial, j.from, j.to)
				}
				if j.parent != nil && (depth[j.parent] != d-1 || j.parent.to != j.from) {
					t.Fatalf("trial %d: a job at level %d from %d under a parent at level %d ending at %d", trial, d, j.from, depth[j.parent], j.parent.to)
				}
				if j.parent == nil && j.from != 0 {
					t.Fatalf("trial %d: a job without a parent starts at %d", trial, j.from)
				}
				if len(j.seqs) > 1 && j.to-j.from < shareMin {
					t.Fatalf("trial %d: a shared job of %d positions", trial, j.to-j.from)
				}
				for _, i := range j.seqs {
					if j.parent != nil && !slices.Contains(j.parent.seqs, i) {
						t.Fatalf("trial %d: sequence %d goes on from a job that did not run it", trial, i)
					}
					if !slices.Equal(seqs[i][j.from:j.to], seqs[j.seqs[0]][j.from:j.to]) || j.to > len(seqs[i])-1 {
						t.Fatalf("trial %d: sequence %d does not hold the job's tokens", trial, i)
					}
					for k := j.from; k < j.to; k++ {
						covered[i] = append(covered[i], k)
					}
				}
			}
		}
		for i, s := range seqs {
			want := []int{}
			for k := range max(0, len(s)-1) {
				want = append(want, k)
			}
			slices.Sort(covered[i])
			if !slices.Equal(covered[i], want) && (len(covered[i]) > 0 || len(want) > 0) {
				t.Fatalf("trial %d: sequence %d of %d tokens is fed positions %v", trial, i, len(s), covered[i])
			}
		}
	}
}
