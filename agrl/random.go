package agrl

import (
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// RandomAgent returns a baseline that acts at random: each turn it calls one of env's tools
// with arguments made of words seen so far (45%), answers with such a word or a random number
// (35%), or writes text that breaks the protocol (20%). It is deterministic for a seed and a
// task, so baselines are reproducible. Expert and random mean rewards bracket what a policy
// can be expected to reach.
func RandomAgent(seed uint64, env Env) Agent {
	var tools []string
	if env != nil {
		for _, t := range env.Tools() {
			tools = append(tools, t.Name)
		}
	}
	return AgentFunc(func(ep *Episode) (string, error) {
		h := fnv.New64a()
		h.Write([]byte(ep.Task.ID))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()+uint64(len(ep.Turns))))
		words := strings.FieldsFunc(ep.Prompt, isWordSep)
		for _, t := range ep.Turns {
			words = append(words, strings.FieldsFunc(t.Observation, isWordSep)...)
		}
		word := func() string {
			if len(words) == 0 || rng.IntN(4) == 0 {
				return strconv.Itoa(rng.IntN(200) - 50)
			}
			return words[rng.IntN(len(words))]
		}
		switch u := rng.Float64(); {
		case u < 0.45 && len(tools) > 0:
			args := word()
			for rng.IntN(3) == 0 {
				args += " " + word()
			}
			return ToolAction(tools[rng.IntN(len(tools))], args), nil
		case u < 0.8:
			return AnswerText(word()), nil
		default:
			junk := []string{"", "hello", ToolOpen + "(" + ToolClose, AnswerOpen + word(), "<think>hmm</think>", ToolOpen + word() + ToolClose}
			return junk[rng.IntN(len(junk))], nil
		}
	})
}

func isWordSep(r rune) bool {
	return strings.ContainsRune(" \n\t,?:=.;\"'", r)
}

// GoldAnswer returns an agent that answers each task's gold answer at once, without a tool
// call: a guess that is always right. It is no baseline (it reads the answer); GRPO's task
// screening uses it (GRPO.Screen), where the probability that the policy writes its episode is
// the probability that the policy guesses the task right.
func GoldAnswer() Agent {
	return AgentFunc(func(ep *Episode) (string, error) { return AnswerText(ep.Task.Answer), nil })
}
