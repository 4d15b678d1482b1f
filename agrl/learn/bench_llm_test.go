package learn

import (
	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"

	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestLLMThroughput measures the pretrained path at a real shape with random weights, when
// AGRL_BENCH_LLM names the shape (llm.ShapeNames: smollm2-135m, qwen3-0.6b, …); it is skipped
// otherwise. It prints one JSON line, the figures scripts/bench_llm_peer.py prints for the same
// shape in PyTorch:
//
//   - prefill: tokens/s of agrl/llm's forward pass over a 256-token prompt into a KV cache
//     (the sampler's prompt pass), after a 16-token warm-up pass;
//   - decode: tokens/s of 32 single-token steps after it (batch 1, the sampler's inner loop);
//   - decode_batch8: tokens/s of 32 steps of 8 sequences decoded together (llm.Model.NextBatch,
//     what a rollout of a group does), after a 64-token prompt each;
//   - score: tokens/s of the per-token log-probs and entropies of 4 sequences of 256 tokens
//     (the trainer's reference pass; PretrainedPolicy.Score), after a warm-up call: on the
//     host where the policy decodes there, and then graph_score, the same through the GoMLX
//     graph; on the graph otherwise;
//   - train: tokens/s of one LoRA optimizer step (rank 16, every projection) on 4 sequences of
//     256 tokens (log-probs, loss, gradients of the adapters, AdamW), the median of 5 steps
//     after one warm-up step that compiles the graphs; on the host where the learner trains
//     there (train_on_host, pretrained_host.go), and then graph_train, the same step through
//     the GoMLX graphs (the faster of two after one that compiles them). With
//     AGRL_BENCH_FULL=1 the step is full fine-tuning's instead (every weight trained,
//     agrl.PretrainedLM.Full), and sync_s is the time the sampler takes to follow the new
//     weights after a step (the median of the same 5 steps): on the go backend, checking that
//     it still reads the store in place (syncLive); elsewhere, making its copy of them;
//   - graph_prefill, graph_decode, graph_decode_batch8: prefill, decode and decode_batch8
//     again through the model's decoding graph on the backend (hfgraph.Model.Decode, the KV
//     caches backend tensors; each shape run once untimed first, which compiles it), when the
//     policy decodes with it (agrl.PretrainedLM.Decoding: by default on any backend but go) or
//     AGRL_BENCH_GRAPH=1;
//
// AGRL_BENCH_WEIGHTS=bfloat16 keeps the base weights in bfloat16 on the backend
// (agrl.PretrainedLM.Weights), AGRL_BENCH_COMPUTE=bfloat16 runs the graphs' projections in
// bfloat16 (agrl.PretrainedLM.Compute); the record then says so.
//
// The model directory is written once to $TMPDIR/agrl-bench-<shape> (bf16, seed 1) and reused.
func TestLLMThroughput(t *testing.T) {
	shape, cfg, dir := benchShape(t, "AGRL_BENCH_LLM")
	const prompt, decode, batch, seqLen = 256, 32, 4, 256
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int32 { return randomTokens(rng, cfg.VocabSize, n) }
	spec := agrl.Pretrained(dir).LoRA(16, 32).MicroBatch(batch)
	full := os.Getenv("AGRL_BENCH_FULL") == "1"
	if full {
		spec = spec.Full()
	}
	weights := os.Getenv("AGRL_BENCH_WEIGHTS") // "bfloat16": the base weights stored so on the backend
	compute := os.Getenv("AGRL_BENCH_COMPUTE") // "bfloat16": mixed-precision projections
	spec = spec.Weights(weights).Compute(compute)
	p, err := LoadPretrained(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := p.base
	if _, err := m.Logits(ids(16)); err != nil { // warm-up, not timed: the kernels' weight copies
		t.Fatal(err)
	}
	c := m.NewCache()
	start := time.Now()
	if _, err := m.Step(c, ids(prompt)); err != nil {
		t.Fatal(err)
	}
	prefill := float64(prompt) / time.Since(start).Seconds()
	start = time.Now()
	for i := range decode {
		if _, err := m.Next(c, ids(1)); err != nil {
			t.Fatalf("decode step %d: %v", i, err)
		}
	}
	dec := float64(decode) / time.Since(start).Seconds()
	const group = 8
	dec8 := float64(group*decode) / timeNextBatch(t, m, group, decode, ids)

	l, err := p.newLearner("bench", grpoLoss(0.2, 0.2, 0, agrl.K3), grpoValues, agrl.NewAdamW().LR(1e-5), 1)
	if err != nil {
		t.Fatal(err)
	}
	b := benchGRPOBatch(rng, cfg.VocabSize, slices.Repeat([]int{seqLen}, batch))
	scoreSpeed := func() float64 {
		if _, err := p.Score(b.Tokens, 1); err != nil { // warm-up: compiles the graph, if any
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := p.Score(b.Tokens, 1); err != nil {
			t.Fatal(err)
		}
		return float64(batch*(seqLen-1)) / time.Since(start).Seconds()
	}
	score := scoreSpeed()
	var graphScore float64
	if !p.GraphDecoding() { // Score ran on the host: the graph's too
		p.graphScoring = true
		graphScore = scoreSpeed()
		p.graphScoring = false
	}
	// Six steps, the first untimed, the median of the other five: the first steps of a run
	// fault in the heap's pages and their collector's cycles fall on different steps from run to
	// run, so that the median of three moved by a third between builds that change no kernel
	// (docs/llm.md, "Buffers from a pool").
	var secs, syncs []float64
	for i := range 6 {
		st, err := l.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := p.current(); err != nil { // the sampler following the new weights
			t.Fatal(err)
		}
		if i > 0 {
			secs, syncs = append(secs, st.Seconds), append(syncs, time.Since(start).Seconds())
		}
	}
	sortFloats(secs)
	sortFloats(syncs)
	train := float64(batch*(seqLen-1)) / secs[len(secs)/2]
	tl := l.(*pretrainedTrainer)
	host := tl.hostTraining()
	var graphTrain float64
	if host { // the same step through the graph: one step compiles it, the faster of two more is timed
		p.graphTraining = true
		for i := range 3 {
			st, err := l.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				graphTrain = max(graphTrain, float64(batch*(seqLen-1))/st.Seconds)
			}
		}
		p.graphTraining = false
	}
	rec := map[string]any{"impl": "agrl", "shape": shape, "backend": p.BackendConfig(),
		"prefill_tokens_per_s": round1(prefill), "decode_tokens_per_s": round1(dec), "decode_batch8_tokens_per_s": round1(dec8), "score_tokens_per_s": round1(score), "train_tokens_per_s": round1(train),
		"lora_params": p.AdapterParams()}
	if graphScore > 0 {
		rec["graph_score_tokens_per_s"] = round1(graphScore)
	}
	rec["train_on_host"] = host
	if graphTrain > 0 {
		rec["graph_train_tokens_per_s"] = round1(graphTrain)
	}
	if p.GraphDecoding() || os.Getenv("AGRL_BENCH_GRAPH") == "1" {
		gp, gd, gd8 := graphDecodeThroughput(t, p, ids, prompt, decode, group)
		rec["graph_prefill_tokens_per_s"], rec["graph_decode_tokens_per_s"], rec["graph_decode_batch8_tokens_per_s"] = round1(gp), round1(gd), round1(gd8)
	}
	if compute != "" {
		rec["compute"] = compute
	}
	if weights != "" {
		rec["weights"] = weights
	}
	if full {
		rec["full"], rec["trainable_params"], rec["sync_s"] = true, p.TrainableParams(), float64(int(syncs[len(syncs)/2]*1000+0.5))/1000
	}
	line, _ := json.Marshal(rec)
	fmt.Println(string(line))
}

// graphDecodeThroughput times TestLLMThroughput's prefill, decode and batched decode through
// p's decoding graph; every shape is run once untimed first (its compilation).
func graphDecodeThroughput(t *testing.T, p *PretrainedPolicy, ids func(int) []int32, prompt, decode, group int) (prefill, dec, dec8 float64) {
	t.Helper()
	d := newGraphDecoder(p, p.graph, "bench")
	run := func(seqs []agent.Seq, n int) {
		t.Helper()
		feeds := make([][]int32, len(seqs))
		for j := range feeds {
			feeds[j] = ids(n)
		}
		if _, err := d.NextBatch(seqs, feeds); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func(n int) []agent.Seq {
		s := make([]agent.Seq, n)
		for i := range s {
			s[i] = d.NewSeq()
		}
		return s
	}
	warm := fresh(1)
	run(warm, prompt) // compiles the prefill and the step at this capacity
	run(warm, 1)
	one := fresh(1)
	start := time.Now()
	run(one, prompt)
	prefill = float64(prompt) / time.Since(start).Seconds()
	start = time.Now()
	for range decode {
		run(one, 1)
	}
	dec = float64(decode) / time.Since(start).Seconds()
	many := fresh(group)
	run(many, 64)
	run(many, 1) // compiles the batch's step
	start = time.Now()
	for range decode {
		run(many, 1)
	}
	dec8 = float64(group*decode) / time.Since(start).Seconds()
	return prefill, dec, dec8
}

// benchShape reads the benchmark shape from the environment variable env (skipping the test
// when it is unset) and returns it, its configuration and its model directory (benchModelDir).
func benchShape(t *testing.T, env string) (string, hf.Config, string) {
	t.Helper()
	shape := os.Getenv(env)
	if shape == "" {
		t.Skipf("set %s to a shape (e.g. smollm2-135m) to measure", env)
	}
	cfg, err := llm.Shape(shape)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.VocabSize < benchTokenizerIDs { // a tiny test shape: room for the test tokenizer's ids and the benchmarks' positions
		cfg.VocabSize, cfg.MaxPositionEmbeddings = benchTokenizerIDs, 2048
		cfg.BOSTokenID, cfg.EOSTokenIDs = -1, nil
	}
	return shape, cfg, benchModelDir(t, shape, cfg)
}

// benchTokenizerIDs is the smallest vocabulary that holds the ids of agrl/llm/agent's test
// tokenizer (312, rounded up), which the benchmarks' model directories carry.
const benchTokenizerIDs = 320

// randomTokens is n token ids drawn uniformly from [0, vocab).
func randomTokens(rng *rand.Rand, vocab, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(rng.IntN(vocab))
	}
	return s
}

// benchGRPOBatch is a GRPO train batch of random token sequences of the given lengths:
// every target a fresh policy token, normal advantages, weights summing to 1.
func benchGRPOBatch(rng *rand.Rand, vocab int, lengths []int) TrainBatch {
	b := TrainBatch{Values: map[string][][]float32{}}
	targets := 0
	for _, n := range lengths {
		targets += n - 1
	}
	for _, seqLen := range lengths {
		b.Tokens = append(b.Tokens, randomTokens(rng, vocab, seqLen))
		for _, name := range grpoValues {
			v := make([]float32, seqLen)
			for j := 1; j < seqLen; j++ {
				switch name {
				case valMask, valFresh:
					v[j] = 1
				case valAdv:
					v[j] = float32(rng.NormFloat64())
				case valWeight:
					v[j] = float32(1 / float64(targets))
				}
			}
			b.Values[name] = append(b.Values[name], v)
		}
	}
	return b
}

// benchModelDir is the random-weight model directory of a benchmark shape (bf16, seed 1, the
// test tokenizer), written once to $TMPDIR/agrl-bench-<shape> and reused.
func benchModelDir(t *testing.T, shape string, cfg hf.Config) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "agrl-bench-"+shape)
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	if have, cerr := hf.LoadConfig(filepath.Join(dir, "config.json")); err != nil || cerr != nil ||
		have.VocabSize != cfg.VocabSize || have.MaxPositionEmbeddings != cfg.MaxPositionEmbeddings {
		writeTestModel(t, dir, cfg, 1) // missing, or written by an older benchmark for another configuration
	}
	return dir
}

