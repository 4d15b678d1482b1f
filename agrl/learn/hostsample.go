package learn

import (
	"math"
)

// The host decoder: on the host path (see onHost) a Decoder's steps run as plain Go over a KV
// cache in host memory instead of a GoMLX graph. Every step reads all of each sequence's
// pending tokens at once (a prompt or an observation costs its own length, never a padded
// chunk) and computes the next-token log-probs of the sequences that read something; nothing
// is padded, finished sequences cost nothing, so the graph path's chunk widths, cache growth
// and compaction have no host counterpart. The weights are read once, when Run starts.

// hostCache is one shard's KV cache: for each layer, the keys of row r, head h transposed,
// [hd, capacity] at k[l][((r·H+h)·hd)·capacity:], and its values [capacity, d] at
// v[l][r·capacity·d:] (the heads side by side).
type hostCache struct {
	k, v [][]float32
}

// hostStep is step on the host (the caller holds the weights w, read at Run's start).
func (d *Decoder) hostStep(part *decPart, w *hostWeights) ([]int, []float32) {
	p := d.p
	c := p.arch
	dm, m, v, nh := c.Width, c.MLP, c.Vocab(), c.Heads
	hd := dm / nh
	capacity := d.capacity
	rows := len(part.rows)
	if part.host == nil {
		part.host = &hostCache{}
		for range c.Layers {
			part.host.k = append(part.host.k, make([]float32, rows*dm*capacity))
			part.host.v = append(part.host.v, make([]float32, rows*capacity*dm))
		}
	}
	ar := &part.arena
	ar.reset()
	f := ar.alloc
	counts := make([]int, rows)
	off := make([]int, rows+1) // new tokens of row r are x rows off[r]..off[r+1]
	for r, i := range part.rows {
		counts[r] = len(d.seqs[i].pending)
		off[r+1] = off[r] + counts[r]
	}
	n := off[rows]
	pos := make([]int32, n)
	x := f(n * dm)
	for r, i := range part.rows {
		sq := &d.seqs[i]
		for t, tok := range sq.pending {
			pos[off[r]+t] = int32(sq.fed + t)
			copy(x[(off[r]+t)*dm:], w.embed[int(tok)*dm:(int(tok)+1)*dm])
		}
	}
	lnc := lnCache{f(n * dm), f(n)}
	h, qkv, o, u := f(n*dm), f(n*3*dm), f(n*dm), f(n*m)
	scores := f(capacity * capacity)
	for l := range w.layers {
		lw := &w.layers[l]
		kc, vc := part.host.k[l], part.host.v[l]
		c.attentionInputs(1, n, lw, x, h, qkv, lnc, pos) // the shards already use the cores
		for r, i := range part.rows {
			if counts[r] == 0 {
				continue
			}
			fed := d.seqs[i].fed
			for t := range counts[r] { // write the new keys (transposed) and values
				row, at := qkv[(off[r]+t)*3*dm:], fed+t
				for hh := range nh {
					base := (r*nh + hh) * hd * capacity
					for j := range hd {
						kc[base+j*capacity+at] = row[dm+hh*hd+j]
					}
				}
				copy(vc[(r*capacity+at)*dm:(r*capacity+at+1)*dm], row[2*dm:3*dm])
			}
			nr, L := counts[r], fed+counts[r]
			for hh := range nh {
				s := scores[:nr*L]
				gemmSet(nr, L, hd, qkv[off[r]*3*dm+hh*hd:], 3*dm, 1, kc[(r*nh+hh)*hd*capacity:], capacity, s, L)
				for t := range nr { // token t sees positions 0..fed+t
					row := s[t*L : (t+1)*L]
					vis := row[:fed+t+1]
					scaleBy(vis, 1/expSum(vis, maxOf(vis)))
					clear(row[fed+t+1:])
				}
				gemmSet(nr, hd, L, s, L, 1, vc[r*capacity*dm+hh*hd:], dm, o[off[r]*dm+hh*hd:], dm)
			}
		}
		gemm(n, dm, dm, o, dm, 1, lw.out, dm, x, dm) // the residual: x += o·out
		c.mlpResidual(1, n, lw, x, h, u, lnc)
	}
	// The next-token log-probs after each row's last new token.
	logp := make([]float32, rows*v)
	last := f(rows * dm)
	for r := range rows {
		if counts[r] > 0 {
			copy(last[r*dm:(r+1)*dm], x[(off[r+1]-1)*dm:off[r+1]*dm])
		}
	}
	hl := f(rows * dm)
	layerNormRows(last, hl, w.lnfG, w.lnfB, dm, 0, rows, lnCache{f(rows * dm), f(rows)})
	gemm(rows, v, dm, hl, dm, 1, w.head, v, logp, v)
	ban := bannedMask(v)
	for r := range rows {
		z := logp[r*v : (r+1)*v]
		if counts[r] == 0 {
			clear(z)
			continue
		}
		logSoftmaxRow(z, ban, d.invT, f(v))
	}
	for r, i := range part.rows {
		sq := &d.seqs[i]
		sq.fed += counts[r]
		sq.pending = sq.pending[counts[r]:]
		part.fed += counts[r]
	}
	part.steps++
	return counts, logp
}

// bannedMask is the additive logit mask of bannedTokens: maskedLogit at their ids, else 0.
func bannedMask(v int) []float32 {
	ban := make([]float32, v)
	for _, id := range bannedTokens() {
		ban[id] = maskedLogit
	}
	return ban
}

// logSoftmaxRow turns logits z into log-probabilities at inverse temperature invT,
// LogSoftmax(z·invT + ban), in place, and returns the entropy; p (len(z)) receives the
// probabilities. The trainer's and the sampler's output layers both call it.
func logSoftmaxRow(z, ban []float32, invT float32, p []float32) float32 {
	mx := logits(z, ban, invT)
	copy(p, z)
	sum := expSum(p, mx)
	lse, inv := mx+float32(math.Log(float64(sum))), 1/sum
	normalize(z, p[:len(z)], lse, inv)
	var ent float32
	for j, pj := range p[:len(z)] {
		ent -= pj * z[j]
	}
	return ent
}
