package learn

import (
	"slices"

	"agrl.dev/agrl/llm"
)

// A prompt traced once for its episodes. A GRPO step trains a group of episodes of each task,
// and every episode of a group begins with the same prompt (most of its positions: in the
// calc run of docs/llm.md's "Training shares the prompt", 707 of an episode's 1,004 tokens are
// shared by all eight episodes of a step). A host step (pretrained_host.go)
// traced each sequence whole, the prompt once per episode. Now the sequences of a batch that
// share a prefix of hostShareMin positions or more (shareGroups: a task's episodes, or
// several tasks' behind one long system prompt) train one after another, the prefix traced
// once (llm.TraceOptions.Prefix) and held while the group's micro-batches run: each
// sequence's rest is traced after it (llm.Model.TraceAfter), its statistics at the prefix's
// positions are read from the prefix's rows (hostPrefix.fill), and the loss's gradients
// there are summed over the group (hostPrefix.add) for the prefix's own backward pass, after
// the group's last micro-batch (prefixBackward) — which also takes on the gradients that the
// rests' backward passes sum into the prefix's keys and values. The micro-batches are the
// graphs' (chunks, within each group), so the loss sees the sequences it saw before, and
// the memory held is one micro-batch's traces and the prefix's.
//
// The gradients are the whole traces' to rounding (TestHostSharedPrompt); the rows' hidden
// states are the same bits (llm's TestTraceAfter). Dropout draws each sequence's own masks
// over the prompt too, so with LoRA dropout nothing is shared.

// hostSharing turns prefix sharing on host steps on; a variable for tests, which compare the
// steps with and without it.
var hostSharing = true

// hostShareMin is the shortest prefix a host step traces once for the sequences that share
// it: shorter ones are not worth a trace of their own.
const hostShareMin = 16

// A hostPrefix is a prompt that a group of a step's sequences share, traced once for them
// (tracePrefix), with its rows' statistics and the loss's gradients summed over the group.
type hostPrefix struct {
	tr        *llm.Trace
	ids       []int32
	lps       []float32         // its rows' log-probs [n, V], kept for the backward pass; nil past hostKeepBytes (the head runs again)
	ents, top []float32         // each row's entropy and largest log-prob
	next      []float32         // each row's log-prob of the prompt's next token (all rows but the last)
	last      []float32         // the last row's log-probs: its target is each sequence's first token past the prompt
	a, e      []float32         // the loss's gradients with respect to each row's target log-probs and entropy, summed over the group
	lastDlogp map[int32]float32 // the last row's gradients with respect to each target's log-prob, summed over the sequences with it
}

// sharedPrefix is the number of leading positions every sequence of seqs (two or more) has
// in common — their tokens before the last, which is only a target — less what would leave a
// sequence no position of its own; 0 below hostShareMin.
func sharedPrefix(seqs [][]int32) int {
	if len(seqs) < 2 {
		return 0
	}
	n := len(seqs[0]) - 2
	for _, s := range seqs[1:] {
		n = min(n, len(s)-2, commonLen(s, seqs[0]))
	}
	if n < hostShareMin {
		return 0
	}
	return n
}

// commonLen is the number of leading tokens a and b have in common.
func commonLen(a, b []int32) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// tracePrefix traces a group's prompt ids (options o, and Prefix) and runs its rows through
// the head: their entropies, largest log-probs and log-probs of the next token (of the last
// row, every log-prob), and all of them kept if they fit hostKeepBytes.
func (t *pretrainedTrainer) tracePrefix(m *llm.Model, ids []int32, o llm.TraceOptions) (*hostPrefix, error) {
	o.Prefix = true
	tr, err := m.TraceWith(ids, o)
	if err != nil {
		return nil, err
	}
	n, V := len(ids), t.p.cfg.VocabSize
	pre := &hostPrefix{tr: tr, ids: ids, ents: make([]float32, n), top: make([]float32, n), next: make([]float32, n),
		last: make([]float32, V), a: make([]float32, n), e: make([]float32, n), lastDlogp: map[int32]float32{}}
	if 4*float64(n*V) <= hostKeepBytes {
		pre.lps = llm.Floats(n * V) // written whole below
	}
	hd := t.newHeadPass(m, n)
	defer hd.release()
	for r0 := 0; r0 < n; r0 += headBlock {
		r1 := min(n, r0+headBlock)
		lp, _ := hd.block(tr.Hidden(), r0, r1, pre.ents)
		for r := r0; r < r1; r++ {
			z := lp[(r-r0)*V : (r-r0+1)*V]
			pre.top[r] = maxOf(z)
			if r < n-1 {
				pre.next[r] = z[ids[r+1]]
			} else {
				copy(pre.last, z)
			}
		}
		if pre.lps != nil {
			copy(pre.lps[r0*V:], lp)
		}
	}
	return pre, nil
}

// fill writes sequence s's statistics at the prefix's positions into stats (log-prob,
// entropy, top-1 flag, valid; at base, base+1, …), s being one of the group's.
func (pre *hostPrefix) fill(stats [][]float32, base int, s []int32) {
	n := len(pre.ids)
	for r := range n {
		lt := pre.next[r]
		if r == n-1 {
			lt = pre.last[s[n]]
		}
		at := base + r
		stats[0][at], stats[1][at], stats[3][at] = lt, pre.ents[r], 1
		if lt >= pre.top[r] {
			stats[2][at] = 1
		}
	}
}

// add sums into the prefix the loss's gradients of sequence s at the prefix's positions
// (dlogp and dent from the first).
func (pre *hostPrefix) add(dlogp, dent []float32, s []int32) {
	n := len(pre.ids)
	for r := range n {
		pre.a[r] += dlogp[r]
		pre.e[r] += dent[r]
	}
	pre.lastDlogp[s[n]] += dlogp[n-1]
}