// writeTestModel writes a random checkpoint of cfg (seed) with agrl/llm/agent's test
// tokenizer into dir.
func writeTestModel(t *testing.T, dir string, cfg hf.Config, seed uint64) {
	t.Helper()
	if err := llm.WriteRandom(dir, cfg, seed, 1); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join("..", "llm", "agent", "testdata", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
}

// benchSteps is AGRL_BENCH_STEPS, how many steps (or rounds) TestLLMSteps and TestLLMRollout
// time, at least 3; def when it is unset.
func benchSteps(t *testing.T, def int) int {
	t.Helper()
	s := os.Getenv("AGRL_BENCH_STEPS")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 3 {
		t.Fatalf("AGRL_BENCH_STEPS=%q: want a number of steps, at least 3", s)
	}
	return n
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

func sortFloats(x []float64) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

// TestLLMDecodeWidths times batched decoding steps (llm.Model.NextBatch, the sampler's inner
// loop) at every batch width a rollout passes through, when AGRL_BENCH_LLM names the shape
// (skipped otherwise): for each width, that many sequences after a 64-token prompt each, then
// 32 steps of one token each; it prints the milliseconds a step. A group's batch shrinks as its
// episodes end, and an evaluation of a few tasks decodes a few rows: the way to see what a
// change to the products of a few rows does (docs/performance.md, "Prefetching the weights,
// and a decoding step's few rows").
func TestLLMDecodeWidths(t *testing.T) {
	_, cfg, dir := benchShape(t, "AGRL_BENCH_LLM")
	p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(16, 32), 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int32 { return randomTokens(rng, cfg.VocabSize, n) }
	const steps = 32
	for _, width := range []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} {
		fmt.Printf("width %d: %.1f ms a step\n", width, 1000*timeNextBatch(t, p.base, width, steps, ids)/steps)
	}
}

// timeNextBatch decodes width sequences together: a 64-token prompt each (untimed), then
// steps batched steps of one token each (ids draws them); it returns the steps' seconds.
func timeNextBatch(t *testing.T, m *llm.Model, width, steps int, ids func(int) []int32) float64 {
	t.Helper()
	caches, feeds := make([]*llm.Cache, width), make([][]int32, width)
	for i := range caches {
		caches[i], feeds[i] = m.NewCache(), ids(64)
	}
	if _, err := m.NextBatch(caches, feeds); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range steps {
		for j := range feeds {
			feeds[j] = ids(1)
		}
		if _, err := m.NextBatch(caches, feeds); err != nil {
			t.Fatalf("%d sequences, batched decoding step %d: %v", width, i, err)
		}
	}
	return time.Since(start).Seconds()
}

// TestLLMSteps times the pretrained learner's optimizer steps one by one, when AGRL_BENCH_LLM
// names the shape (skipped otherwise): AGRL_BENCH_STEPS steps (default 10) of TestLLMThroughput's
// train step (LoRA rank 16 on every projection, or every weight with AGRL_BENCH_FULL=1; 4
// sequences of 256 tokens), each with its wall time, user and system CPU time and minor page
// faults (getrusage around the step), then the mean of the steps after the first two. A
// median of a few steps hides what this shows: on these VMs a minor fault costs tens of
// microseconds of system time, and the first steps of a process, while the Go heap grows, can
// take twice the steady ones (docs/performance.md, "Page faults of the pretrained models' host
// step").
func TestLLMSteps(t *testing.T) {
	_, cfg, dir := benchShape(t, "AGRL_BENCH_LLM")
	const batch, seqLen = 4, 256
	n := benchSteps(t, 10)
	spec := agrl.Pretrained(dir).LoRA(16, 32).MicroBatch(batch)
	if os.Getenv("AGRL_BENCH_FULL") == "1" {
		spec = spec.Full()
	}
	p, err := LoadPretrained(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.newLearner("bench", grpoLoss(0.2, 0.2, 0, agrl.K3), grpoValues, agrl.NewAdamW().LR(1e-5), 1)
	if err != nil {
		t.Fatal(err)
	}
	b := benchGRPOBatch(rand.New(rand.NewPCG(1, 2)), cfg.VocabSize, slices.Repeat([]int{seqLen}, batch))
	tokens := float64(batch * (seqLen - 1))
	timeRuns(t, "step", n, func(int) (float64, error) {
		_, err := l.Step(b)
		return tokens, err
	})
}

// timeRuns runs run(0) … run(n−1), each returning the tokens it made, and prints for each its
// wall, user and system time (getrusage), minor page faults and tokens per second, then the
// means from the third on (the first runs of a process fault in the heap's pages).
func timeRuns(t *testing.T, what string, n int, run func(i int) (float64, error)) {
	t.Helper()
	var wall, sys, tokens float64
	var faults int64
	for i := range n {
		var r0, r1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
		start := time.Now()
		tok, err := run(i)
		if err != nil {
			t.Fatalf("%s %d: %v", what, i, err)
		}
		w := time.Since(start).Seconds()
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		usr := time.Duration(r1.Utime.Nano() - r0.Utime.Nano()).Seconds()
		s := time.Duration(r1.Stime.Nano() - r0.Stime.Nano()).Seconds()
		f := int64(r1.Minflt - r0.Minflt)
		fmt.Printf("%s %d: wall %.2f s, user %.2f s, sys %.2f s, %d minor faults, %.1f tokens/s\n", what, i, w, usr, s, f, tok/w)
		if i >= 2 {
			wall, sys, faults, tokens = wall+w, sys+s, faults+f, tokens+tok
		}
	}
	k := float64(n - 2)
	fmt.Printf("%ss 2–%d: mean wall %.2f s, sys %.2f s, %.0f minor faults a %s, %.1f tokens/s\n", what, n-1, wall/k, sys/k, float64(faults)/k, what, tokens/wall)
}

// benchGroups sets up TestLLMRollout and TestLLMScoreGroups, when AGRL_BENCH_LLM names a
// shape (skipping the test otherwise): a LoRA policy with random weights of that shape, the
// toy add environment of 2 turns, and distinct tasks of it, each 8 times in a row (a GRPO
// group each); n is AGRL_BENCH_STEPS, or steps.
func benchGroups(t *testing.T, distinct, steps int) (p *PretrainedPolicy, env addEnv, tasks []agrl.Task, n int) {
	t.Helper()
	_, _, dir := benchShape(t, "AGRL_BENCH_LLM")
	n = benchSteps(t, steps)
	p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(16, 32), 1)
	if err != nil {
		t.Fatal(err)
	}
	env = addEnv{maxTurns: 2}
	distinctTasks, err := agrl.NewMix(5).Tasks(env, agrl.Train, distinct)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range distinctTasks {
		tasks = append(tasks, slices.Repeat([]agrl.Task{task}, 8)...)
	}
	return p, env, tasks, n
}

// TestLLMRollout times the pretrained path's sampling as a GRPO rollout does it, when
// AGRL_BENCH_LLM names a shape (skipped otherwise): 8 episodes of one task of the toy add
// environment (a group), played with the random-weight model on the host (prefill of the
// shared prompt, then the group's decoding steps batched; actions capped at 48 tokens, 2
// turns, a 1,024-token budget; the prompt takes 657 with the test tokenizer), round after
// round with a new seed (AGRL_BENCH_STEPS rounds, 6 by default). For each round it prints
// wall, user and system time, minor page faults and generated tokens per second, then the
// means from the third round on: the way to see what a change to the sampler does
// (docs/llm.md, "Decoding at a rollout's lengths").
func TestLLMRollout(t *testing.T) {
	p, env, tasks, n := benchGroups(t, 1, 6)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, MaxActionTokens: 48}, MaxTokens: 1024}
	timeRuns(t, "round", n, func(i int) (float64, error) {
		opt.Sampling.Seed = uint64(i + 1)
		_, st, err := p.Rollout(env, tasks, opt)
		return float64(st.Generated), err
	})
}

