package agent

import (
	"fmt"
	"math"
	"sync"

	"agrl.dev/agrl/llm"
	"agrl.dev/internal/parallel"
)

// scorePass bounds the positions one forward pass of ScoreBatch runs through the layers, over
// all the sequences in it, and scoreRows those its LM head takes at a time
// (llm.Model.StepBatchHead): the logits held at once are scoreRows × vocabulary floats (78 MB
// at Qwen3's 151,936). A projection's weights are read, and copied for the kernels, once a
// pass, so longer passes spend less on them: scoring 4 sequences of 256 tokens at the
// Qwen3-0.6B shape took 26.2 CPU-seconds on two Zen 3 cores in passes of 128 positions, 23.2
// in passes of 512 and 21.5 in passes of 1,024 (medians of 6, alternated in one process;
// docs/performance.md, "Scoring passes of 1,024 positions").
const scorePass, scoreRows = 1024, 128

// Scores are one sequence's per-token statistics under the policy, indexed like the
// sequence: entry j is about token j given the tokens before it, and entry 0 is 0.
type Scores struct {
	// LogProbs[j] is log softmax(logits/t)[tokens[j]] at position j-1: what the sampler
	// records for a token it draws (Episode.LogProbs).
	LogProbs []float32
	// Entropy[j] is the entropy (nats) of that distribution, the one token j was drawn from.
	Entropy []float32
}

// Score returns the log-probability of each token of tokens given the tokens before it, at
// temperature t (0 means 1, as for greedy sampling, see agrl.Sampling), under the full
// distribution: log softmax(logits/t)[tokens[j]] at position j, and 0 at position 0. On the
// tokens an episode sampled it gives back the episode's LogProbs: the quantity GRPO's ratio
// compares. It is ScoreBatch's LogProbs for one sequence.
func (p *Policy) Score(tokens []int32, t float64) ([]float32, error) {
	s, err := p.ScoreBatch([][]int32{tokens}, t)
	if err != nil {
		return nil, err
	}
	return s[0].LogProbs, nil
}

