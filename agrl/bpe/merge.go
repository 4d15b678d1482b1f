package bpe

import (
	"strings"
	"sync"
)

// BPE merging: a piece starts as one symbol per byte; the adjacent pair whose merge has the
// lowest rank (earliest in tokenizer.json's merges) is merged, the leftmost pair among equal
// ranks first, until no adjacent pair has a merge. A heap of candidate pairs makes it
// O(n log n) in the piece's length n (a long run of spaces or a base64 blob is one piece); a
// candidate whose symbols have changed since it was pushed is dropped when popped.

// A merge is what a pair of token ids becomes.
type merge struct {
	rank int32 // position in the merges list: lower merges first
	id   int32 // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

const (
	noToken   = -1 // a byte whose token is missing from the vocabulary
	deadToken = -2 // a symbol merged into its left neighbour
)

type symbol struct {
	id         int32
	prev, next int32 // indexes of the neighbours, -1 at the ends
}

type candidate struct {
	rank, pos   int32 // pos: index of the left symbol
	left, right int32 // the ids the pair had when pushed
	merged      int32
}

// A worker holds one merge's scratch space; workers are pooled.
type worker struct {
	syms []symbol
	heap []candidate
}

var workers = sync.Pool{New: func() any { return new(worker) }}

func less(a, b candidate) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }

func (w *worker) push(c candidate) {
	h := append(w.heap, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	w.heap = h
}

func (w *worker) pop() candidate {
	h := w.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && less(h[l], h[small]) {
			small = l
		}
		if r := l + 1; r < n && less(h[r], h[small]) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	w.heap = h
	return top
}

// tryPush queues the pair that starts at symbol pos, if it has a merge.
func (t *Tokenizer) tryPush(w *worker, pos int32) {
	s := w.syms[pos]
	if s.next < 0 {
		return
	}
	right := w.syms[s.next].id
	if m, ok := t.merges[pairKey(s.id, right)]; ok {
		w.push(candidate{rank: m.rank, pos: pos, left: s.id, right: right, merged: m.id})
	}
}

// mergeBytes returns the token ids of one pre-tokenized piece (its raw bytes).
func (t *Tokenizer) mergeBytes(dst []int32, piece string) []int32 {
	w := workers.Get().(*worker)
	defer workers.Put(w)
	n := int32(len(piece))
	if n == 0 {
		return dst
	}
	w.syms = w.syms[:0]
	w.heap = w.heap[:0]
	for i := range n {
		w.syms = append(w.syms, symbol{id: t.byteID[piece[i]], prev: i - 1, next: i + 1})
	}
	w.syms[n-1].next = -1
	for i := range n - 1 {
		t.tryPush(w, i)
	}
	for len(w.heap) > 0 {
		c := w.pop()
		s := &w.syms[c.pos]
		if s.id != c.left || s.next < 0 || w.syms[s.next].id != c.right {
			continue // stale: one of the two has merged since
		}
		right := s.next
		s.id = c.merged
		s.next = w.syms[right].next
		w.syms[right].id = deadToken
		if s.next >= 0 {
			w.syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			t.tryPush(w, s.prev)
		}
		t.tryPush(w, c.pos)
	}
	for i := int32(0); i >= 0; i = w.syms[i].next {
		switch id := w.syms[i].id; {
		case id >= 0:
			dst = append(dst, id)
		case t.unk >= 0:
			dst = append(dst, t.unk)
		}
	}
	return dst
}

// appendPiece appends the ids of one pre-tokenized piece.
func (t *Tokenizer) appendPiece(dst []int32, piece string) []int32 {
	switch {
	case piece == "":
		return dst
	case t.ignoreMerges:
		// Llama 3: a piece that is itself a token is taken whole, merges or not.
		if id, ok := t.byBytes[piece]; ok {
			return append(dst, id)
		}
	}
	if len(piece) == 1 {
		if id := t.byteID[piece[0]]; id >= 0 {
			return append(dst, id)
		} else if t.unk >= 0 {
			return append(dst, t.unk)
		}
		return dst
	}
	if len(piece) > maxCachedPiece {
		return t.mergeBytes(dst, piece)
	}
	if ids, ok := t.cache.get(piece); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = t.mergeBytes(dst, piece)
	t.cache.put(piece, dst[start:])
	return dst
}

// The cache of merged pieces: most text is made of a few thousand distinct words.
const (
	maxCachedPiece = 64      // bytes; longer pieces are merged every time
	maxCacheSize   = 1 << 16 // entries; a full cache is emptied and starts over
)

type pieceCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *pieceCache) get(piece string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[piece]
	c.mu.RUnlock()
	return ids, ok
}

func (c *pieceCache) put(piece string, ids []int32) {
	ids = append([]int32(nil), ids...)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCacheSize {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[strings.Clone(piece)] = ids
	c.mu.Unlock()
}
