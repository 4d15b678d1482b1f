package learn

import (
	"agrl.dev/agrl"

	"errors"
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// TokenTop is one token of a sequence as the policy scores it: its log-probability given the
// tokens before it, and the k likeliest tokens at its position.
type TokenTop struct {
	ID      int32
	LogProb float32
	Top     []TokenProb
}

// TokenProb is a token id with its log-probability.
type TokenProb struct {
	ID      int32
	LogProb float32
}

// TopTokens scores the tokens of seq from position from on (from >= 1: a token is scored given
// the ones before it) at the temperature, and lists for each the k likeliest tokens at its
// position, likeliest first: what `agrl play`'s :why shows of an action.
func (p *Policy) TopTokens(seq []int32, from int, temperature float64, k int) ([]TokenTop, error) {
	if err := p.checkSeqs([][]int32{seq}); err != nil {
		return nil, err
	}
	if from < 1 || from >= len(seq) {
		return nil, fmt.Errorf("agrl: TopTokens: from %d outside [1, %d)", from, len(seq))
	}
	if k < 1 {
		return nil, errors.New("agrl: TopTokens: k < 1")
	}
	p.execMu.Lock()
	if p.explainExec == nil {
		e, err := p.newExec("explain", func(_ *model.Scope, in []*graph.Node) []*graph.Node {
			w := p.mustWeights(in[0].Graph())
			return []*graph.Node{p.arch.outputLogProbs(w, p.arch.forward(w, in[0]), in[1])}
		})
		if err != nil {
			p.execMu.Unlock()
			return nil, err
		}
		p.explainExec = e
	}
	p.execMu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	width := padLen(len(seq), p.arch.Context)
	row := make([]int32, width) // PAD after the sequence: causal attention never reads it
	for i := range row {
		row[i] = agrl.PAD
	}
	copy(row, seq)
	res, err := call(p.explainExec, tensors.FromFlatDataAndDimensions(row, 1, width), invTemperature(temperature))
	if err != nil {
		return nil, fmt.Errorf("agrl: TopTokens: %w", err)
	}
	lp := tensors.MustCopyFlatData[float32](res[0])
	_ = res[0].FinalizeAll()
	v := p.arch.Vocab()
	out := make([]TokenTop, 0, len(seq)-from)
	ids := make([]int32, v)
	for j := from; j < len(seq); j++ {
		dist := lp[(j-1)*v : j*v]
		for i := range ids {
			ids[i] = int32(i)
		}
		sort.SliceStable(ids, func(a, b int) bool { return dist[ids[a]] > dist[ids[b]] })
		t := TokenTop{ID: seq[j], LogProb: dist[seq[j]]}
		for _, id := range ids[:min(k, v)] {
			t.Top = append(t.Top, TokenProb{ID: id, LogProb: dist[id]})
		}
		out = append(out, t)
	}
	return out, nil
}
