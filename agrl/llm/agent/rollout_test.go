package agent

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/envs/calc"
)

// formats are the three chat formats, each with a test model of a family that uses it.
var formats = []struct {
	family hf.Family
	format chat.Format
}{
	{hf.Qwen2, chat.Qwen25()},
	{hf.Qwen3, chat.Qwen3()},
	{hf.Llama, chat.Llama3()},
}

// segment is a maximal run of an episode's tokens with one loss-mask value.
type segment struct {
	sampled bool
	ids     []int32
}

func segments(ep *agrl.Episode) []segment {
	var segs []segment
	for j, id := range ep.Tokens {
		s := ep.LossMask[j] == 1
		if len(segs) == 0 || segs[len(segs)-1].sampled != s {
			segs = append(segs, segment{sampled: s})
		}
		segs[len(segs)-1].ids = append(segs[len(segs)-1].ids, id)
	}
	return segs
}

// checkLayout checks the token-in/token-out layout of ep against ids the test computes on
// its own: the rendered prompt encoded once, then each action's sampled ids (their decoding
// is Turn.Text), each followed, while the episode goes on, by the encoded observation piece
// (after the end-of-turn token when the action lacked one). It returns how many actions do
// not come back from encoding their own text.
func checkLayout(t *testing.T, p *Policy, system string, tools []agrl.Tool, ep *agrl.Episode) (reencodedDiffer int) {
	t.Helper()
	n := len(ep.Tokens)
	if len(ep.LossMask) != n || len(ep.LogProbs) != n {
		t.Fatalf("%s: %d tokens, %d mask, %d log-probs", ep.Task.ID, n, len(ep.LossMask), len(ep.LogProbs))
	}
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: system})
	}
	msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: ep.Prompt})
	text, err := p.Format().Render(msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	want := p.Tokenizer().Encode(text)
	segs := segments(ep)
	if len(segs) == 0 || segs[0].sampled || !slices.Equal(segs[0].ids, want) {
		t.Fatalf("%s: the episode does not start with the encoded prompt", ep.Task.ID)
	}
	segs = segs[1:]
	if len(segs) == 0 {
		t.Fatalf("%s: no action sampled", ep.Task.ID)
	}
	closing := p.Tokenizer().Encode(p.Format().StopStrings()[0])
	for k, tr := range ep.Turns {
		if 2*k >= len(segs) || !segs[2*k].sampled {
			t.Fatalf("%s turn %d: no sampled run for it", ep.Task.ID, k)
		}
		act := segs[2*k].ids
		if got := p.Tokenizer().Decode(act); got != tr.Text {
			t.Errorf("%s turn %d: text %q, but the sampled ids decode to %q", ep.Task.ID, k, tr.Text, got)
		}
		if !slices.Equal(p.Tokenizer().Encode(tr.Text), act) {
			reencodedDiffer++
		}
		if 2*k+1 >= len(segs) {
			if k != len(ep.Turns)-1 {
				t.Fatalf("%s: no observation after turn %d of %d", ep.Task.ID, k, len(ep.Turns))
			}
			break
		}
		var obs []int32
		if !slices.Contains(p.StopTokens(), act[len(act)-1]) {
			obs = append(obs, closing...)
		}
		obs = p.Tokenizer().AppendEncode(obs, p.Format().AppendObservation(tr.Observation))
		if !slices.Equal(segs[2*k+1].ids, obs) {
			t.Fatalf("%s turn %d: the observation tokens are not encode(AppendObservation(%q))", ep.Task.ID, k, tr.Observation)
		}
	}
	if len(segs) != 2*len(ep.Turns)-1 {
		t.Fatalf("%s: %d runs of tokens after the prompt for %d turns", ep.Task.ID, len(segs), len(ep.Turns))
	}
	for j := range ep.Tokens {
		if ep.LossMask[j] == 0 && ep.LogProbs[j] != 0 {
			t.Fatalf("%s: log-prob %v at unsampled position %d", ep.Task.ID, ep.LogProbs[j], j)
		}
	}
	return reencodedDiffer
}

