package multihop

import (
	"fmt"
	"strconv"
	"strings"
)

// This file builds a task's small world: made-up entities of four kinds and the facts that
// link them. A world is a pure function of a seed and four entity counts (see newWorld), so a
// Session rebuilds it from Task.Meta and a task replays identically after a JSON round trip.

// kind is an entity's type.
type kind int

const (
	person kind = iota
	company
	city
	country
	numKinds
)

var kindNames = [numKinds]string{"person", "company", "city", "country"}

// relation is one functional relation: every entity of kind subj has exactly one fact of it.
// A fact renders as before + subject + middle + object + after.
type relation struct {
	key       string // name in Task.Meta["chain"]
	subj, obj kind
	before    string
	middle    string
	after     string
	noun      string // the role the question names: "the <noun> of X"
	query     string // the expert's query, %s = subject: it ranks the fact first (see search.go)
}

// relations is fixed: its order is part of the world generator (do not reorder).
var relations = []relation{
	{key: "born", subj: person, obj: city, middle: " was born in ", after: ".", noun: "birthplace", query: "%s born"},
	{key: "works", subj: person, obj: company, middle: " works for ", after: ".", noun: "employer", query: "%s works"},
	{key: "mentor", subj: person, obj: person, before: "The mentor of ", middle: " is ", after: ".", noun: "mentor", query: "mentor of %s"},
	{key: "founded", subj: company, obj: person, middle: " was founded by ", after: ".", noun: "founder", query: "%s founded"},
	{key: "based", subj: company, obj: city, middle: " is based in ", after: ".", noun: "hq", query: "%s based"},
	{key: "located", subj: city, obj: country, middle: " is located in ", after: ".", noun: "country", query: "%s located"},
}

func relationByKey(key string) (int, bool) {
	for i, r := range relations {
		if r.key == key {
			return i, true
		}
	}
	return 0, false
}

// sentence renders a fact of relation r.
func (r relation) sentence(subj, obj string) string {
	return r.before + subj + r.middle + obj + r.after
}

// Limits of a world (Reset rejects Meta asking for more, so its work stays bounded).
const (
	maxPerKind  = 16
	maxEntities = 40
	maxHops     = 6
)

// sizes counts the entities of each kind: people, companies, cities, countries.
type sizes [numKinds]int

func (s sizes) String() string {
	parts := make([]string, numKinds)
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func parseSizes(text string) (sizes, error) {
	var s sizes
	parts := strings.Split(text, ",")
	if len(parts) != int(numKinds) {
		return s, fmt.Errorf("world %q: want 4 counts (people,companies,cities,countries)", clip(text))
	}
	total := 0
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > maxPerKind {
			return s, fmt.Errorf("world %q: %s count must be 1..%d", clip(text), kindNames[i], maxPerKind)
		}
		s[i] = n
		total += n
	}
	if s[person] < 2 {
		return s, fmt.Errorf("world %q: need at least 2 people", clip(text))
	}
	if total > maxEntities {
		return s, fmt.Errorf("world %q: more than %d entities", clip(text), maxEntities)
	}
	return s, nil
}

// fact is one edge of the world.
type fact struct {
	rel, subj, obj int
}

// world is a task's knowledge base. Entity i has names[i] and kinds[i]; facts are in the fixed,
// seeded order that breaks search ties.
type world struct {
	names []string
	kinds []kind
	facts []fact
	text  []string   // text[i] renders facts[i]
	toks  [][]string // content tokens of text[i] (see search.go)
	of    map[[2]int]int
	named map[string]int // exact name -> entity
}

// splitmix is a tiny deterministic generator (SplitMix64). The world generator uses its own so
// that worlds never change with the Go version's math/rand algorithms.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n) (n > 0); the modulo bias is negligible for small n.
func (r *splitmix) intn(n int) int { return int(r.next() % uint64(n)) }

const (
	onsets   = "bdfgklmnprstvz"
	vowels   = "aeiou"
	midCodas = "nrls" // a coda inside a name
	endCodas = "nrlsxk"
)

// reserved holds every word of the fact templates, questions and stop list: no entity may be
// called one of them, so a name token always means the entity.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	add := func(s string) {
		for _, w := range tokenize(s, nil) {
			m[w] = true
		}
	}
	for _, r := range relations {
		add(r.before + r.middle + r.after + " " + r.noun + " " + r.query)
	}
	for w := range stopwords {
		m[w] = true
	}
	add("who what")
	return m
}()

// syllable appends onset + vowel (+ coda) to b.
func syllable(r *splitmix, b []byte, codas string) []byte {
	b = append(b, onsets[r.intn(len(onsets))], vowels[r.intn(len(vowels))])
	if codas != "" && r.intn(2) == 0 {
		b = append(b, codas[r.intn(len(codas))])
	}
	return b
}

// name draws a pronounceable made-up name of 4 to 6 letters, capitalised.
func name(r *splitmix) string {
	b := make([]byte, 0, 6)
	if r.intn(5) == 0 { // three open syllables: "Kalidu"
		for range 3 {
			b = syllable(r, b, "")
		}
	} else {
		b = syllable(r, b, midCodas)
		b = syllable(r, b, endCodas)
	}
	b[0] -= 'a' - 'A'
	return string(b)
}

