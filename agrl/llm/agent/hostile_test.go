package agent

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/envs/calc"
)

// scripted is a stream that makes the sampler write a fixed sequence of ids: each Next
// returns logits that put all the probability on the next id of the script (then on the
// format's end-of-turn id). It stands in for a model whose output the test chooses.
type scripted struct {
	script []int32
	k      *int // shared position: Clone copies it
	vocab  int
	stop   int32
}

func (s scripted) Next([]int32) ([]float32, error) {
	id := s.stop
	if *s.k < len(s.script) {
		id = s.script[*s.k]
	}
	*s.k++
	row := make([]float32, s.vocab)
	for j := range row {
		row[j] = -30
	}
	row[id] = 30
	return row, nil
}

func (s scripted) Clone() stream {
	k := *s.k
	return scripted{s.script, &k, s.vocab, s.stop}
}

func (s scripted) Release() {}

// withScript returns a copy of p whose every episode writes script.
func withScript(p *Policy, script []int32) *Policy {
	q := *p
	q.open = func() stream { return scripted{script, new(int), p.model.Config().VocabSize, p.stops[0]} }
	return &q
}

// encodeTurns is the script of a model that writes the given turns. A turn without its
// end-of-turn token is cut to maxAction tokens, where the sampler cuts it.
func encodeTurns(p *Policy, maxAction int, turns ...string) []int32 {
	var ids []int32
	for _, t := range turns {
		turn := p.tok.Encode(t)
		if !slices.Contains(p.stops, turn[len(turn)-1]) && len(turn) > maxAction {
			turn = turn[:maxAction]
		}
		ids = append(ids, turn...)
	}
	return ids
}

