// Package multihop is multi-hop search QA over a small synthetic knowledge base.
//
// Every task has its own world, built from a seed kept in Task.Meta: 12 to 18 made-up
// entities (people, companies, cities, countries with pronounceable 4-6 letter names such as
// "Dakor") and one fact per entity and relation (22 to 36 facts):
//
//	Dakor was born in Vell.        (born: person -> city)
//	Dakor works for Zorni.         (works: person -> company)
//	The mentor of Dakor is Quon.   (mentor: person -> person)
//	Zorni was founded by Quon.     (founded: company -> person)
//	Zorni is based in Vell.        (based: company -> city)
//	Vell is located in Lomar.      (located: city -> country)
//
// The question names a chain of roles, "Who is the founder of the employer of Dakor?", and
// the policy must find each link with the search tool: search(Dakor works) returns
// "Dakor works for Zorni.", then search(Zorni founded) returns "Zorni was founded by Quon.",
// and the answer is Quon. Easy questions take 1 hop, medium 2, hard 3 and extreme (the OOD
// split) 4; worlds grow with the difficulty. Every relation is a function (each entity has
// exactly one fact of each relation its kind has), so every hop has exactly one answer, and
// names are fresh in every world, so the policy cannot memorise facts: it has to search.
//
// search(query) returns the TopK (default 2) facts that best match the query by a lexical
// score (shared words plus shared ordered word pairs, ties in a fixed seeded fact order; see
// search.go), one per line. The other facts about the same entities, and about the same
// relation, are the distractors: a query that names the role ("birthplace of Dakor") instead of
// the fact's words ("Dakor born") may rank the wrong fact first. Queries are capped at
// MaxQueryBytes and must be printable ASCII. A search that retrieves nothing (an empty or
// stop-word-only query, no matching fact, an over-long or binary query) is a tool error; a
// search is "irrelevant" when none of its results names an entity of the question's chain.
// Both kinds set StepResult.Info["relevant"] = "false" and cost 0.1 in the preset rubric.
// Answers are compared after agrl.NormalizeAnswer.
//
// Task.Meta holds "seed" (the world's seed), "world" (people,companies,cities,countries),
// "chain" (the relation keys, first hop first, e.g. "works,founded") and "start" (the
// entity the question starts from). Reset rebuilds the world from them and checks that the
// task's prompt and answer are the ones they produce.
package multihop

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"agrl.dev/agrl"
)

// Name is the environment's name, as in Task.Env.
const Name = "multihop"

// MaxQueryBytes caps a search query (after removing one pair of quotes).
const MaxQueryBytes = 128

// MaxTopK caps the number of facts one search returns.
const MaxTopK = 8

// Env generates multi-hop questions and runs their episodes. It is a value: every setter
// returns a copy. The zero value behaves like New().
type Env struct {
	maxTurns int
	topK     int
}

// New returns the environment with its defaults: 6 turns (4 hops plus an answer plus one
// spare) and 2 facts per search.
func New() Env { return Env{maxTurns: 6, topK: 2} }

// Turns sets the number of actions an episode may take (the value MaxTurns reports); n < 1
// means 1. It cannot be called MaxTurns, which agrl.Env reserves for the getter.
func (e Env) Turns(n int) Env {
	e.maxTurns = max(n, 1)
	return e
}

// TopK sets how many facts one search returns, clamped to 1..MaxTopK. Every question stays
// answerable with TopK(1): the right query ranks the fact it asks for strictly first.
func (e Env) TopK(k int) Env {
	e.topK = min(max(k, 1), MaxTopK)
	return e
}

// K returns the number of facts one search returns.
func (e Env) K() int {
	if e.topK == 0 {
		return 2
	}
	return e.topK
}

// Name returns "multihop".
func (e Env) Name() string { return Name }

// MaxTurns returns the number of actions an episode may take (6 by default).
func (e Env) MaxTurns() int {
	if e.maxTurns == 0 {
		return 6
	}
	return e.maxTurns
}

// Tools documents the search tool.
func (e Env) Tools() []agrl.Tool {
	return []agrl.Tool{{
		Name: "search",
		Args: fmt.Sprintf("query: words to match, e.g. Dakor born (at most %d bytes)", MaxQueryBytes),
		Doc:  fmt.Sprintf("the %d facts that best match the query, best first, one per line", e.K()),
	}}
}

// worldSizes are the entity counts (people, companies, cities, countries) of each difficulty.
var worldSizes = map[agrl.Difficulty]sizes{
	agrl.Easy:    {5, 2, 3, 2}, // 12 entities, 22 facts
	agrl.Medium:  {6, 3, 3, 2}, // 14 entities, 27 facts
	agrl.Hard:    {7, 3, 4, 2}, // 16 entities, 31 facts
	agrl.Extreme: {8, 4, 4, 2}, // 18 entities, 36 facts
}

// Hops returns the number of searches a question of difficulty d needs: 1 (easy) to 4
// (extreme), or 0 for an invalid difficulty.
func Hops(d agrl.Difficulty) int {
	if !d.Valid() {
		return 0
	}
	return int(d)
}

