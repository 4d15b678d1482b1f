package learn

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"
)

// TestNextBatchHostKernels: with the host kernels installed as agrl/llm's products (simd
// builds), batched decoding still gives each sequence the bits it gets alone: the kernels
// compute every row of a product as one chain of multiply-adds whatever the other rows (the
// row-split path of a prompt, the column-split path of a few decoding rows), which is what lets
// the sampler batch episodes without changing them.
func TestNextBatchHostKernels(t *testing.T) {
	m := hostKernelModel(t)
	seq := func(n, salt int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32((i*41+salt*13+3)%300) + 1
		}
		return s
	}
	rowSplit := splitRows * runtime.GOMAXPROCS(0)        // productT's threshold between its two paths
	for _, width := range []int{1, 3, 9, rowSplit + 3} { // decoding rows below and above it
		var batch, alone []*llm.Cache
		var feeds [][]int32
		for i := range width {
			b, a := m.NewCache(), m.NewCache()
			p := seq(5+i%7, i)
			if _, err := m.Step(b, p); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Step(a, p); err != nil {
				t.Fatal(err)
			}
			batch, alone = append(batch, b), append(alone, a)
			feed := []int32{int32(i + 1)}
			if i%4 == 1 {
				feed = seq(6, i+50) // an observation among decoding steps
			}
			feeds = append(feeds, feed)
		}
		decodeAsAlone(t, m, batch, alone, feeds, 4, nil, fmt.Sprintf("batch of %d", width))
	}
}

// TestSharedPrefixBatch: sequences cloned from one prompt's cache (a rollout's group) and
// decoded as a batch attend over the shared prompt together (hostAttendShared, a product per
// chunk of their query rows) and still get, bit for bit, the logits each gets alone on a cache
// of its own — groups of 2, 5 and 9 clones (chunks of 4 sequences, the last one short), a
// prompt longer than the kernels' contraction block, clones of clones among them, and
// sequences that attend alone in the same batch (an unrelated cache, an observation of
// several tokens); and none of it while the portable attention loop is installed.
func TestSharedPrefixBatch(t *testing.T) {
	m := hostKernelModel(t)
	prompt := make([]int32, 300) // longer than the simd kernels' contraction block (kBlock, 256)
	for i := range prompt {
		prompt[i] = int32((i*29+5)%300) + 1
	}
	calls := 0
	llm.SetSharedAttention(func(out, q [][]float32, pre llm.Span, own []llm.Span, nq, nkv, D int) {
		calls++
		hostAttendShared(out, q, pre, own, nq, nkv, D)
	})
	t.Cleanup(func() { llm.SetSharedAttention(hostAttendShared) })
	for _, width := range []int{2, 5, 9} {
		shared := m.NewCache()
		if _, err := m.Step(shared, prompt); err != nil {
			t.Fatal(err)
		}
		var batch, alone []*llm.Cache
		var feeds [][]int32
		for i := range width + 1 {
			a := m.NewCache()
			if _, err := m.Step(a, prompt); err != nil {
				t.Fatal(err)
			}
			b := shared.Clone()
			if i == width { // one more sequence on a cache of its own
				b = m.NewCache()
				if _, err := m.Step(b, prompt); err != nil {
					t.Fatal(err)
				}
			}
			batch, alone = append(batch, b), append(alone, a)
			feeds = append(feeds, []int32{int32(i + 1)})
		}
		calls = 0
		decodeAsAlone(t, m, batch, alone, feeds, 5, func(round int) {
			if round == 2 { // a clone of a clone: it shares the prompt and copies its own positions
				batch[1] = batch[1].Clone()
			}
			if round == 3 {
				feeds[0] = []int32{7, 8, 9, 10, 11} // an observation: it attends alone
			}
		}, fmt.Sprintf("%d clones", width))
		steps := 5 // decoding steps with two clones or more fed one token each
		if width == 2 {
			steps = 4 // round 3 leaves one
		}
		if want := steps * m.Config().NumHiddenLayers; calls != want {
			t.Errorf("%d clones: the shared kernel ran %d times, want %d (each layer of each such step)", width, calls, want)
		}
	}
	// With the portable attention loop, which has no shared counterpart, the clones attend
	// one by one: the batch keeps the bits of each alone.
	llm.SetAttention(nil)
	defer llm.SetAttention(hostAttend)
	shared := m.NewCache()
	if _, err := m.Step(shared, prompt); err != nil {
		t.Fatal(err)
	}
	batch := []*llm.Cache{shared.Clone(), shared.Clone(), shared.Clone()}
	alone := []*llm.Cache{shared.Clone(), shared.Clone(), shared.Clone()}
	calls = 0
	decodeAsAlone(t, m, batch, alone, [][]int32{{1}, {2}, {3}}, 2, nil, "the portable loop")
	if calls != 0 {
		t.Errorf("the shared kernel ran %d times beside the portable loop", calls)
	}
}

