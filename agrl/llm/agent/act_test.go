package agent

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/envs/calc"
)

// TestActPlaysAnEpisode: Act writes a native tool call as agrl's protocol text and a plain
// final turn as an answer, so agrl.Play runs a whole episode from a model's native turns; a
// malformed call comes back as written and the turn loop rejects it.
func TestActPlaysAnEpisode(t *testing.T) {
	p := loadPolicy(t, hf.Qwen3, nil)
	env := calc.New()
	turns := [][]int32{
		encodeTurns(p, 64, "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"6*7\"\n</tool_call><|im_end|>"),
		encodeTurns(p, 64, "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"6*7\"}}\n</tool_call><|im_end|>"),
		encodeTurns(p, 64, "42<|im_end|>"),
	}
	var texts []string
	agent := agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		text, ids, lps, err := withScript(p, turns[len(ep.Turns)]).Act(env.Tools(), ep, agrl.Sampling{}, 64)
		if err == nil && (len(ids) != len(lps) || slices.Contains(ids, p.stops[0])) {
			t.Errorf("turn %d: %d ids, %d log-probs (the stop id is not part of the action)", len(ep.Turns), len(ids), len(lps))
		}
		texts = append(texts, text)
		return text, err
	})
	ep, err := agrl.Play(env, mustTask(t, "6*7"), agent, agrl.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Turns) != 3 || ep.Turns[0].Action.Kind != agrl.Invalid || ep.Turns[1].Action.Kind != agrl.ToolCall ||
		ep.Turns[1].Observation != "42" || !ep.Correct || ep.Termination != agrl.Answered {
		t.Fatalf("episode %+v", ep)
	}
	if texts[1] != "<tool>calc(6*7)</tool>" || texts[2] != "<answer>42</answer>" {
		t.Errorf("protocol texts %q", texts)
	}
}

// TestActGreedyIsTheRolloutsFirstAction: on a fresh episode the rendered conversation is the
// rollout's prompt, so greedy Act writes the ids greedy Rollout samples for the first action.
func TestActGreedyIsTheRolloutsFirstAction(t *testing.T) {
	p := loadPolicy(t, hf.Qwen2, nil)
	env := calc.New()
	task := mustTask(t, "9-4")
	eps, _, err := p.Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	want := eps[0].Turns[0].Sampled
	if n := len(want); n > 0 && slices.Contains(p.stops, want[n-1]) {
		want = want[:n-1]
	}
	_, got, _, err := p.Act(env.Tools(), &agrl.Episode{Task: task, Prompt: eps[0].Prompt}, agrl.Sampling{}, 12)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("greedy Act wrote %v, the rollout %v", got, want)
	}
	if _, _, _, err := p.Act(env.Tools(), &agrl.Episode{Prompt: "x"}, agrl.Sampling{Temperature: -1}, 4); err == nil {
		t.Error("a negative temperature accepted")
	}
}

// TestTopK: the k largest of a vector, largest first and the first index among equals, as a
// stable sort gives them.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		v := make([]float64, 1+rng.IntN(40))
		for j := range v {
			v[j] = float64(rng.IntN(8)) // many ties
		}
		k := rng.IntN(len(v) + 3)
		order := make([]int, len(v))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return v[order[a]] > v[order[b]] })
		want := order[:min(k, len(v))]
		if got := topK(v, k); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("trial %d: topK(%v, %d) = %v, want %v", trial, v, k, got, want)
		}
	}
}

// TestDemonstration: an expert's episode encoded by Demonstration is, id for id and mask for
// mask, the episode a rollout holds when the model samples the expert's native turns — so SFT
// on demonstrations trains the sequences the sampler produces — in every format.
func TestDemonstration(t *testing.T) {
	env := calc.New()
	for _, fc := range formats {
		t.Run(fc.format.Name(), func(t *testing.T) {
			p := loadPolicy(t, fc.family, fc.format).System("Use calc, then answer with the number.")
			task := mustTask(t, "6*7-5")
			demo, err := agrl.Play(env, task, calc.Expert(), agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			ids, mask, err := p.Demonstration(env.Tools(), demo)
			if err != nil {
				t.Fatal(err)
			}
			var script []int32
			for _, turn := range demo.Turns {
				text, err := p.format.FormatAction(turn.Action, env.Tools())
				if err != nil {
					t.Fatal(err)
				}
				script = append(script, p.tok.Encode(text)...)
			}
			eps, _, err := withScript(p, script).Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 64}})
			if err != nil {
				t.Fatal(err)
			}
			ep := eps[0]
			if !ep.Correct || len(ep.Turns) != len(demo.Turns) {
				t.Fatalf("the scripted rollout: correct %v, %d turns; the expert's %d", ep.Correct, len(ep.Turns), len(demo.Turns))
			}
			if !slices.Equal(ep.Tokens, ids) || !slices.Equal(ep.LossMask, mask) {
				t.Fatalf("Demonstration: %d ids, the rollout %d (ids equal %v, masks equal %v)",
					len(ids), len(ep.Tokens), slices.Equal(ep.Tokens, ids), slices.Equal(ep.LossMask, mask))
			}
			bad := *demo
			bad.Turns = append([]agrl.Turn(nil), demo.Turns...)
			bad.Turns[0].Action = agrl.ParseAction("<tool>calc(")
			if _, _, err := p.Demonstration(env.Tools(), &bad); err == nil {
				t.Error("an invalid action encoded as a demonstration")
			}
		})
	}
}