// (a) Token in, token out, on calc with a random model of each family: episodes of several
// turns whose tokens are the prompt's, the actions' and the observations', in order.
func TestTokenInTokenOut(t *testing.T) {
	env := calc.New().Turns(3)
	tasks := []agrl.Task{mustTask(t, "6*7"), mustTask(t, "81/9"), mustTask(t, "6*7")}
	for _, fc := range formats {
		t.Run(fc.format.Name(), func(t *testing.T) {
			const system = "Use calc, then answer with the number."
			p := loadPolicy(t, fc.family, fc.format).System(system)
			opt := agrl.RolloutOptions{
				Sampling: agrl.Sampling{Temperature: 1, Seed: 3, MaxActionTokens: 10},
				Limits:   agrl.Limits{MaxInvalid: 5},
			}
			eps, st, err := p.Rollout(env, tasks, opt)
			if err != nil {
				t.Fatal(err)
			}
			differ, multi := 0, 0
			for _, ep := range eps {
				differ += checkLayout(t, p, system, env.Tools(), ep)
				if len(ep.Turns) > 1 {
					multi++
				}
				if ep.Termination == "" {
					t.Errorf("%s: no termination", ep.Task.ID)
				}
			}
			if multi == 0 {
				t.Error("no episode took more than one turn")
			}
			// Sampled ids need not be what encoding their text gives (here: byte tokens where
			// a merge exists, bytes decoded to U+FFFD); the episode keeps the sampled ones.
			if differ == 0 {
				t.Error("every action re-encoded to its own ids; expected some not to")
			}
			// The two tasks with one prompt share its forward pass: every token but each
			// episode's last is fed once, and the prompt once for both.
			prompts := map[string]bool{}
			wantFed := 0
			for _, ep := range eps {
				n := len(segments(ep)[0].ids)
				if key := string(int32Bytes(ep.Tokens[:n])); !prompts[key] {
					prompts[key] = true
					wantFed += n
				}
				wantFed += len(ep.Tokens) - n - 1
			}
			if len(prompts) != 2 || st.Tokens != wantFed {
				t.Errorf("%d prompts, %d tokens fed; want 2 and %d", len(prompts), st.Tokens, wantFed)
			}
			gen := 0
			for _, ep := range eps {
				for _, m := range ep.LossMask {
					gen += int(m)
				}
			}
			if st.Episodes != len(tasks) || st.Generated != gen {
				t.Errorf("stats %+v; want %d episodes, %d generated", st, len(tasks), gen)
			}
		})
	}
}

// Encoding decoded ids may give other ids: a re-tokenised transcript is not what was sampled.
func TestReencodingDiffers(t *testing.T) {
	p := loadPolicy(t, hf.Qwen3, nil)
	tok := p.Tokenizer()
	th, ok := tok.TokenID("th")
	if !ok {
		t.Fatal("the test tokenizer has no merge th")
	}
	for _, sampled := range [][]int32{
		{'t', 'h', 'e'}, // three byte tokens where merges give "the" as one
		{0xE2, 0x82},    // half a UTF-8 sequence: decodes to U+FFFD
		{th, 'e'},
	} {
		text := tok.Decode(sampled)
		if again := tok.Encode(text); slices.Equal(again, sampled) {
			t.Errorf("%v: encode(decode) gave the same ids", sampled)
		}
	}
}

// logSoftmaxRef is log softmax(row/temperature) in float64, the reference for the sampler.
func logSoftmaxRef(row []float32, temperature float64) []float64 {
	if temperature == 0 {
		temperature = 1
	}
	out := make([]float64, len(row))
	mx := math.Inf(-1)
	for j, v := range row {
		out[j] = float64(v) / temperature
		mx = max(mx, out[j])
	}
	var sum float64
	for _, x := range out {
		sum += math.Exp(x - mx)
	}
	for j := range out {
		out[j] -= mx + math.Log(sum)
	}
	return out
}

