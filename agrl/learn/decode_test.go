package learn

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"
)

// withRandomAdapters gives p's adapters non-zero B (the same for every policy of the tiny
// checkpoint), so that the adapted view differs from the base.
func withRandomAdapters(t *testing.T, p *PretrainedPolicy) {
	t.Helper()
	a, err := p.Adapters()
	if err != nil {
		t.Fatal(err)
	}
	for _, prm := range a.Params() {
		for i := range prm.Data {
			prm.Data[i] = float32(math.Sin(float64(i))) * 0.05
		}
	}
	if err := p.Graph().SetAdapters(a); err != nil {
		t.Fatal(err)
	}
	p.stale = true
}

// maxLogSoftmaxDiff is the largest |Δ| between the log-softmaxes of two logit rows.
func maxLogSoftmaxDiff(a, b []float32) float64 {
	x, y := logSoftmax64(a), logSoftmax64(b)
	worst := 0.0
	for i := range x {
		worst = max(worst, math.Abs(x[i]-y[i]))
	}
	return worst
}

// logSoftmax64 is log softmax(z) in float64.
func logSoftmax64(z []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range z {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range z {
		sum += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = float64(v) - mx - math.Log(sum)
	}
	return out
}

// TestGraphDecoderMatchesHost drives the graph decoder (on the go backend) as a rollout does —
// a prompt prefilled, cloned, sequences growing past a cache capacity (256 → 512 positions)
// in batches of 1 to 3 rows (padded to powers of two), observations of several tokens, a clone
// released early — and checks every step's logits against the host model's KV cache: the
// log-softmaxes agree to 1e-4. It also checks the decoder's refusals.
func TestGraphDecoderMatchesHost(t *testing.T) {
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).Decoding("graph"), 5)
	if err != nil {
		t.Fatal(err)
	}
	withRandomAdapters(t, p)
	host, err := p.Agent()
	if err != nil {
		t.Fatal(err)
	}
	hm := host.Model()
	d := newGraphDecoder(p, p.Graph(), "test")
	vocab := p.Config().VocabSize
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(n int) []int32 { return randomTokens(rng, vocab, n) }
	worst := 0.0
	check := func(got [][]float32, caches []*llm.Cache, feed [][]int32) {
		t.Helper()
		for i, c := range caches {
			want, err := hm.Next(c, feed[i])
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, maxLogSoftmaxDiff(got[i], want))
		}
	}
	prompt := ids(240)
	root, rootC := d.NewSeq(), hm.NewCache()
	logits, err := d.NextBatch([]agent.Seq{root}, [][]int32{prompt})
	if err != nil {
		t.Fatal(err)
	}
	check(logits, []*llm.Cache{rootC}, [][]int32{prompt})
	seqs := []agent.Seq{root.Clone(), root.Clone(), root.Clone()}
	caches := []*llm.Cache{rootC.Clone(), rootC.Clone(), rootC.Clone()}
	for round := range 30 {
		n := 3
		if round >= 20 {
			n = 2 // the third sequence has ended
		}
		if round == 20 {
			seqs[2].Release()
		}
		feed := make([][]int32, n)
		for i := range feed {
			feed[i] = ids(1)
			if (round+i)%9 == 4 {
				feed[i] = ids(5 + i) // an observation
			}
		}
		got, err := d.NextBatch(seqs[:n], feed)
		if err != nil {
			t.Fatal(err)
		}
		check(got, caches[:n], feed)
	}
	if seqs[0].Len() != caches[0].Len() || seqs[0].Len() <= 256 {
		t.Fatalf("sequence 0 holds %d positions, the host's %d; want equal and past 256 (a grown cache)", seqs[0].Len(), caches[0].Len())
	}
	// The root is untouched by its clones: it continues from the prompt.
	more := ids(3)
	got, err := d.NextBatch([]agent.Seq{root}, [][]int32{more})
	if err != nil {
		t.Fatal(err)
	}
	check(got, []*llm.Cache{rootC}, [][]int32{more})
	t.Logf("max |Δ log-softmax| %.2g", worst)
	if worst > 1e-4 {
		t.Errorf("graph decoding vs host: max |Δ log-softmax| %g, want <= 1e-4", worst)
	}

	for name, call := range map[string]func() error{
		"released": func() error { _, err := d.NextBatch([]agent.Seq{seqs[2]}, [][]int32{{1}}); return err },
		"no ids":   func() error { _, err := d.NextBatch([]agent.Seq{seqs[0]}, [][]int32{{}}); return err },
		"bad id":   func() error { _, err := d.NextBatch([]agent.Seq{seqs[0]}, [][]int32{{int32(vocab)}}); return err },
		"too long": func() error { _, err := d.NextBatch([]agent.Seq{d.NewSeq()}, [][]int32{ids(2049)}); return err },
		"foreign": func() error {
			_, err := d.NextBatch([]agent.Seq{newGraphDecoder(p, p.Graph(), "other").NewSeq()}, [][]int32{{1}})
			return err
		},
		"mismatch": func() error { _, err := d.NextBatch([]agent.Seq{seqs[0]}, nil); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestPretrainedGraphDecoding: a policy that decodes with the graph (Decoding("graph"), here
// on the go backend) plays the same episodes as one that decodes on the host — greedy and at
// temperature 0.9, with adapters and for the base view — with log-probs within 1e-4, and its
// sampled log-probs equal the graph scorer's; so does a fully fine-tuned one's, after its
// weights changed, while its base view plays the checkpoint's episodes.
func TestPretrainedGraphDecoding(t *testing.T) {
	hostP, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8), 5)
	if err != nil {
		t.Fatal(err)
	}
	graphP, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).LoRA(4, 8).Decoding("graph"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := agrl.Pretrained(tinyQwen3(t)).Decoding("gpu").Validate(); err == nil || !strings.Contains(err.Error(), `decoding "gpu"`) {
		t.Errorf("Decoding(\"gpu\"): %v, want an error naming it", err)
	}
	if hostP.GraphDecoding() || !graphP.GraphDecoding() {
		t.Fatalf("GraphDecoding: default on the go backend %v (want false), Decoding(\"graph\") %v (want true)", hostP.GraphDecoding(), graphP.GraphDecoding())
	}
	withRandomAdapters(t, hostP)
	withRandomAdapters(t, graphP)
	env := calc.New()
	tasks, err := agrl.NewMix(4).Tasks(env, agrl.Dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	tasks = append(tasks, tasks[0], tasks[0]) // a shared prompt: its cache is cloned
	type roller interface {
		Rollout(agrl.Env, []agrl.Task, agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error)
	}
	same := func(name string, a, b roller, temp float64) {
		t.Helper()
		opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: temp, Seed: 2, MaxActionTokens: 10}, Limits: agrl.Limits{MaxTurns: 2}}
		want, _, err := a.Rollout(env, tasks, opt)
		if err != nil {
			t.Fatal(err)
		}
		got, st, err := b.Rollout(env, tasks, opt)
		if err != nil {
			t.Fatal(err)
		}
		worst, sampled := 0.0, 0
		for i := range want {
			if !slices.Equal(got[i].Tokens, want[i].Tokens) {
				t.Fatalf("%s: episode %d: graph decoding sampled other tokens than the host", name, i)
			}
			for j, lp := range want[i].LogProbs {
				worst = max(worst, math.Abs(float64(got[i].LogProbs[j]-lp)))
				sampled += int(want[i].LossMask[j])
			}
		}
		t.Logf("%s: %d episodes, %d sampled tokens, %d steps; max |Δ logp| %.2g", name, len(got), sampled, st.Steps, worst)
		if worst > 1e-4 || sampled < 2*len(want) {
			t.Errorf("%s: max |Δ logp| %g (want <= 1e-4) over %d sampled tokens", name, worst, sampled)
		}
	}
	same("greedy", hostP, graphP, 0)
	same("T=0.9", hostP, graphP, 0.9)
	same("base T=0.9", hostP.BaseModel(), graphP.BaseModel(), 0.9)
	samplerMatchesScorer(t, graphP)

	// Full fine-tuning: the graph decodes the store's current weights (no host copy is made),
	// and the base view decodes the frozen checkpoint.
	fullP, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)).Full().Decoding("graph"), 5)
	if err != nil {
		t.Fatal(err)
	}
	w, err := fullP.Graph().BaseWeights()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range w {
		for i := range x {
			x[i] *= 1 + 0.2*float32(math.Sin(float64(i)))
		}
	}
	if err := fullP.Graph().SetBaseWeights(w); err != nil {
		t.Fatal(err)
	}
	fullP.stale = true
	samplerMatchesScorer(t, fullP)
	same("full: base T=0.9", hostP.BaseModel(), fullP.BaseModel(), 0.9)
}
