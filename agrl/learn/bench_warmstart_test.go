package learn

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/envs/calc"
)

// BenchmarkWarmStartStep takes SFT steps of the calc recipe's warm start on the Tiny preset:
// batches of 32 demonstrations drawn from the recipe's 10/30/60 mix, 60% from the expert and
// 40% from the guesser, as `make train` does. It reports real (unpadded) target tokens per
// second, the figure the warm start's progress line prints, the useful GFLOP/s and share of the
// measured peak, and CPU milliseconds per step (steadier on a shared machine).
func BenchmarkWarmStartStep(b *testing.B) {
	env := calc.New()
	tasks, err := agrl.NewMix(1).Easy(0.1).Medium(0.3).Hard(0.6).Tasks(env, agrl.Train, 1024)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var seqs [][]int32
	var masks [][]float32
	tok := agrl.TinyLM().Spec().Tokenizer
	for i, task := range tasks {
		agent := calc.Expert()
		if rng.Float64() < 0.4 {
			agent = calc.Guesser(uint64(i))
		}
		ep, err := agrl.Play(env, task, agent, agrl.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		ids, mask := agrl.EncodeEpisode(tok, ep)
		m := make([]float32, len(mask))
		for j, v := range mask {
			m[j] = float32(v)
		}
		seqs, masks = append(seqs, ids), append(masks, m)
	}
	shards, _ := strconv.Atoi(os.Getenv("AGRL_BENCH_SHARDS"))
	p := MustNewPolicy(agrl.TinyLM().Seed(1).Shards(shards))
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-3), 1)
	if err != nil {
		b.Fatal(err)
	}
	batch := func() TrainBatch {
		tb := TrainBatch{Values: map[string][][]float32{"mask": nil}}
		for range 32 {
			k := rng.IntN(len(seqs))
			tb.Tokens = append(tb.Tokens, seqs[k])
			tb.Values["mask"] = append(tb.Values["mask"], masks[k])
		}
		return tb
	}
	for range 20 { // compile the length buckets
		if _, err := tr.Step(batch()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	tokens, flops := 0, 0.0
	for range b.N {
		tb := batch()
		st, err := tr.Step(tb)
		if err != nil {
			b.Fatal(err)
		}
		tokens += st.Tokens
		for _, s := range tb.Tokens { // useful work only: padding and other sequences excluded
			flops += 3 * float64(len(s)-1) * p.Config().FLOPsPerToken(len(s))
		}
	}
	reportThroughput(b, p, tokens, flops, cpuTime()-cpu0)
}
