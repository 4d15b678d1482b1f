package learn

import (
	"agrl.dev/agrl"

	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks on the Tiny shape: vocabulary 64, width 128, 2 layers, 4 heads, context
// 128 (about 0.41M parameters). Run with
//
//	GOEXPERIMENT=simd go test -run XXX -bench . -benchtime 5x ./agrl/
//
// AGRL_BENCH_SHARDS=1 turns off the 2-way concurrent sharding; AGRL_BACKEND picks the
// backend (xla:cuda on a GPU machine). Each reports tokens/s, the achieved model GFLOP/s (useful work: 2 FLOPs per weight
// multiply-add plus attention over the visible keys; a training step counts 3× the forward
// pass) and that as a fraction of this CPU's fp32 peak.

// cpuPeak is this CPU's fp32 peak, measured once per process (measureFMAPeak: FMA loops on
// every core at once; 0 without GOEXPERIMENT=simd on amd64). The 2-core AMD EPYC (Zen 5) measures
// about 430–440 GFLOP/s: 2 cores × 3.45 GHz × 2 FMA pipes × 16 lanes × 2 FLOPs.
var cpuPeak = sync.OnceValues(measureFMAPeak)

// BenchmarkFMAPeak reports the measured fp32 peak of this CPU (GFLOP/s over every core), the
// denominator of the other benchmarks' "%peak".
func BenchmarkFMAPeak(b *testing.B) {
	var g float64
	for range b.N {
		g, _ = measureFMAPeak()
	}
	if g == 0 {
		b.Skip("needs GOEXPERIMENT=simd on amd64")
	}
	b.ReportMetric(g, "GFLOP/s")
}

// benchLM is the Tiny benchmark shape with a 64-token vocabulary (12 reserved + 52 bytes).
func benchLM() agrl.LM {
	tok, err := agrl.NewTokenizer("0123456789+-*/()=., abcdefghijklmnopqrstuvwxyz?:\n_'!")
	if err != nil {
		panic(err)
	}
	if tok.VocabSize() != 64 {
		panic(tok.VocabSize())
	}
	shards, _ := strconv.Atoi(os.Getenv("AGRL_BENCH_SHARDS")) // 0: the default
	return agrl.TinyLM().Tokenizer(tok).Width(128).Layers(2).Heads(4).MLP(512).Context(128).Shards(shards).Backend("")
}

// cpuTime is the process's user+system CPU time. The machine is shared, so wall-clock rates
// are noisy; CPU seconds per op (reported as "cpu-ms/op") are steadier for comparing versions.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportThroughput(b *testing.B, p *Policy, tokens int, flops float64, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(tokens)/sec, "tokens/s")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	if peak, _ := cpuPeak(); peak > 0 && p.Backend().String() == "go" { // the peak is this CPU's
		b.ReportMetric(flops/sec/1e9/peak*100, "%peak")
	}
}

// BenchmarkSample samples 64 new tokens for each of 64 sequences after a 16-token prompt,
// with the KV cache.
func BenchmarkSample(b *testing.B) { benchSample(b, benchLM(), 64, 16, 64) }

// BenchmarkTrain takes AdamW steps on batches of 32 sequences of 128 tokens (SFT loss on every
// token).
func BenchmarkTrain(b *testing.B) { benchTrain(b, benchLM(), 32, 128) }

// BenchmarkSampleSmall and BenchmarkTrainSmall run the GPU preset (SmallLM: width 512, 8
// layers, context 1024) on an XLA backend; they skip on the go backend, where they would take
// minutes.
func BenchmarkSampleSmall(b *testing.B) {
	skipUnlessXLA(b)
	benchSample(b, agrl.SmallLM().Backend(""), 256, 64, 256)
}

// BenchmarkTrainSmall: see BenchmarkSampleSmall.
func BenchmarkTrainSmall(b *testing.B) {
	skipUnlessXLA(b)
	benchTrain(b, agrl.SmallLM().Backend(""), 32, 512)
}

func skipUnlessXLA(b *testing.B) {
	c, err := ParseBackend("")
	if err != nil {
		b.Fatal(err)
	}
	if !c.IsXLA() {
		b.Skipf("GPU preset: set AGRL_BACKEND=xla:cuda (backend is %s)", c)
	}
}