// ScoreBatch scores several sequences with the model on the host (never WithDecoder's
// decoder): log-probabilities and entropies of every token at temperature t, as Scores lays
// them out. The sequences share the model's passes over the weights (llm.Model.StepBatchHead,
// at most scorePass positions a pass), so scoring a rollout's episodes together costs about
// what one long sequence of their total length does, and the row-wise work runs on every
// core. Sequences that begin alike — a GRPO group's episodes of one prompt, several prompts
// with one system prompt — share their common beginning: it runs once, and each goes on from
// a clone of its cache (at least shareMin common positions; see planScoring; the caches of
// the shared beginnings stay in memory until their continuations start). Each token's
// log-probability is computed as the sampler computes it (the same logits, the same float64
// log-softmax), so a sequence scores the same alone or in a batch, bit for bit. A sequence
// shorter than two tokens scores zeros; ids outside the vocabulary (in any sequence), a
// sequence past the context and logits that are NaN or have no finite value are errors.
func (p *Policy) ScoreBatch(seqs [][]int32, t float64) ([]Scores, error) {
	if math.IsNaN(t) || t < 0 || math.IsInf(t, 1) {
		return nil, fmt.Errorf("agent: Score: temperature %v", t)
	}
	invT := invTemperature(t)
	V, maxPos := p.model.Config().VocabSize, p.model.Config().MaxPositionEmbeddings
	out := make([]Scores, len(seqs))
	var todo []int // sequences with a token to score, in order
	for i, s := range seqs {
		out[i] = Scores{LogProbs: make([]float32, len(s)), Entropy: make([]float32, len(s))}
		if n := len(s) - 1; n > maxPos { // the last token is scored, not fed
			return nil, fmt.Errorf("agent: Score: sequence %d: %d tokens exceed max_position_embeddings %d (+1, the last token is only scored)", i, len(s), maxPos)
		}
		for j, id := range s {
			if id < 0 || int(id) >= V {
				return nil, fmt.Errorf("agent: Score: sequence %d: token %d (position %d) is outside the vocabulary [0, %d)", i, id, j, V)
			}
		}
		if len(s) >= 2 {
			todo = append(todo, i)
		}
	}
	for _, level := range planScoring(seqs, todo) {
		if err := p.scoreLevel(seqs, level, invT, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// shareMin is the fewest common positions that ScoreBatch runs once for the sequences that
// share them rather than once each: shorter ones are not worth a cache of their own.
const shareMin = 16

// A scoreJob feeds positions [from, to) of its sequences (the same tokens in each) to a cache
// and scores their next tokens: the row of position j scores token j+1 of each sequence. It
// starts from a clone of its parent's cache (a new cache without a parent), and its own cache
// is kept, once it ends, for its children.
type scoreJob struct {
	seqs     []int
	from, to int
	parent   *scoreJob
	children int
	cache    *llm.Cache
}

// planScoring lays out the sequences todo as jobs over their common beginnings, a tree of
// them, returned level by level (a job's parent is in the level before it): the longest
// beginning that several sequences share (at least shareMin positions past their parent's)
// is one job of them all, and what follows splits them where their tokens differ, down to a
// job for each sequence's own rest. Sequences that share nothing get one job each, as before.
func planScoring(seqs [][]int32, todo []int) [][]*scoreJob {
	var levels [][]*scoreJob
	add := func(j *scoreJob, depth int) {
		for len(levels) <= depth {
			levels = append(levels, nil)
		}
		levels[depth] = append(levels[depth], j)
		if j.parent != nil {
			j.parent.children++
		}
	}
	// plan lays out list, sequences that share positions [0, d) (run by parent, at depth).
	var plan func(list []int, d int, parent *scoreJob, depth int)
	plan = func(list []int, d int, parent *scoreJob, depth int) {
		first := seqs[list[0]]
		if len(list) == 1 {
			add(&scoreJob{seqs: list, from: d, to: len(first) - 1, parent: parent}, depth)
			return
		}
		P := len(first) - 1 // the common positions fed: the shortest's, at most
		for _, i := range list[1:] {
			s := seqs[i]
			P = min(P, len(s)-1)
			for j := d; j < P; j++ {
				if s[j] != first[j] {
					P = j
				}
			}
		}
		if P-d >= shareMin {
			j := &scoreJob{seqs: list, from: d, to: P, parent: parent}
			add(j, depth)
			parent, d, depth = j, P, depth+1
		}
		// Split where the sequences part, at position P: by the token there, in order of
		// appearance; a sequence that feeds nothing past P is a part of its own.
		var keys []int32
		parts := map[int32][]int{}
		for _, i := range list {
			if len(seqs[i])-1 == P {
				if d < P { // not run above: its positions [d, P) are still to feed
					add(&scoreJob{seqs: []int{i}, from: d, to: P, parent: parent}, depth)
				}
				continue
			}
			k := seqs[i][P]
			if _, ok := parts[k]; !ok {
				keys = append(keys, k)
			}
			parts[k] = append(parts[k], i)
		}
		for _, k := range keys {
			plan(parts[k], d, parent, depth)
		}
	}
	if len(todo) > 0 {
		plan(todo, 0, nil, 0)
	}
	return levels
}

// scoreLevel runs a level of jobs, whose parents have run, in passes of at most scorePass
// positions: a pass takes the next positions of the jobs in order until scorePass rows, so
// every job but a pass's last ends in it, and only that one carries over to the next pass,
// going on from its cache's length. Each row's statistics go to out for each of its job's
// sequences.
func (p *Policy) scoreLevel(seqs [][]int32, jobs []*scoreJob, invT float64, out []Scores) error {
	V := p.model.Config().VocabSize
	type part struct {
		job      *scoreJob
		from, to int
	}
	for next := 0; next < len(jobs); {
		var parts []part
		var cs []*llm.Cache
		var feeds [][]int32
		budget := scorePass
		for k := next; k < len(jobs) && budget > 0; k++ {
			j := jobs[k]
			if j.cache == nil { // its first pass
				if j.parent != nil {
					j.cache = j.parent.cache.Clone()
					if j.parent.children--; j.parent.children == 0 {
						j.parent.cache = nil // its last child has its clone
					}
				} else {
					j.cache = p.model.NewCache()
				}
			}
			f := j.cache.Len() // where it goes on: its from, or where the last pass left it
			to := min(j.to, f+budget)
			parts = append(parts, part{j, f, to})
			cs, feeds = append(cs, j.cache), append(feeds, seqs[j.seqs[0]][f:to])
			budget -= to - f
		}
		type row struct {
			job *scoreJob
			pos int // the row scores token pos of its job's sequences
		}
		var all []row // the pass's rows, stacked as StepBatchHead stacks them
		for _, pt := range parts {
			for q := pt.from; q < pt.to; q++ {
				all = append(all, row{pt.job, q + 1})
			}
		}
		var scoreErr error // a row's: its logits are not finite
		err := p.model.StepBatchHead(cs, feeds, scoreRows, func(first int, z []float32) error {
			var mu sync.Mutex
			parallel.Rows(len(z)/V, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := all[first+i]
					zi := z[i*V : (i+1)*V]
					lse, ent, err := rowStats(zi, invT)
					if err != nil {
						mu.Lock()
						if scoreErr == nil {
							scoreErr = fmt.Errorf("agent: Score: sequence %d position %d: %w", r.job.seqs[0], r.pos-1, err)
						}
						mu.Unlock()
						return
					}
					for _, s := range r.job.seqs {
						id := seqs[s][r.pos]
						out[s].LogProbs[r.pos] = float32(float64(float64(zi[id])*invT) - lse)
						out[s].Entropy[r.pos] = float32(ent)
					}
				}
			})
			return scoreErr
		})
		if scoreErr != nil {
			return scoreErr
		}
		if err != nil { // the sequences were checked: a failure here is the model's
			return fmt.Errorf("agent: Score: %w", err)
		}
		for _, pt := range parts {
			if pt.to == pt.job.to && pt.job.children == 0 {
				pt.job.cache = nil // a finished job's cache goes with it, unless a child clones it
			}
		}
		next += len(parts)
		if last := parts[len(parts)-1]; last.to < last.job.to {
			next-- // it goes on in the next pass, from its cache's length
		}
	}
	return nil
}

// rowStats returns, for the logits z at inverse temperature invT, the log-sum-exp of the
// scaled logits and the distribution's entropy, in float64: token id's log-probability is
// float64(float64(z[id])·invT) − lse. The log-probability is the sampler's (logSoftmax: the
// same maximum, the same sum in the same order, so the same bits); the entropy comes from the
// same pass, H = log Σe − Σe·d / Σe with d = x − max, e = exp(d).
func rowStats(z []float32, invT float64) (lse, ent float64, err error) {
	mx, err := scaledMax(z, invT)
	if err != nil {
		return 0, 0, err
	}
	sum, sd := expSums(z, invT, mx)
	logSum := math.Log(sum)
	return mx + logSum, logSum - sd/sum, nil
}

// expSums returns Σe and Σe·d over z in order, d = float64(float64(z[j])·invT) − mx and e =
// math.Exp(d), the terms with e = 0 left out of the second (d = −∞ would make e·d NaN): the
// sums of logSoftmax and rowStats. Where SetExpSums installed a kernel, it takes the row as
// far as it can and the loop below the rest, the sums running on from one to the other.
func expSums(z []float32, invT, mx float64) (sum, sd float64) {
	for j := 0; j < len(z); {
		if expSumsKernel != nil {
			var n int
			n, sum, sd = expSumsKernel(z[j:], invT, mx, sum, sd)
			j += n
		}
		for end := min(j+4, len(z)); j < end; j++ {
			// The conversions round each product as logSoftmax's store does: without them an
			// architecture with fused multiply-adds (arm64) may fuse the product and the
			// difference, and the log-probs would differ from the sampler's in the last bit.
			d := float64(float64(z[j])*invT) - mx
			e := math.Exp(d)
			sum += e
			if e != 0 {
				sd += e * d
			}
		}
	}
	return sum, sd
}

// expSumsKernel, when set by SetExpSums, runs expSums' loop over a prefix of a row.
var expSumsKernel func(z []float32, invT, mx, sum, sd float64) (n int, sum2, sd2 float64)

// SetExpSums installs f for the exponentials and sums over the vocabulary that every sampled
// and scored position pays for (the log-softmax's normaliser and the scorer's entropy):
// f(z, invT, mx, sum, sd) goes on with expSums' loop from the running sums sum and sd over the
// first n elements of z, n of its choosing (0 included: the loop then takes the next few
// elements itself), and returns n and the sums after them. They must be the loop's bits: the
// same d, math.Exp's exponentials on this CPU, added in the same order — agrl/learn installs
// one on AVX2 CPUs with FMA (GOEXPERIMENT=simd builds) that computes four exponentials at a
// time with math.Exp's own steps. nil restores the loop. Set it before any sampling or
// scoring, not concurrently with them.
func SetExpSums(f func(z []float32, invT, mx, sum, sd float64) (n int, sum2, sd2 float64)) {
	expSumsKernel = f
}
