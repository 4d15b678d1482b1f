package multihop

import (
	"errors"
	"sort"
)

// The lexical scorer.
//
// A text's content tokens are its runs of ASCII letters and digits, lower-cased, without the
// stop words below. A fact's score for a query is
//
//	|query tokens ∩ fact tokens| + |query bigrams ∩ fact bigrams|
//
// where bigrams are pairs of adjacent content tokens, in order, and each token or bigram
// counts once. Facts scoring 0 are never returned; ties keep the world's fixed (seeded) fact
// order. Bigrams make word order matter: "mentor of Dax" ranks "The mentor of Dax is Quon."
// (3) above "The mentor of Quon is Dax." (2), and "Dax born" ranks "Dax was born in Vell." (3)
// above every other fact about Dax or about births (1). Each relation's query template
// (relation.query) thus ranks the fact asked for strictly first in every world.

// stopwords never count as matches.
var stopwords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "is": true, "was": true, "in": true,
	"for": true, "by": true, "to": true, "at": true, "on": true, "and": true, "or": true,
	"s": true, "who": true, "what": true, "where": true, "which": true,
}

// tokenize appends the content tokens of s to dst.
func tokenize(s string, dst []string) []string {
	for i := 0; i < len(s); {
		if !isAlnum(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isAlnum(s[j]) {
			j++
		}
		tok := make([]byte, j-i)
		for k := range tok {
			c := s[i+k]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			tok[k] = c
		}
		if !stopwords[string(tok)] {
			dst = append(dst, string(tok))
		}
		i = j
	}
	return dst
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// query is a parsed search query: its distinct tokens and bigrams.
type query struct {
	words   map[string]bool
	bigrams map[[2]string]bool
}

// Query errors, as the session reports them.
var (
	errQueryLong    = errors.New("query longer than 128 bytes")
	errQueryBinary  = errors.New("query must be printable ASCII")
	errQueryNoWords = errors.New("empty query: give words, e.g. search(Dax born)")
)

// parseQuery validates a search argument (already unquoted) and tokenizes it. It reads at
// most MaxQueryBytes bytes whatever the input.
func parseQuery(q string) (query, error) {
	if len(q) > MaxQueryBytes {
		return query{}, errQueryLong
	}
	for i := 0; i < len(q); i++ {
		if q[i] < 0x20 || q[i] > 0x7e {
			return query{}, errQueryBinary
		}
	}
	toks := tokenize(q, nil)
	if len(toks) == 0 {
		return query{}, errQueryNoWords
	}
	p := query{words: map[string]bool{}, bigrams: map[[2]string]bool{}}
	for i, t := range toks {
		p.words[t] = true
		if i > 0 {
			p.bigrams[[2]string{toks[i-1], t}] = true
		}
	}
	return p, nil
}

// score is the query's score for a fact's content tokens.
func (q query) score(toks []string) int {
	n := 0
	seen := map[string]bool{}
	seenBi := map[[2]string]bool{}
	for i, t := range toks {
		if q.words[t] && !seen[t] {
			seen[t] = true
			n++
		}
		if i > 0 {
			b := [2]string{toks[i-1], t}
			if q.bigrams[b] && !seenBi[b] {
				seenBi[b] = true
				n++
			}
		}
	}
	return n
}

// rank returns the indices of the k best facts of toks for q (score > 0, best first, ties
// in index order).
func (q query) rank(toks [][]string, k int) []int {
	type hit struct{ i, s int }
	var hits []hit
	for i, t := range toks {
		if s := q.score(t); s > 0 {
			hits = append(hits, hit{i, s})
		}
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].s > hits[b].s })
	if len(hits) > k {
		hits = hits[:k]
	}
	out := make([]int, len(hits))
	for i, h := range hits {
		out[i] = h.i
	}
	return out
}
