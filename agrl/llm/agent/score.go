package agent

import (
	"fmt"
	"math"
	"sync"

	"agrl.dev/agrl/llm"
	"agrl.dev/internal/parallel"
)

// scoreRows bounds the positions one forward pass of ScoreBatch runs, over all the sequences
// in it: the logits it holds at once are scoreRows × vocabulary floats (78 MB at Qwen3's
// 151,936), and 128 rows keep the products' weight reads shared by enough rows.
const scoreRows = 128

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
// them out. The sequences share the model's passes over the weights (llm.Model.StepBatch,
// at most scoreRows positions a pass), so scoring a rollout's episodes together costs about
// what one long sequence of their total length does, and the row-wise work runs on every
// core. Each token's log-probability is computed as the sampler computes it (the same
// logits, the same float64 log-softmax), so a sequence scores the same alone or in a batch.
// A sequence shorter than two tokens scores zeros; ids outside the vocabulary (in any
// sequence), a sequence past the context and logits that are NaN or have no finite value are
// errors.
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
	// A pass takes the next positions of the sequences in order until scoreRows rows; a
	// sequence's positions 0 … n-2 are fed (the last token is only scored). Every sequence but
	// a pass's last ends in it, so only that one carries over: todo[next] from position from,
	// its cache cur.
	type part struct {
		seq, from, to int // positions [from, to) of seqs[seq]
	}
	next, from := 0, 0
	var cur *llm.Cache
	for next < len(todo) {
		var parts []part
		var cs []*llm.Cache
		var feeds [][]int32
		budget := scoreRows
		for k := next; k < len(todo) && budget > 0; k++ {
			i, f, c := todo[k], 0, p.model.NewCache()
			if k == next && cur != nil {
				f, c = from, cur
			}
			to := min(len(seqs[i])-1, f+budget)
			parts = append(parts, part{i, f, to})
			cs, feeds = append(cs, c), append(feeds, seqs[i][f:to])
			budget -= to - f
		}
		rows, err := p.model.StepBatch(cs, feeds)
		if err != nil { // the sequences were checked: a failure here is the model's
			return nil, fmt.Errorf("agent: Score: %w", err)
		}
		type row struct {
			z        []float32
			seq, pos int // the row scores token pos of seqs[seq]
		}
		var all []row
		for k, pt := range parts {
			for r, z := range rows[k] {
				all = append(all, row{z, pt.seq, pt.from + r + 1})
			}
		}
		var firstErr error
		var mu sync.Mutex
		parallel.Rows(len(all), func(lo, hi int) {
			for _, r := range all[lo:hi] {
				lp, ent, err := tokenStats(r.z, invT, seqs[r.seq][r.pos])
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("agent: Score: sequence %d position %d: %w", r.seq, r.pos-1, err)
					}
					mu.Unlock()
					return
				}
				out[r.seq].LogProbs[r.pos], out[r.seq].Entropy[r.pos] = float32(lp), float32(ent)
			}
		})
		if firstErr != nil {
			return nil, firstErr
		}
		next += len(parts)
		cur = nil // a finished sequence's cache goes with it
		if last := parts[len(parts)-1]; last.to < len(seqs[last.seq])-1 {
			next, from, cur = next-1, last.to, cs[len(cs)-1]
		}
	}
	return out, nil
}

// tokenStats returns, for the logits z at inverse temperature invT, the log-probability of
// token id and the distribution's entropy, in float64. The log-probability is the sampler's
// (logSoftmax: the same maximum, the same sum in the same order, so the same bits); the
// entropy comes from the same pass, H = log Σe − Σe·d / Σe with d = x − max, e = exp(d).
func tokenStats(z []float32, invT float64, id int32) (lp, ent float64, err error) {
	mx, err := scaledMax(z, invT)
	if err != nil {
		return 0, 0, err
	}
	var sum, sd float64
	for _, v := range z {
		// The conversions round each product as logSoftmax's store does: without them an
		// architecture with fused multiply-adds (arm64) may fuse the product and the
		// difference, and the log-probs would differ from the sampler's in the last bit.
		d := float64(float64(v)*invT) - mx
		e := math.Exp(d)
		sum += e
		if e != 0 {
			sd += e * d
		}
	}
	lse := mx + math.Log(sum)
	return float64(float64(z[id])*invT) - lse, math.Log(sum) - sd/sum, nil
}
