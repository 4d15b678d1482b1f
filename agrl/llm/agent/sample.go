package agent

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"

	"agrl.dev/agrl"
)

// stream is one growing token sequence of a model: Next appends ids and returns the logits of
// the token that follows them; Clone forks it. The model's stream is a KV cache.
type stream interface {
	Next(ids []int32) ([]float32, error)
	Clone() stream
	// Release frees the stream's memory (a decoder's cache); it is not used afterwards.
	Release()
}

// decStream is a sequence of the policy's Decoder.
type decStream struct {
	d Decoder
	s Seq
}

func (s decStream) Next(ids []int32) ([]float32, error) {
	logits, err := s.d.NextBatch([]Seq{s.s}, [][]int32{ids})
	if err != nil {
		return nil, err
	}
	return logits[0], nil
}
func (s decStream) Clone() stream { return decStream{s.d, s.s.Clone()} }
func (s decStream) Release()      { s.s.Release() }

// newStream starts an empty sequence.
func (p *Policy) newStream() stream {
	if p.open != nil {
		return p.open()
	}
	return decStream{p.decoder(), p.decoder().NewSeq()}
}

// invTemperature is the factor applied to logits before the softmax: 1/t, and 1 for greedy
// decoding (t = 0), whose log-probs are recorded at temperature 1.
func invTemperature(t float64) float64 {
	if t <= 0 {
		return 1
	}
	return 1 / t
}

var errNonFinite = errors.New("the logits hold NaN or no finite value")

// scaledMax is the largest of z·invT in float64, the shift of the log-softmax (logSoftmax's
// and the scorer's, rowStats'); logits that are NaN, +Inf or all -Inf are errNonFinite.
func scaledMax(z []float32, invT float64) (float64, error) {
	mx := math.Inf(-1)
	for _, v := range z {
		x := float64(v) * invT
		if math.IsNaN(x) || math.IsInf(x, 1) {
			return 0, errNonFinite
		}
		mx = max(mx, x)
	}
	if math.IsInf(mx, -1) {
		return 0, errNonFinite
	}
	return mx, nil
}

// logSoftmax writes log softmax(z·invT) to dst (len(z) values), in float64.
func logSoftmax(dst []float64, z []float32, invT float64) error {
	dst = dst[:len(z)]
	mx, err := scaledMax(z, invT)
	if err != nil {
		return err
	}
	for j, v := range z {
		dst[j] = float64(v) * invT
	}
	sum, _ := expSums(z, invT, mx)
	lse := mx + math.Log(sum)
	for j := range dst {
		dst[j] -= lse
	}
	return nil
}

// sampler draws the tokens of one episode: its own random stream and scratch space.
type sampler struct {
	s    agrl.Sampling
	invT float64
	rng  *rand.Rand
	lp   []float64 // log-probs of the current position
	ids  []int     // candidate ids for top-k / top-p
}

// newSampler returns the sampler of episode i: stream (Seed, i), as agrl's rollouts number
// them.
func newSampler(s agrl.Sampling, vocab, i int) *sampler {
	return &sampler{
		s: s, invT: invTemperature(s.Temperature),
		rng: rand.New(rand.NewPCG(s.Seed, uint64(i))),
		lp:  make([]float64, vocab),
	}
}

// draw picks the next token from logits and returns it with its log-probability under the
// full distribution at the sampling temperature (temperature 1 for greedy decoding), which
// is what the scorer recomputes. Greedy takes the first largest logit; otherwise top-k, then
// top-p, restrict the candidates and the draw is proportional to their probabilities.
func (sm *sampler) draw(logits []float32) (int32, float32, error) {
	lp := sm.lp[:len(logits)]
	if err := logSoftmax(lp, logits, sm.invT); err != nil {
		return 0, 0, err
	}
	if sm.s.Temperature <= 0 {
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		return int32(best), float32(lp[best]), nil
	}
	topK := sm.s.TopK > 0 && sm.s.TopK < len(lp)
	topP := sm.s.TopP > 0 && sm.s.TopP < 1
	if !topK && !topP {
		u := sm.rng.Float64()
		last := 0
		for j, x := range lp {
			pr := math.Exp(x)
			if pr == 0 {
				continue
			}
			last = j
			if u -= pr; u <= 0 {
				return int32(j), float32(x), nil
			}
		}
		return int32(last), float32(lp[last]), nil // rounding left u above 0
	}
	ids := sm.ids[:0]
	for j := range lp {
		ids = append(ids, j)
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case lp[a] > lp[b]:
			return -1
		case lp[a] < lp[b]:
			return 1
		}
		return 0
	})
	if topK {
		ids = ids[:sm.s.TopK]
	}
	if topP {
		cum := 0.0
		for j, id := range ids {
			if cum += math.Exp(lp[id]); cum >= sm.s.TopP {
				ids = ids[:j+1]
				break
			}
		}
	}
	sm.ids = ids
	total := 0.0
	for _, id := range ids {
		total += math.Exp(lp[id])
	}
	u := sm.rng.Float64() * total
	for _, id := range ids {
		if u -= math.Exp(lp[id]); u <= 0 {
			return int32(id), float32(lp[id]), nil
		}
	}
	last := ids[0] // the most likely: rounding left u above 0
	return int32(last), float32(lp[last]), nil
}