// (d) Malformed native tool calls are invalid actions that the model is told about as a tool
// result; valid calls reach calc; the episode is scored by calc's rubric.
func TestMalformedToolCalls(t *testing.T) {
	qwenCall := func(json string) string { return "<tool_call>\n" + json + "\n</tool_call><|im_end|>" }
	cases := []struct {
		format chat.Format
		family hf.Family
		turns  []string
		// want lists, per turn, the action's kind and a part of its reason or observation.
		want        []string
		termination agrl.Termination
		reward      float64
	}{{
		format: chat.Qwen25(), family: hf.Qwen2,
		turns: []string{
			qwenCall(`{"name": "calc", "arguments": {"expr": 42}}`),
			qwenCall(`{"name": "calc", "arguments": {"expr": "6*7"`),
			qwenCall(`{"name": "calc", "arguments": {"expr": "6*7"}}`),
			qwenCall(`{"name": "search", "arguments": {"query": "6*7"}}`),
			qwenCall(`{"name": "calc", "arguments": {"expr": "<obs>6*7</obs>"}}`),
			qwenCall(`{"name": "calc", "arguments": {"expr": "6/0"}}`),
			"The answer is 42<|im_end|>",
		},
		want: []string{
			"invalid:not a string", "invalid:malformed tool call JSON", "tool:42",
			"invalid:unknown tool", "invalid:cannot be passed to the environment", "tool:error: ",
			"answer:",
		},
		termination: agrl.Answered,
		reward:      0.2*(1-4.0/7) + 0.3, // "The answer is 42" is not a number: wrong
	}, {
		format: chat.Qwen3(), family: hf.Qwen3,
		turns: []string{
			"<think>\nfirst the product\n</think>\n\n" + qwenCall(`{"name": "calc", "arguments": {"expr": "6*7"}}`),
			"<think>\nunclosed<|im_end|>",
			"<tool_call><tool_call>{}</tool_call><|im_end|>",
			"<think>\nit said 42\n</think>\n\n42<|im_end|>",
		},
		want:        []string{"tool:42", "invalid:unclosed <think>", "invalid:", "answer:"},
		termination: agrl.Answered,
		reward:      0.2*(1-2.0/4) + 0.3 + 0.5,
	}, {
		format: chat.Llama3(), family: hf.Llama,
		turns: []string{
			`{"name": "calc", "parameters": {"expr": 6*7}}<|eot_id|>`,
			`<|python_tag|>{"name": "calc", "parameters": {"expr": "6*7"}}<|eom_id|>`,
			`{"name": "calc", "parameters": {"expr": "6*7"}} {"name": "calc", "parameters": {"expr": "1"}}<|eot_id|>`,
			"42<|eot_id|>",
		},
		want:        []string{"invalid:malformed", "tool:42", "invalid:several tool calls", "answer:"},
		termination: agrl.Answered,
		reward:      0.2*(1-2.0/4) + 0.3 + 0.5,
	}, {
		// Three invalid actions in a row end the episode; an action cut at the cap is one.
		format: chat.Qwen25(), family: hf.Qwen2,
		turns: []string{
			qwenCall(`{"name": "calc", "arguments": {"expr": "6*7"}}`)[:60] + strings.Repeat(" and a long tail", 8),
			"<|im_end|>",
			qwenCall(`[1, 2]`),
		},
		want:        []string{"invalid:the cap of 80 tokens", "invalid:empty turn", "invalid:JSON array"},
		termination: agrl.TooManyInvalid,
		reward:      0,
	}}
	for _, c := range cases {
		t.Run(c.format.Name(), func(t *testing.T) {
			p := loadPolicy(t, c.family, c.format)
			script := encodeTurns(p, 80, c.turns...)
			p = withScript(p, script)
			env := calc.New().Turns(len(c.turns))
			eps, _, err := p.Rollout(env, []agrl.Task{mustTask(t, "6*7")}, agrl.RolloutOptions{
				Sampling: agrl.Sampling{MaxActionTokens: 80},
			})
			if err != nil {
				t.Fatal(err)
			}
			ep := eps[0]
			checkLayout(t, p, "", env.Tools(), ep)
			var sampled []int32
			for _, s := range segments(ep) {
				if s.sampled {
					sampled = append(sampled, s.ids...)
				}
			}
			if !slices.Equal(sampled, script) {
				t.Errorf("the sampled runs are not the ids the model wrote")
			}
			if len(ep.Turns) != len(c.want) {
				t.Fatalf("%d turns, want %d: %s", len(ep.Turns), len(c.want), ep.MarshalIndent())
			}
			for k, tr := range ep.Turns {
				kind, part, _ := strings.Cut(c.want[k], ":")
				if tr.Action.Kind.String() != kind {
					t.Errorf("turn %d %q: %v, want kind %s", k, tr.Text, tr.Action, kind)
				}
				switch kind {
				case "invalid":
					if !strings.Contains(tr.Action.Invalid, part) || tr.Observation != "invalid action: "+tr.Action.Invalid {
						t.Errorf("turn %d: reason %q, observation %q; want a reason with %q", k, tr.Action.Invalid, tr.Observation, part)
					}
				case "tool":
					if !strings.HasPrefix(tr.Observation, part) {
						t.Errorf("turn %d: observation %q, want %q…", k, tr.Observation, part)
					}
				}
			}
			if ep.Termination != c.termination {
				t.Errorf("termination %s, want %s", ep.Termination, c.termination)
			}
			if _, err := calc.Rubric().Score(ep); err != nil {
				t.Fatal(err)
			}
			if math.Abs(ep.Reward-c.reward) > 1e-9 {
				t.Errorf("reward %v, want %v (%v)", ep.Reward, c.reward, ep.Rewards)
			}
		})
	}
}

// checkEpisode checks what must hold of any episode, whatever the model wrote.
func checkEpisode(t *testing.T, p *Policy, ep *agrl.Episode, budget int) {
	t.Helper()
	n := len(ep.Tokens)
	if len(ep.LossMask) != n || len(ep.LogProbs) != n || n > budget {
		t.Fatalf("%d tokens (budget %d), %d mask, %d log-probs", n, budget, len(ep.LossMask), len(ep.LogProbs))
	}
	if !slices.Contains(agrl.Terminations, ep.Termination) {
		t.Fatalf("termination %q", ep.Termination)
	}
	if len(ep.Turns) == 0 {
		t.Fatal("no turns")
	}
	for j, lp := range ep.LogProbs {
		if ep.LossMask[j] == 1 && (lp > 0 || math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0)) {
			t.Fatalf("log-prob %v at %d", lp, j)
		}
	}
	acts := 0
	for _, s := range segments(ep) {
		if s.sampled {
			if acts < len(ep.Turns) && p.tok.Decode(s.ids) != ep.Turns[acts].Text {
				t.Fatalf("turn %d: text is not the decoded ids", acts)
			}
			acts++
		}
	}
	if acts != len(ep.Turns) {
		t.Fatalf("%d sampled runs for %d turns", acts, len(ep.Turns))
	}
	if _, err := calc.Rubric().Score(ep); err != nil || math.IsNaN(ep.Reward) {
		t.Fatalf("score: %v, reward %v", err, ep.Reward)
	}
}

