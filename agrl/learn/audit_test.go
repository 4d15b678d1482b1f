package learn

import (
	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
	"agrl.dev/envs/filesearch"
	"agrl.dev/envs/multihop"

	"slices"
	"testing"
)

// retokenized returns a copy of ep whose token stream is what re-encoding its transcript gives
// (agrl.EncodeEpisode): the mistake the audit exists to catch.
func retokenized(tok *agrl.Tokenizer, ep *agrl.Episode) *agrl.Episode {
	c := *ep
	c.Tokens, c.LossMask = agrl.EncodeEpisode(tok, ep)
	return &c
}

// TestTokenAuditEveryEnv: on every environment, the ids the Tiny policy's rollouts train on are
// exactly the ids its sampler emitted (0 mismatches on every episode); the audit can fail — the
// same episodes re-tokenised from their text mismatch — and a GRPO step logs the count, 0.
func TestTokenAuditEveryEnv(t *testing.T) {
	p := MustNewPolicy(agrl.TinyLM().Seed(3))
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 5, MaxActionTokens: 24}}
	retok := 0
	for _, env := range []agrl.Env{calc.New(), multihop.New(), filesearch.New()} {
		tasks, err := agrl.NewMix(1).Tasks(env, agrl.Dev, 6)
		if err != nil {
			t.Fatal(err)
		}
		eps, _, err := p.Rollout(env, tasks, opt)
		if err != nil {
			t.Fatal(err)
		}
		for i, ep := range eps {
			n, ok := ep.TokenMismatches()
			if !ok || n != 0 {
				t.Errorf("%s episode %d: %d mismatches (record %v)", env.Name(), i, n, ok)
			}
			if k, _ := retokenized(p.Tokenizer(), ep).TokenMismatches(); k > 0 {
				retok++
			}
		}
	}
	if retok == 0 {
		t.Error("no re-tokenised episode mismatches: the audit cannot fail")
	}
	res := train(t, tinyGRPO(t).Steps(1))
	if v, ok := res.History[0][agrl.MetricTokenMismatches]; !ok || v != 0 {
		t.Errorf("step metrics %s = %v (logged %v), want 0", agrl.MetricTokenMismatches, v, ok)
	}
}

// TestTokenAuditPretrained: the same for the pretrained path's native-format episodes; with a
// real BPE tokenizer, re-encoding the transcript changes the ids of every episode here.
func TestTokenAuditPretrained(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 1)
	if err != nil {
		t.Fatal(err)
	}
	env := calc.New()
	tasks, err := agrl.NewMix(2).Tasks(env, agrl.Dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	eps, _, err := p.Rollout(env, tasks, agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 7, MaxActionTokens: 12}, Limits: agrl.Limits{MaxTurns: 2}})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := p.Agent()
	if err != nil {
		t.Fatal(err)
	}
	tok := pol.Tokenizer()
	for i, ep := range eps {
		if n, ok := ep.TokenMismatches(); !ok || n != 0 {
			t.Errorf("episode %d: %d mismatches (record %v)", i, n, ok)
		}
		again := tok.Encode(tok.Decode(ep.Tokens))
		if slices.Equal(again, ep.Tokens) {
			t.Errorf("episode %d re-encodes to the same ids: the fixture shows no re-tokenisation hazard", i)
		}
	}
}

// TestBatchMismatches: the trainer's check reads the batch it trains on, so a batch whose ids
// are not the sampled ones is counted (and an all-masked row is not).
func TestBatchMismatches(t *testing.T) {
	ep := &agrl.Episode{Tokens: []int32{1, 5, 6, 7, 8}, LossMask: []uint8{0, 1, 1, 0, 1},
		Turns: []agrl.Turn{{Sampled: []int32{5, 6}}, {Sampled: []int32{8}}}}
	mask := []float32{0, 1, 1, 0, 1}
	b := TrainBatch{Tokens: [][]int32{ep.Tokens}, Values: map[string][][]float32{valMask: {mask}}}
	if n := batchMismatches(b, []*agrl.Episode{ep}, []int{0}); n != 0 {
		t.Errorf("faithful batch: %d mismatches", n)
	}
	b.Tokens = [][]int32{{1, 5, 9, 7, 8}} // a re-tokenised row
	if n := batchMismatches(b, []*agrl.Episode{ep}, []int{0}); n != 1 {
		t.Errorf("one changed id: %d mismatches, want 1", n)
	}
	b.Values[valMask] = [][]float32{{0, 0, 0, 0, 0}} // MaskTruncated: trains on nothing
	if n := batchMismatches(b, []*agrl.Episode{ep}, []int{0}); n != 0 {
		t.Errorf("masked row: %d mismatches, want 0", n)
	}
}