func benchSample(b *testing.B, cfg agrl.LM, batch, promptLen, newTokens int) {
	p, err := NewPolicy(cfg)
	if err != nil {
		b.Fatal(err)
	}
	vocab := int32(p.Config().Vocab())
	prompts := make([][]int32, batch)
	for i := range prompts {
		prompts[i] = []int32{agrl.BOS}
		for j := 1; j < promptLen; j++ {
			prompts[i] = append(prompts[i], 20+int32((i+j)%int(vocab-20)))
		}
	}
	run := func(seed uint64) {
		d, err := p.NewDecoder(batch, promptLen+newTokens, agrl.Sampling{Temperature: 1, Seed: seed})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		for i, pr := range prompts {
			if err := d.Start(i, pr); err != nil {
				b.Fatal(err)
			}
		}
		var mu sync.Mutex
		got := make([]int, batch)
		err = d.Run(func(i int, c Completion) ([]int32, bool) {
			mu.Lock()
			defer mu.Unlock()
			got[i] += len(c.Tokens)
			return nil, got[i] < newTokens && d.Room(i) > 1
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	run(0) // compile
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		run(uint64(i + 1))
	}
	// Average visible context while generating: prompt + half the new tokens.
	flops := float64(b.N*batch*newTokens) * p.Config().FLOPsPerToken(2*(promptLen+newTokens/2))
	reportThroughput(b, p, b.N*batch*newTokens, flops, cpuTime()-cpu0)
}

func benchTrain(b *testing.B, cfg agrl.LM, batch, seqLen int) {
	p, err := NewPolicy(cfg)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := p.NewTrainer("bench", SFTLoss, []string{"mask"}, agrl.NewAdamW(), 1)
	if err != nil {
		b.Fatal(err)
	}
	vocab := p.Config().Vocab()
	tb := TrainBatch{Values: map[string][][]float32{"mask": nil}}
	for i := 0; i < batch; i++ {
		seq, mask := []int32{agrl.BOS}, []float32{0}
		for j := 1; j < seqLen; j++ {
			seq = append(seq, int32(12+(i*7+j*3)%(vocab-12)))
			mask = append(mask, 1)
		}
		tb.Tokens = append(tb.Tokens, seq)
		tb.Values["mask"] = append(tb.Values["mask"], mask)
	}
	// Two steps untimed: the first compiles the loss graph and fills the host trainer's arena
	// chunk by chunk; the second merges those chunks into one (a few hundred MB of fresh
	// memory: that step took 250–380 ms on a 2-core Zen 5, four to six steady ones). Every
	// later step reuses it, as a training run's thousands do.
	for range 2 {
		if _, err := tr.Step(tb); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := tr.Step(tb); err != nil {
			b.Fatal(err)
		}
	}
	tokens := b.N * batch * (seqLen - 1)
	reportThroughput(b, p, tokens, 3*float64(tokens)*p.Config().FLOPsPerToken(seqLen), cpuTime()-cpu0)
}

// BenchmarkRollout plays 64 episodes of the toy add environment with the untrained Tiny model
// (actions capped at 24 tokens, a 128-token budget): sampling, parsing, environment steps and
// observations appended to the KV cache, with finished episodes compacted away. It reports
// generated (policy) tokens per second and tokens read into the cache per second.
func BenchmarkRollout(b *testing.B) {
	p := MustNewPolicy(benchLM())
	env := addEnv{maxTurns: 4}
	tasks, err := agrl.NewMix(5).Tasks(env, agrl.Train, 64)
	if err != nil {
		b.Fatal(err)
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, MaxActionTokens: 24}, MaxTokens: 128}
	if _, _, err := p.Rollout(env, tasks, opt); err != nil { // compile
		b.Fatal(err)
	}
	b.ResetTimer()
	gen, read := 0, 0
	for i := 0; i < b.N; i++ {
		opt.Sampling.Seed = uint64(i + 1)
		_, st, err := p.Rollout(env, tasks, opt)
		if err != nil {
			b.Fatal(err)
		}
		gen += st.Generated
		read += st.Tokens
	}
	b.ReportMetric(float64(gen)/b.Elapsed().Seconds(), "gen-tokens/s")
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "tokens/s")
}