// newWorld builds the world of a seed: the entities' names, then one fact per entity and
// relation (each person: born, works, mentor; each company: founded, based; each city:
// located), in a seeded order.
func newWorld(seed uint64, sz sizes) (*world, error) {
	r := &splitmix{s: seed}
	w := &world{of: map[[2]int]int{}, named: map[string]int{}}
	byKind := [numKinds][]int{}
	lower := map[string]bool{}
	for k := person; k < numKinds; k++ {
		for range sz[k] {
			n, tries := name(r), 0
			for lower[strings.ToLower(n)] || reserved[strings.ToLower(n)] {
				if tries++; tries > 1000 {
					return nil, fmt.Errorf("cannot draw %d distinct names", len(w.names)+1)
				}
				n = name(r)
			}
			lower[strings.ToLower(n)] = true
			byKind[k] = append(byKind[k], len(w.names))
			w.named[n] = len(w.names)
			w.names = append(w.names, n)
			w.kinds = append(w.kinds, k)
		}
	}
	for e, k := range w.kinds {
		for ri, rel := range relations {
			if rel.subj != k {
				continue
			}
			cands := byKind[rel.obj]
			o := cands[r.intn(len(cands))]
			for o == e { // nobody mentors themself (a world has at least 2 people)
				o = cands[r.intn(len(cands))]
			}
			w.facts = append(w.facts, fact{rel: ri, subj: e, obj: o})
		}
	}
	for i := len(w.facts) - 1; i > 0; i-- {
		j := r.intn(i + 1)
		w.facts[i], w.facts[j] = w.facts[j], w.facts[i]
	}
	for i, f := range w.facts {
		w.of[[2]int{f.subj, f.rel}] = i
		s := relations[f.rel].sentence(w.names[f.subj], w.names[f.obj])
		w.text = append(w.text, s)
		w.toks = append(w.toks, tokenize(s, nil))
	}
	return w, nil
}

// follow applies relation rel to entity e: the single object of e's fact, or -1.
func (w *world) follow(e, rel int) int {
	i, ok := w.of[[2]int{e, rel}]
	if !ok {
		return -1
	}
	return w.facts[i].obj
}

// question renders the prompt of a chain that starts at entity start.
func question(startName string, chain []int, answerKind kind) string {
	var b strings.Builder
	if answerKind == person {
		b.WriteString("Who is the ")
	} else {
		b.WriteString("What is the ")
	}
	for i := len(chain) - 1; i >= 0; i-- {
		b.WriteString(relations[chain[i]].noun)
		if i > 0 {
			b.WriteString(" of the ")
		}
	}
	b.WriteString(" of " + startName + "?")
	return b.String()
}

// spec is what Task.Meta holds: the world's seed and sizes, the relation chain (first hop
// first) and the start entity's name.
type spec struct {
	seed  uint64
	sizes sizes
	chain []int
	start string
}

// Meta keys.
const (
	metaSeed  = "seed"
	metaWorld = "world"
	metaChain = "chain"
	metaStart = "start"
)

func (s spec) meta() map[string]string {
	keys := make([]string, len(s.chain))
	for i, r := range s.chain {
		keys[i] = relations[r].key
	}
	return map[string]string{
		metaSeed:  strconv.FormatUint(s.seed, 10),
		metaWorld: s.sizes.String(),
		metaChain: strings.Join(keys, ","),
		metaStart: s.start,
	}
}

func parseSpec(meta map[string]string) (spec, error) {
	var s spec
	var err error
	for _, k := range []string{metaSeed, metaWorld, metaChain, metaStart} {
		if _, ok := meta[k]; !ok {
			return s, fmt.Errorf("missing Meta[%q]", k)
		}
	}
	if s.seed, err = strconv.ParseUint(meta[metaSeed], 10, 64); err != nil {
		return s, fmt.Errorf("Meta[seed] %q is not an unsigned integer", clip(meta[metaSeed]))
	}
	if s.sizes, err = parseSizes(meta[metaWorld]); err != nil {
		return s, err
	}
	keys := strings.Split(meta[metaChain], ",")
	if len(keys) > maxHops {
		return s, fmt.Errorf("Meta[chain] has more than %d hops", maxHops)
	}
	for i, key := range keys {
		r, ok := relationByKey(key)
		if !ok {
			return s, fmt.Errorf("Meta[chain]: unknown relation %q", clip(key))
		}
		if i > 0 && relations[s.chain[i-1]].obj != relations[r].subj {
			return s, fmt.Errorf("Meta[chain]: %s cannot follow %s", key, keys[i-1])
		}
		s.chain = append(s.chain, r)
	}
	s.start = meta[metaStart]
	return s, nil
}

// resolved is a spec applied to its world: the entities along the chain, start first.
type resolved struct {
	w      *world
	path   []int
	prompt string
	answer string
}

func resolve(s spec) (resolved, error) {
	w, err := newWorld(s.seed, s.sizes)
	if err != nil {
		return resolved{}, err
	}
	e, ok := w.named[s.start]
	if !ok {
		return resolved{}, fmt.Errorf("Meta[start] %q is not an entity of the world", clip(s.start))
	}
	if w.kinds[e] != relations[s.chain[0]].subj {
		return resolved{}, fmt.Errorf("Meta[start] %q is a %s, not a %s", s.start, kindNames[w.kinds[e]], kindNames[relations[s.chain[0]].subj])
	}
	path := []int{e}
	for _, r := range s.chain {
		e = w.follow(e, r)
		path = append(path, e)
	}
	return resolved{w: w, path: path, prompt: question(s.start, s.chain, w.kinds[e]), answer: w.names[e]}, nil
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