// hostKernelModel loads the tiny Qwen3 checkpoint for a test of the host kernels, which it
// skips where they do not run.
func hostKernelModel(t *testing.T) *llm.Model {
	t.Helper()
	if !hostKernels {
		t.Skip("the host kernels run in GOEXPERIMENT=simd builds on AVX-512 or AVX2 CPUs")
	}
	m, err := llm.Load(tinyQwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// decodeAsAlone runs rounds of NextBatch over batch (before(round), when not nil, may change
// the batch and feeds first) and fails unless every sequence's logits are, bit for bit,
// those Next gives for the same feed on its cache in alone; each round then feeds every
// sequence its greedy token.
func decodeAsAlone(t *testing.T, m *llm.Model, batch, alone []*llm.Cache, feeds [][]int32, rounds int, before func(round int), what string) {
	t.Helper()
	for round := range rounds {
		if before != nil {
			before(round)
		}
		got, err := m.NextBatch(batch, feeds)
		if err != nil {
			t.Fatal(err)
		}
		for i := range feeds {
			want, err := m.Next(alone[i], feeds[i])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[i], want) {
				t.Fatalf("%s, round %d, sequence %d: NextBatch's logits differ from the sequence's alone", what, round, i)
			}
			feeds[i] = []int32{int32(slices.Index(want, slices.Max(want)))}
		}
	}
}

// TestRolloutFromThePool is agrl/llm/agent's TestRolloutRecyclesLogits with this package's
// kernels installed (the LM head's headNT makes the logits the rollout gives back): with every
// buffer pooled and poisoned (NaN) when given back, a pretrained policy's batched rollout plays
// the episodes it plays on fresh memory, bit for bit, twice (the second on the first's
// buffers), with every episode playing at once and on two workers (episodes that start later
// read their prompt's logits after batches have run).
func TestRolloutFromThePool(t *testing.T) {
	pol := tinyQwen3Agent(t)
	env := calc.New()
	tasks, err := agrl.NewMix(4).Tasks(env, agrl.Dev, 2)
	if err != nil {
		t.Fatal(err)
	}
	group := append(slices.Repeat(tasks[:1], 3), slices.Repeat(tasks[1:], 3)...)
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 4, MaxActionTokens: 12}, Limits: agrl.Limits{MaxTurns: 3}}
	restore := llm.PoolForTests(1<<40, false) // nothing pooled
	want, _, err := pol.Rollout(env, group, opt)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	defer llm.PoolForTests(16, true)()
	for _, q := range []*agent.Policy{pol, pol.Workers(2)} { // all at once; episodes starting later
		for round := range 2 {
			got, _, err := q.Rollout(env, group, opt)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: the episodes differ from those on fresh memory", round)
			}
		}
	}
}