// hostileScript turns fuzz bytes into model output: pairs of bytes are ids anywhere in the
// model's vocabulary (padded rows past the tokenizer's included), and a byte 0xFF is the end
// of a turn, so that turns end often.
func hostileScript(p *Policy, data []byte) []int32 {
	vocab := p.model.Config().VocabSize
	var ids []int32
	for i := 0; i < len(data); i++ {
		switch {
		case data[i] == 0xFF:
			ids = append(ids, p.stops[int(data[i])%len(p.stops)])
		case i+1 < len(data):
			ids = append(ids, int32((int(data[i])<<8|int(data[i+1]))%vocab))
			i++
		}
	}
	return ids
}

// (e) Hostile model output: random ids, stray special tokens and turns of every shape never
// panic and always give a well-formed episode.
func FuzzRollout(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte("\x01\x30\x01\x31\xff\x01\x36\xff"))
	pols := map[string]*Policy{}
	for _, fc := range formats {
		pols[fc.format.Name()] = loadPolicy(f, fc.family, fc.format)
	}
	env := calc.New().Turns(6)
	task := mustTask(f, "6*7")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, fc := range formats {
			p := pols[fc.format.Name()]
			budget := 0
			if len(data) > 0 { // sometimes the budget ends the episode, sometimes the turns
				prompt, err := p.Prompt(env.Tools(), task.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				budget = len(prompt) + 1 + int(data[0])
			}
			q := withScript(p, hostileScript(p, data))
			eps, _, err := q.Rollout(env, []agrl.Task{task, task}, agrl.RolloutOptions{
				Sampling:  agrl.Sampling{MaxActionTokens: 24},
				Limits:    agrl.Limits{MaxInvalid: 6},
				MaxTokens: budget,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range eps {
				if budget == 0 {
					budget = p.Context()
				}
				checkEpisode(t, p, ep, budget)
			}
		}
	})
}

// The real random models at a high temperature, in every format: hostile output from the
// model itself.
func TestHotModel(t *testing.T) {
	env := calc.New().Turns(5)
	task := mustTask(t, "6*7")
	for _, fc := range formats {
		p := loadPolicy(t, fc.family, fc.format)
		eps, _, err := p.Rollout(env, []agrl.Task{task, task}, agrl.RolloutOptions{
			Sampling: agrl.Sampling{Temperature: 8, Seed: 5, MaxActionTokens: 20},
			Limits:   agrl.Limits{MaxInvalid: 5},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			checkEpisode(t, p, ep, p.Context())
			checkLayout(t, p, "", env.Tools(), ep)
		}
	}
}

// The episode keeps the ids the model wrote, even where they are not what encoding their text
// gives: here the model spells <tool_call> and </tool_call> byte by byte instead of using the
// added tokens. ParseTurn reads the text, the call reaches calc, and the tokens stay the
// sampled ones, so a re-tokenised transcript would differ from what was sampled.
func TestSampledIdsKept(t *testing.T) {
	p := loadPolicy(t, hf.Qwen2, nil)
	var call []int32
	for _, b := range []byte("<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"6*7\"}}\n</tool_call>") {
		call = append(call, int32(b)) // ids 0-255 are the byte tokens
	}
	call = append(call, p.stops[0])
	answer := p.tok.Encode("42<|im_end|>")
	script := append(slices.Clone(call), answer...)
	q := withScript(p, script)
	env := calc.New()
	eps, _, err := q.Rollout(env, []agrl.Task{mustTask(t, "6*7")}, agrl.RolloutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ep := eps[0]
	checkLayout(t, q, "", env.Tools(), ep)
	if len(ep.Turns) != 2 || ep.Turns[0].Action.Kind != agrl.ToolCall || ep.Turns[0].Observation != "42" ||
		ep.Termination != agrl.Answered || !ep.Correct {
		t.Fatalf("episode: %s", ep.MarshalIndent())
	}
	var sampled []int32
	for _, s := range segments(ep) {
		if s.sampled {
			sampled = append(sampled, s.ids...)
		}
	}
	if !slices.Equal(sampled, script) {
		t.Fatalf("sampled ids %v, want the script %v", sampled, script)
	}
	if again := p.tok.Encode(ep.Turns[0].Text); slices.Equal(again, call) || len(again) >= len(call) {
		t.Errorf("re-encoding the call gave %d ids for %d sampled: expected fewer (the added tokens)", len(again), len(call))
	}
}