// prefixBackward is the prefix's backward pass, once every sequence of its group has run its
// own: its logits' gradient is outputGrad's of the group's summed gradients (it is linear in
// them), each row's targets' one-hot terms added (the prompt's next token for all rows but
// the last; each sequence's own at the last), and its trace's backward pass takes on the
// gradients that the sequences' backward passes summed into its keys and values.
func (t *pretrainedTrainer) prefixBackward(m *llm.Model, pre *hostPrefix, g hostSums) error {
	n, invT := len(pre.ids), t.invT
	hd := t.newHeadPass(m, n)
	defer hd.release()
	err := hd.backwardWith(pre.tr, pre.lps, pre.ents, func(r int) (a, e float32) { return pre.a[r], pre.e[r] },
		func(r int, row []float32) {
			if r < n-1 {
				row[pre.ids[r+1]] += invT * pre.a[r]
				return
			}
			for tok, a := range pre.lastDlogp { // distinct elements: the order does not matter
				row[tok] += invT * a
			}
		}, g)
	pre.lps, pre.tr = nil, nil
	return err
}

// prefixBytes estimates what a group's prefix of n positions traced with options o holds
// while the group's micro-batches run (its trace, with its keys and values for them, and its
// rows' log-probs if kept), and what its backward pass takes on top.
func (p *PretrainedPolicy) prefixBytes(m *llm.Model, n int, o llm.TraceOptions) (held, back float64) {
	o.Prefix = true
	h, b := m.TraceBytes(n, o)
	N, V, H := float64(n), float64(p.cfg.VocabSize), float64(p.cfg.HiddenSize)
	if 4*N*V <= hostKeepBytes {
		h += 4 * N * V
	}
	return h + 4*(6*N+V), b + 4*N*H + 8*float64(min(n, headBlock))*V
}

// A hostShare says how a host step's micro-batch shares its group's prefix (shareChunks).
type hostShare struct {
	prefix int              // the prefix's positions (0: each sequence traced whole)
	opts   llm.TraceOptions // the prefix's trace options: checkpointed or not
	held   float64          // what the prefix holds meanwhile, by prefixBytes' estimate
	last   bool             // the group's last micro-batch: the prefix's backward pass follows
}

// shareGroups partitions seqs' indices into groups of sequences with a prefix of at least
// hostShareMin positions in common (their tokens before the last): the episodes of one
// prompt, or of prompts that share a long system prompt. Sequences are grouped as they come
// in lexicographic order, a group's common prefix the shortest between neighbours; each
// group lists its members in seqs' order, and the groups come in the order of their first.
func shareGroups(seqs [][]int32) [][]int {
	if len(seqs) == 0 {
		return nil
	}
	lex := make([]int, len(seqs))
	for i := range lex {
		lex[i] = i
	}
	body := func(i int) []int32 { return seqs[i][:max(0, len(seqs[i])-1)] }
	slices.SortStableFunc(lex, func(a, b int) int { return slices.Compare(body(a), body(b)) })
	var groups [][]int
	cur, common := []int{lex[0]}, len(body(lex[0]))
	for _, i := range lex[1:] {
		if c := min(common, commonLen(body(cur[len(cur)-1]), body(i))); c >= hostShareMin {
			cur, common = append(cur, i), c
			continue
		}
		groups = append(groups, cur)
		cur, common = []int{i}, len(body(i))
	}
	groups = append(groups, cur)
	for _, g := range groups {
		slices.Sort(g)
	}
	slices.SortFunc(groups, func(a, b []int) int { return a[0] - b[0] })
	return groups
}

// shareChunks reorders a batch (names its values) for a host step that shares prefixes and
// splits it into micro-batches: each group of sequences that share one (shareGroups,
// sharedPrefix) runs its micro-batches one after another (the graphs', chunks), its prefix
// traced once — whole, or checkpointed where a micro-batch does not fit the call budget
// beside it whole; the sequences left (alone, or in a group that does not fit even so)
// follow in the batch's order, each traced whole. shares says how each micro-batch shares.
func (p *PretrainedPolicy) shareChunks(m *llm.Model, b TrainBatch, names []string) (TrainBatch, [][2]int, []hostShare) {
	var order, alone []int
	var chunks [][2]int
	var shares []hostShare
	pick := func(idx []int) [][]int32 {
		out := make([][]int32, len(idx))
		for k, i := range idx {
			out[k] = b.Tokens[i]
		}
		return out
	}
	for _, g := range shareGroups(b.Tokens) {
		seqs := pick(g)
		pre := sharedPrefix(seqs)
		parts := p.chunks(seqs)
		placed := false
		for _, ck := range []bool{false, true} {
			if pre == 0 || placed {
				break
			}
			o := llm.TraceOptions{Checkpointed: ck || p.checkpointTraces}
			held, back := p.prefixBytes(m, pre, o)
			fits := held+back <= p.callBudget()
			for _, c := range parts {
				if !fits {
					break
				}
				_, fits = p.hostPlan(m, seqs[c[0]:c[1]], pre, held)
			}
			if !fits {
				continue
			}
			for k, c := range parts {
				chunks = append(chunks, [2]int{len(order) + c[0], len(order) + c[1]})
				shares = append(shares, hostShare{prefix: pre, opts: o, held: held, last: k == len(parts)-1})
			}
			order = append(order, g...)
			placed = true
		}
		if !placed {
			alone = append(alone, g...)
		}
	}
	slices.Sort(alone)
	for _, c := range p.chunks(pick(alone)) {
		chunks = append(chunks, [2]int{len(order) + c[0], len(order) + c[1]})
		shares = append(shares, hostShare{})
	}
	order = append(order, alone...)
	return reorder(b, order, names), chunks, shares
}