// checkLogProbs compares the recorded log-probs of ep with those of m.Logits over the whole
// sequence at the sampling temperature, and with Score.
func checkLogProbs(t *testing.T, p *Policy, ep *agrl.Episode, temperature float64) {
	t.Helper()
	rows, err := p.Model().Logits(ep.Tokens[:len(ep.Tokens)-1])
	if err != nil {
		t.Fatal(err)
	}
	score, err := p.Score(ep.Tokens, temperature)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for j := 1; j < len(ep.Tokens); j++ {
		if d := math.Abs(float64(score[j]) - logSoftmaxRef(rows[j-1], temperature)[ep.Tokens[j]]); d > 1e-4 {
			t.Fatalf("Score at %d is off by %g", j, d)
		}
		if ep.LossMask[j] == 0 {
			continue
		}
		want := logSoftmaxRef(rows[j-1], temperature)[ep.Tokens[j]]
		if d := math.Abs(float64(ep.LogProbs[j]) - want); d > 1e-4 {
			t.Fatalf("%s position %d: log-prob %v, recomputed %v", ep.Task.ID, j, ep.LogProbs[j], want)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no sampled token")
	}
}

// (b) The log-probs recorded while sampling are those of the full sequence's logits at the
// sampling temperature, with and without top-k / top-p (which restrict the draw, not the
// recorded distribution), and through a LoRA view.
func TestLogProbs(t *testing.T) {
	env := calc.New().Turns(3)
	task := mustTask(t, "12+30")
	for _, s := range []agrl.Sampling{
		{Temperature: 0.7, Seed: 1, MaxActionTokens: 8},
		{Temperature: 1.5, TopP: 0.9, TopK: 40, Seed: 2, MaxActionTokens: 8},
		{Temperature: 0, MaxActionTokens: 6},
	} {
		for _, fc := range formats[1:] {
			p := loadPolicy(t, fc.family, fc.format)
			eps, _, err := p.Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{Sampling: s})
			if err != nil {
				t.Fatal(err)
			}
			checkLogProbs(t, p, eps[0], s.Temperature)
		}
	}

	// A LoRA view: its own log-probs, not the base model's.
	p := loadPolicy(t, hf.Qwen3, nil)
	ad, err := p.Model().AddLoRA(llm.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj"}}, 5)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, prm := range ad.Params() {
		if strings.Contains(prm.Name, "lora_B") {
			for i := range prm.Data {
				prm.Data[i] = float32(rng.NormFloat64() * 0.3)
			}
		}
	}
	q, err := p.Adapters(ad)
	if err != nil {
		t.Fatal(err)
	}
	s := agrl.Sampling{Temperature: 1, Seed: 4, MaxActionTokens: 8}
	eps, _, err := q.Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{Sampling: s})
	if err != nil {
		t.Fatal(err)
	}
	checkLogProbs(t, q, eps[0], 1)
	base, err := p.Score(eps[0].Tokens, 1)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(base, eps[0].LogProbs) {
		t.Error("the adapters changed nothing")
	}
}