// Generate draws a world seed from rng and a question of Hops(d) hops over distinct entities
// in that world.
func (e Env) Generate(rng *rand.Rand, d agrl.Difficulty) (agrl.Task, error) {
	if !d.Valid() {
		return agrl.Task{}, fmt.Errorf("multihop: invalid difficulty %d", int(d))
	}
	if rng == nil {
		return agrl.Task{}, errors.New("multihop: Generate needs a random source")
	}
	for range 100 {
		s := spec{seed: rng.Uint64(), sizes: worldSizes[d]}
		w, err := newWorld(s.seed, s.sizes)
		if err != nil {
			continue
		}
		chain, start, ok := drawChain(w, &splitmix{s: s.seed ^ 0x5eed}, Hops(d))
		if !ok {
			continue
		}
		s.chain, s.start = chain, w.names[start]
		res, err := resolve(s)
		if err != nil {
			return agrl.Task{}, fmt.Errorf("multihop: %w", err) // a generator bug
		}
		return agrl.Task{
			ID:         agrl.TaskID(Name, res.prompt),
			Env:        Name,
			Prompt:     res.prompt,
			Answer:     res.answer,
			Difficulty: d,
			Meta:       s.meta(),
		}, nil
	}
	return agrl.Task{}, fmt.Errorf("multihop: no %d-hop question found in 100 worlds", Hops(d))
}

// drawChain walks hops random relations from a random start entity, visiting distinct
// entities. It returns false when a few hundred walks all failed.
func drawChain(w *world, r *splitmix, hops int) ([]int, int, bool) {
	for range 300 {
		start := r.intn(len(w.names))
		e, chain, seen := start, []int(nil), map[int]bool{start: true}
		for len(chain) < hops {
			var out []int
			for ri, rel := range relations {
				if rel.subj == w.kinds[e] {
					out = append(out, ri)
				}
			}
			if len(out) == 0 {
				break
			}
			rel := out[r.intn(len(out))]
			e = w.follow(e, rel)
			if seen[e] {
				break
			}
			seen[e] = true
			chain = append(chain, rel)
		}
		if len(chain) == hops {
			return chain, start, true
		}
	}
	return nil, 0, false
}

// Reset validates task (its env name, Meta, and that Meta reproduces its prompt and answer)
// and starts an episode.
func (e Env) Reset(task agrl.Task) (agrl.Session, string, error) {
	if task.Env != Name {
		return nil, "", fmt.Errorf("multihop: task %q is for env %q", task.ID, clip(task.Env))
	}
	if err := task.Validate(); err != nil {
		return nil, "", err
	}
	s, err := parseSpec(task.Meta)
	if err != nil {
		return nil, "", fmt.Errorf("multihop: task %q: %w", task.ID, err)
	}
	res, err := resolve(s)
	if err != nil {
		return nil, "", fmt.Errorf("multihop: task %q: %w", task.ID, err)
	}
	if res.prompt != task.Prompt {
		return nil, "", fmt.Errorf("multihop: task %q: prompt %q does not match Meta (want %q)", task.ID, clip(task.Prompt), res.prompt)
	}
	if agrl.NormalizeAnswer(task.Answer) != agrl.NormalizeAnswer(res.answer) {
		return nil, "", fmt.Errorf("multihop: task %q: answer %q does not match Meta (want %q)", task.ID, clip(task.Answer), res.answer)
	}
	onChain := map[int]bool{}
	for _, p := range res.path {
		onChain[p] = true
	}
	return &session{w: res.w, k: e.K(), onChain: onChain, answer: agrl.NormalizeAnswer(res.answer)}, task.Prompt, nil
}

// session is one episode: the world, and which entities lie on the question's chain.
type session struct {
	w       *world
	k       int
	onChain map[int]bool
	answer  string
}

// info returns a fresh Info map (episodes keep it, so steps must not share one).
func info(relevant bool) map[string]string {
	if relevant {
		return map[string]string{"relevant": "true"}
	}
	return map[string]string{"relevant": "false"}
}

// Step answers a search or an answer.
func (s *session) Step(a agrl.Action) agrl.StepResult {
	switch a.Kind {
	case agrl.AnswerAction:
		ans := agrl.NormalizeAnswer(a.Answer)
		return agrl.StepResult{Done: true, Correct: ans != "" && ans == s.answer}
	case agrl.ToolCall:
		if a.Tool != "search" {
			return agrl.StepResult{
				Observation: "error: unknown tool; use search(query)",
				ToolError:   "unknown tool",
				Info:        info(false),
			}
		}
		return s.search(a.Args)
	}
	return agrl.StepResult{Observation: "error: not a tool call or answer", ToolError: "invalid action", Info: info(false)}
}

// search runs one search call on the raw argument text.
func (s *session) search(args string) agrl.StepResult {
	if len(args) > MaxQueryBytes+2 { // decided before any scan of the text
		return agrl.StepResult{Observation: "error: " + errQueryLong.Error(), ToolError: errQueryLong.Error(), Info: info(false)}
	}
	q, err := parseQuery(agrl.UnquoteArg(args))
	if err != nil {
		return agrl.StepResult{Observation: "error: " + err.Error(), ToolError: err.Error(), Info: info(false)}
	}
	hits := q.rank(s.w.toks, s.k)
	if len(hits) == 0 {
		return agrl.StepResult{Observation: "error: no fact matches", ToolError: "no match", Info: info(false)}
	}
	lines := make([]string, len(hits))
	rel := false
	for i, h := range hits {
		lines[i] = s.w.text[h]
		if f := s.w.facts[h]; s.onChain[f.subj] || s.onChain[f.obj] {
			rel = true
		}
	}
	return agrl.StepResult{Observation: strings.Join(lines, "\n"), Info: info(rel)}
}