// tinyQwen3Agent is the tiny Qwen3 checkpoint's policy with LoRA adapters (rank 4, seed 5)
// as an agent.
func tinyQwen3Agent(t *testing.T) *agent.Policy {
	t.Helper()
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 5)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := p.Agent()
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestBatchedRolloutSameEpisodes: a pretrained policy's rollout of a group (its steps run as
// one batch) plays exactly the episodes it plays one episode at a time (Workers(1)): the same
// ids, log-probs and turns. (Both batch the distinct prompts' prefill; that a batched prompt
// gets Next's bits is TestNextBatch's and TestNextBatchHostKernels'.)
func TestBatchedRolloutSameEpisodes(t *testing.T) {
	pol := tinyQwen3Agent(t)
	env := calc.New()
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Dev, 3)
	if err != nil {
		t.Fatal(err)
	}
	var group []agrl.Task
	for _, task := range tasks {
		for range 4 { // four samples of each task: shared prompts, episodes of other lengths
			group = append(group, task)
		}
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 1, Seed: 9, MaxActionTokens: 16}, Limits: agrl.Limits{MaxTurns: 3}}
	batched, _, err := pol.Rollout(env, group, opt)
	if err != nil {
		t.Fatal(err)
	}
	alone, _, err := pol.Workers(1).Rollout(env, group, opt)
	if err != nil {
		t.Fatal(err)
	}
	lengths := map[int]bool{}
	for i := range batched {
		a, b := batched[i], alone[i]
		if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.LogProbs, b.LogProbs) || len(a.Turns) != len(b.Turns) {
			t.Fatalf("episode %d differs between the batched rollout and one episode at a time", i)
		}
		lengths[len(a.Tokens)] = true
	}
	if len(lengths) < 2 {
		t.Fatal("every episode has the same length: the test does not exercise a shrinking batch")
	}
}

// TestHostAttention: the host attention kernel (llm.SetAttention) gives the portable loop's
// logits to 1e-4 — a prompt long enough for the contraction blocks and the heads spread over
// the cores, then decoding steps — the same bits in tiles of a few query rows as in one, with
// every call's heads over the cores as on one, and over a cloned cache (a shared prefix and
// the clone's own positions) as over one cache, and
// (TestNextBatchHostKernels) the same bits whether a sequence is decoded alone or in a batch.
func TestHostAttention(t *testing.T) {
	m := hostKernelModel(t)
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32((i*53+7)%310) + 1
	}
	// The prompt, then decoding steps and a piece of several tokens (an observation); with
	// clone, the cache is cloned after the prompt and again after the third step, so that
	// the steps attend over a shared prefix and the cache's own positions.
	pieces := [][]int32{{40}, {41}, {42}, {43, 44, 45, 46, 47, 48, 49}, {50}, {51}}
	runCloned := func(clone bool) [][]float32 {
		c := m.NewCache()
		rows, err := m.Step(c, prompt)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pieces {
			if clone && (i == 0 || i == 3) {
				c = c.Clone()
			}
			next, err := m.Step(c, p)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, next...)
		}
		return rows
	}
	run := func() [][]float32 { return runCloned(false) }
	kernel := run()
	// A clone's attention over the shared prefix and its own positions gives the same bits.
	for i, row := range runCloned(true) {
		if !slices.Equal(row, kernel[i]) {
			t.Fatalf("position %d: attention over a cloned cache differs", i)
		}
	}
	llm.SetAttention(nil)
	t.Cleanup(func() { llm.SetAttention(hostAttend) })
	loop := run()
	llm.SetAttention(hostAttend)
	// With a setting lowered, run gives the default's logits bit for bit.
	same := func(setting *int, low int, what string) {
		prev := *setting
		*setting = low
		got := run()
		*setting = prev
		for i := range kernel {
			if !slices.Equal(got[i], kernel[i]) {
				t.Fatalf("position %d: attention %s differs", i, what)
			}
		}
	}
	// Tiles of a few query rows (a long prompt's) give the untiled result: the same chains of
	// multiply-adds, the tile's unseen positions left out instead of weighing 0.
	same(&attnTile, 1000, "in tiles")
	// Every call's heads over the cores (the decoding steps' too) give the same bits.
	same(&attnSpread, 1, "with every call's heads over the cores")
	run = func() [][]float32 { return runCloned(true) }
	same(&attnTile, 1000, "over a cloned cache in tiles")
	same(&attnSpread, 1, "over a cloned cache with every call's heads over the cores")
	worst := 0.0
	for i := range loop {
		for j := range loop[i] {
			worst = max(worst, math.Abs(float64(kernel[i][j]-loop[i][j])))
		}
	}
	t.Logf("%d positions: max |kernel − loop| %.2g", len(loop), worst)
	if worst > 1e-4 {
		t.Fatalf("the attention kernel's logits differ from the portable loop's by %g", worst)
	}
}