// (c) Greedy decoding is deterministic, does not depend on the number of workers, and gives
// the argmax of the full sequence's logits at every sampled position. Seeded sampling repeats
// itself, and another seed samples otherwise.
func TestGreedyAndSeeds(t *testing.T) {
	env := calc.New().Turns(3)
	tasks := []agrl.Task{mustTask(t, "6*7"), mustTask(t, "9-4"), mustTask(t, "6*7")}
	p := loadPolicy(t, hf.Llama, nil)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{MaxActionTokens: 8}}
	a, _, err := p.Workers(1).Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := p.Workers(3).Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("greedy rollouts differ between runs")
	}
	if !reflect.DeepEqual(a[0], a[2]) {
		t.Error("greedy episodes of one task differ")
	}
	for _, ep := range a {
		rows, err := p.Model().Logits(ep.Tokens[:len(ep.Tokens)-1])
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < len(ep.Tokens); j++ {
			if ep.LossMask[j] == 1 {
				if best := argmax(rows[j-1]); best != ep.Tokens[j] {
					t.Fatalf("%s position %d: sampled %d, argmax by recomputation %d", ep.Task.ID, j, ep.Tokens[j], best)
				}
			}
		}
	}

	s := agrl.Sampling{Temperature: 1, Seed: 11, MaxActionTokens: 8}
	c1, _, err := p.Rollout(env, tasks, agrl.RolloutOptions{Sampling: s})
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := p.Workers(2).Rollout(env, tasks, agrl.RolloutOptions{Sampling: s})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c1, c2) {
		t.Error("one seed sampled two ways")
	}
	if slices.Equal(c1[0].Tokens, c1[2].Tokens) {
		t.Error("episodes 0 and 2 (one task) drew the same tokens: they should use streams (Seed, 0) and (Seed, 2)")
	}
	s.Seed++
	c3, _, err := p.Rollout(env, tasks, agrl.RolloutOptions{Sampling: s})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(c1[0].Tokens, c3[0].Tokens) {
		t.Error("another seed sampled the same tokens")
	}
}

func argmax(row []float32) int32 {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return int32(best)
}

// The token budget is per episode and ends it as TokenBudget; a prompt over it is an error.
func TestTokenBudget(t *testing.T) {
	p := loadPolicy(t, hf.Qwen2, nil)
	env := calc.New()
	task := mustTask(t, "6*7")
	prompt, err := p.Prompt(env.Tools(), task.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	for _, extra := range []int{1, 5, 40, 150} {
		budget := len(prompt) + extra
		eps, _, err := p.Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{
			Sampling:  agrl.Sampling{Temperature: 1, Seed: 1, MaxActionTokens: 12},
			Limits:    agrl.Limits{MaxInvalid: 10},
			MaxTokens: budget,
		})
		if err != nil {
			t.Fatal(err)
		}
		ep := eps[0]
		if len(ep.Tokens) > budget {
			t.Errorf("budget %d: %d tokens", budget, len(ep.Tokens))
		}
		if ep.Termination != agrl.TokenBudget {
			t.Errorf("budget %d: termination %s", budget, ep.Termination)
		}
		checkLayout(t, p, "", env.Tools(), ep)
	}
	if _, _, err := p.Rollout(env, []agrl.Task{task}, agrl.RolloutOptions{MaxTokens: len(prompt)}); err == nil {
		t.Error("a prompt that fills the budget was accepted")
	}
}

// A batched rollout gives each batch's logits back to llm's pool once no episode reads them
// (batcher.spent; the next batch writes its logits there), and the prompts' logits when it
// ends. With every buffer pooled and poisoned (NaN) when given back, the episodes are bit for
// bit those of a rollout on fresh memory: logits given back while an episode still draws from
// them would change them, or fail it (NaN logits).
func TestRolloutRecyclesLogits(t *testing.T) {
	env := calc.New().Turns(3)
	tasks := []agrl.Task{mustTask(t, "6*7"), mustTask(t, "9-4"), mustTask(t, "6*7"), mustTask(t, "12+30"), mustTask(t, "9-4")}
	p := loadPolicy(t, hf.Qwen3, nil)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 5, MaxActionTokens: 10}}
	restore := llm.PoolForTests(1<<40, false) // nothing pooled
	want, _, err := p.Rollout(env, tasks, opt)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	defer llm.PoolForTests(16, true)()
	for _, workers := range []int{0, 2} {
		q := p
		if workers > 0 {
			q = p.Workers(workers)
		}
		for round := range 2 { // the second round takes the first's recycled buffers
			got, _, err := q.Rollout(env, tasks, opt)
			if err != nil {
				t.Fatalf("workers %d, round %d: %v", workers, round, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("workers %d, round %d: the episodes differ from those on fresh memory", workers, round)
			}
		}
	}
}
