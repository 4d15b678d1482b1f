package agent

import (
	"errors"

	"agrl.dev/agrl/llm"
)

// Decoder runs a policy's model incrementally over token sequences held in its own caches.
// By default a Policy decodes with its agrl/llm model on the host (KV caches in Go memory);
// WithDecoder gives it another, such as a GoMLX graph whose caches live in an accelerator's
// memory (agrl/learn does this on XLA backends).
type Decoder interface {
	// NewSeq starts an empty sequence.
	NewSeq() Seq
	// NextBatch appends ids[i] (at least one id) to seqs[i], for every i, and returns the
	// logits of the token that follows each: what the model gives the whole sequence so far.
	// The sequences are distinct, and none is used elsewhere during the call. Batching must
	// not change the logits beyond float32 rounding: a sequence's logits may not depend on
	// the others in its batch. On error the sequences' state is unspecified.
	NextBatch(seqs []Seq, ids [][]int32) ([][]float32, error)
}

// Seq is one sequence of a Decoder.
type Seq interface {
	// Len is how many positions the sequence holds.
	Len() int
	// Clone forks the sequence: the copy and the original then grow on their own. It may be
	// called from several goroutines at once.
	Clone() Seq
	// Release frees the sequence's memory now rather than when it is collected; the sequence
	// is not used afterwards. Its clones are not affected.
	Release()
}

// hostDecoder decodes with an agrl/llm model on the host (llm.Model.NextBatchFlat).
type hostDecoder struct{ m *llm.Model }

// hostSeq is a host model's KV cache.
type hostSeq struct{ c *llm.Cache }

func (d hostDecoder) NewSeq() Seq { return &hostSeq{d.m.NewCache()} }

// NextBatch returns the rows of llm.Model.NextBatchFlat's buffer: row 0 is its start, with
// the whole buffer's capacity, so that recycle can give it back.
func (d hostDecoder) NextBatch(seqs []Seq, ids [][]int32) ([][]float32, error) {
	caches := make([]*llm.Cache, len(seqs))
	for i, s := range seqs {
		hs, ok := s.(*hostSeq)
		if !ok || hs.c == nil {
			return nil, errors.New("agent: a sequence of another decoder, or released, passed to the host decoder")
		}
		caches[i] = hs.c
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	flat, err := d.m.NextBatchFlat(caches, ids)
	if err != nil {
		return nil, err
	}
	V := d.m.Config().VocabSize
	rows := make([][]float32, len(seqs))
	rows[0] = flat[:V]
	for i := 1; i < len(rows); i++ {
		rows[i] = flat[i*V : (i+1)*V : (i+1)*V]
	}
	return rows, nil
}

// recycle gives the buffer of one NextBatch call's logits back to llm's pool.
func (d hostDecoder) recycle(logits [][]float32) {
	if len(logits) > 0 {
		llm.PutFloats(logits[0][:cap(logits[0])])
	}
}

// recycler is a Decoder whose logits' memory can serve a later call: the rollout's batcher
// calls recycle with a NextBatch call's whole result once it reads none of its rows any more
// (and never again afterwards).
type recycler interface {
	recycle(logits [][]float32)
}

func (s *hostSeq) Len() int   { return s.c.Len() }
func (s *hostSeq) Clone() Seq { return &hostSeq{s.c.Clone()} }
func (s *hostSeq) Release()   { s.c = nil }

// decoder is the policy's decoder: WithDecoder's, else its model's on the host.
func (p *Policy) decoder() Decoder {
	if p.dec != nil {
		return p.dec
	}
	return hostDecoder{p.model}
}

// WithDecoder returns a copy of the policy that samples through d (Rollout, Act) instead of
// its model on the host. d must decode the policy's model — the same configuration,
// tokenizer and weights, adapters included — or the episodes' log-probs will not be the
// model's. Score and TopTokens still run on the host model. Adapters and WithModel return
// policies without the decoder (it would decode the old weights); nil restores the host.
func (p *Policy) WithDecoder(d Decoder) *Policy {
	q := *p
	q.dec = d
	return &q
}