// TestLLMScoreGroups times the pretrained path's scoring as GRPO's KL reference pass runs it,
// when AGRL_BENCH_LLM names a shape (skipped otherwise): the episodes of one step of two
// tasks of the toy add environment, 8 episodes each (played once, as TestLLMRollout plays
// them), scored together with the current weights (PretrainedPolicy.Score, on the host),
// AGRL_BENCH_STEPS times (4 by default). It prints each pass's wall, user and system time
// and the scored tokens per second: the way to see what a change to the scorer does
// (docs/llm.md, "Scoring shares the prompt").
func TestLLMScoreGroups(t *testing.T) {
	p, env, tasks, n := benchGroups(t, 2, 4)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, MaxActionTokens: 48, Seed: 1}, MaxTokens: 1024}
	eps, _, err := p.Rollout(env, tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	scored := 0
	for _, ep := range eps {
		seqs = append(seqs, ep.Tokens)
		scored += len(ep.Tokens) - 1
	}
	fmt.Printf("%d episodes, %d tokens scored a pass\n", len(seqs), scored)
	timeRuns(t, "score", n, func(int) (float64, error) {
		_, err := p.Score(seqs, 1)
		return float64(scored), err
	})
}

// TestLLMSharedSteps times host training steps (LoRA r=16) on a batch shaped like a calc GRPO
// step's at a real shape (AGRL_BENCH_LLM): two tasks' groups of four episodes of 1,004 tokens,
// all eight sharing their first 707 positions and each group its first 720, as the calc run of
// docs/llm.md's "Training shares the prompt" has them; AGRL_BENCH_SHARE=0 traces every
// episode whole instead (hostSharing off), for comparison; AGRL_BENCH_STEPS steps (default
// 4), timed as TestLLMSteps times them.
func TestLLMSharedSteps(t *testing.T) {
	_, cfg, dir := benchShape(t, "AGRL_BENCH_LLM")
	n := benchSteps(t, 4)
	defer func(s bool) { hostSharing = s }(hostSharing)
	hostSharing = os.Getenv("AGRL_BENCH_SHARE") != "0"
	p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(16, 32), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.newLearner("bench", grpoLoss(0.2, 0.2, 0, agrl.K3), grpoValues, agrl.NewAdamW().LR(1e-5), 1)
	if err != nil {
		t.Fatal(err)
	}
	const episodes, length, shared, task = 8, 1004, 707, 720
	b := benchGRPOBatch(rand.New(rand.NewPCG(1, 2)), cfg.VocabSize, slices.Repeat([]int{length}, episodes))
	for i, s := range b.Tokens {
		copy(s[:shared], b.Tokens[0])
		copy(s[shared:task], b.Tokens[i/4*4][shared:])
	}
	fmt.Printf("sharing %v: %d episodes of %d tokens, sharing %d (each group of 4, %d)\n", hostSharing, episodes, length, shared, task)
	timeRuns(t, "step", n, func(int) (float64, error) {
		_, err := l.Step(b)
		return float64(episodes * (length - 1)), err
	})
}
