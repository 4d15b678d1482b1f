package learn

import (
	"agrl.dev/agrl"

	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestSamplerScorerAgreement(t *testing.T) {
	for _, pos := range []agrl.Positions{agrl.Learned, agrl.RoPE} {
		for _, host := range []bool{false, true} {
			if host && pos == agrl.Learned {
				continue // the host path has no learned positions
			}
			p := MustNewPolicy(testLM().Positions(pos))
			p.graphOnly, p.hostAlways = !host, host
			t.Run(fmt.Sprintf("%v/host=%v", pos, host), func(t *testing.T) { testSamplerScorerAgreement(t, p) })
		}
	}
}

// TestHostDecoderSameOnAnyShards: the host decoder computes each sequence on its own, so its
// samples and log-probs are the same bits however many shards the batch is cut into.
func TestHostDecoderSameOnAnyShards(t *testing.T) {
	var outs [][]Completion
	for _, shards := range []int{1, 3} {
		p := MustNewPolicy(testLM().Seed(5).Shards(shards))
		p.hostAlways = true
		tok := p.Tokenizer()
		var prompts [][]int32
		for i := range 13 {
			prompts = append(prompts, tok.AppendEncode([]int32{agrl.BOS}, strings.Repeat("7+", 1+i%5)+"1"))
		}
		out, err := p.Complete(prompts, 12, agrl.Sampling{Temperature: 1, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	for i := range outs[0] {
		if !slices.Equal(outs[0][i].Tokens, outs[1][i].Tokens) || !slices.Equal(outs[0][i].LogProbs, outs[1][i].LogProbs) {
			t.Fatalf("prompt %d: 1 shard %v %v, 3 shards %v %v", i, outs[0][i].Tokens, outs[0][i].LogProbs, outs[1][i].Tokens, outs[1][i].LogProbs)
		}
	}
}

// TestHostDecoderMatchesGraph samples greedily with the host decoder and with the graph's, over
// several turns with observations, and compares the tokens and their log-probs.
func TestHostDecoderMatchesGraph(t *testing.T) {
	tok := agrl.ASCIITokenizer()
	run := func(host bool) ([][]int32, [][]float32) {
		p := MustNewPolicy(testLM().Tokenizer(tok).Seed(13).Shards(2))
		p.graphOnly, p.hostAlways = !host, host
		var prompts [][]int32
		for i := range 9 {
			prompts = append(prompts, tok.AppendEncode([]int32{agrl.BOS}, strings.Repeat("ab", 1+i*3)+"?"))
		}
		d, err := p.NewDecoder(len(prompts), 64, agrl.Sampling{Temperature: 0, MaxActionTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		for i, pr := range prompts {
			if err := d.Start(i, pr); err != nil {
				t.Fatal(err)
			}
		}
		toks, lps := make([][]int32, len(prompts)), make([][]float32, len(prompts))
		turns := make([]int, len(prompts))
		err = d.Run(func(i int, c Completion) ([]int32, bool) {
			toks[i], lps[i] = append(toks[i], c.Tokens...), append(lps[i], c.LogProbs...)
			turns[i]++
			obs := tok.Encode(strings.Repeat("x", i+1))
			return obs, turns[i] < 3 && d.Room(i) > len(obs)+8
		})
		if err != nil {
			t.Fatal(err)
		}
		return toks, lps
	}
	gt, gl := run(false)
	ht, hl := run(true)
	for i := range gt {
		if !slices.Equal(gt[i], ht[i]) {
			t.Fatalf("sequence %d: graph sampled %v, host %v", i, gt[i], ht[i])
		}
		for j := range gl[i] {
			if d := math.Abs(float64(gl[i][j] - hl[i][j])); d > 1e-4 {
				t.Errorf("sequence %d token %d: log-prob graph %v, host %v", i, j, gl[i][j], hl[i][j])
			}
		}
	}
}

func testSamplerScorerAgreement(t *testing.T, p *Policy) {
	tok := p.Tokenizer()
	prompts := [][]int32{
		append([]int32{agrl.BOS}, tok.Encode("What is 12+30?")...),
		append([]int32{agrl.BOS}, tok.Encode("hi")...),
		append([]int32{agrl.BOS}, tok.Encode("A longer prompt: more than one chunk of 16.")...),
	}
	for _, temp := range []float64{0.8, 0.3, 1.7} {
		s := agrl.Sampling{Temperature: temp, Seed: 11, MaxActionTokens: 9}
		d, err := p.NewDecoder(len(prompts), 64, s)
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([][]int32, len(prompts))
		lps := make([][]float32, len(prompts)) // NaN where the token was not sampled
		for i, pr := range prompts {
			if err := d.Start(i, pr); err != nil {
				t.Fatal(err)
			}
			seqs[i] = slices.Clone(pr)
			for range pr {
				lps[i] = append(lps[i], float32(math.NaN()))
			}
		}
		turns := make([]int, len(prompts))
		obs := append(append([]int32{agrl.TagID(agrl.ObsOpen)}, tok.Encode("obs 42")...), agrl.TagID(agrl.ObsClose))
		err = d.Run(func(i int, c Completion) ([]int32, bool) {
			if len(c.Tokens) != len(c.LogProbs) || len(c.Tokens) == 0 {
				t.Errorf("completion with %d tokens and %d log-probs", len(c.Tokens), len(c.LogProbs))
			}
			seqs[i] = append(seqs[i], c.Tokens...)
			lps[i] = append(lps[i], c.LogProbs...)
			turns[i]++
			if turns[i] == 3 || d.Room(i) < len(obs)+2 {
				return nil, false
			}
			seqs[i] = append(seqs[i], obs...) // multi-turn: observation read from the cache, not recomputed
			for range obs {
				lps[i] = append(lps[i], float32(math.NaN()))
			}
			return obs, true
		})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		sc, err := p.Score(seqs, temp)
		if err != nil {
			t.Fatal(err)
		}
		worst, n := 0.0, 0
		for i := range seqs {
			for j := 1; j < len(seqs[i]); j++ {
				if math.IsNaN(float64(lps[i][j])) {
					continue
				}
				n++
				worst = max(worst, math.Abs(float64(lps[i][j]-sc[i].LogProbs[j-1])))
			}
		}
		t.Logf("T=%.1f: %d sampled tokens, max |Δ log-prob| = %.2g", temp, n, worst)
		if n < 20 {
			t.Errorf("only %d sampled tokens", n)
		}
		if worst > 1e-4 {
			t.Errorf("T=%.1f: sampler and scorer disagree by %g", temp, worst)
		}
		if p.onHost() && worst != 0 { // the host decoder and scorer run the same code per row
			t.Errorf("T=%.1f: host sampler and scorer differ by %g; want exactly 0", temp, worst)
		}
	}
}

func TestSamplerDeterminism(t *testing.T) {
	p := MustNewPolicy(testLM())
	prompts := [][]int32{{agrl.BOS, 20, 30}, {agrl.BOS, 40}, {agrl.BOS, 50, 51, 52, 53}}
	run := func(seed uint64) [][]int32 {
		out, err := p.Complete(prompts, 12, agrl.Sampling{Temperature: 1, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		var toks [][]int32
		for _, c := range out {
			toks = append(toks, c.Tokens)
		}
		return toks
	}
	a, b, c := run(5), run(5), run(6)
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Errorf("seed 5 gave different samples: %v vs %v", a[i], b[i])
		}
	}
	if slices.EqualFunc(a, c, slices.Equal) {
		t.Error("seeds 5 and 6 gave the same samples")
	}
	// Sequence i's samples do not depend on the rest of the batch.
	alone, err := p.Complete(prompts[1:2], 12, agrl.Sampling{Temperature: 1, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	_ = alone // stream (seed, 0) differs from (seed, 1): only the batch's own index matters
	// Greedy decoding is deterministic and never writes a banned token.
	g, err := p.Complete(prompts, 12, agrl.Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range g {
		for _, id := range c.Tokens {
			if slices.Contains(bannedTokens(), id) {
				t.Errorf("sampled banned token %d", id)
			}
		}
	}
}

// TestDecoderCompaction stops half of the sequences early: the decoder then gathers the live
// KV-cache rows into a smaller batch, and what it samples afterwards still agrees with the
// scorer.
func TestDecoderCompaction(t *testing.T) {
	p := MustNewPolicy(testLM().Shards(1))
	p.graphOnly = true // compaction is the graph decoder's (the host decoder never pads)
	tok := p.Tokenizer()
	const n = 16
	d, err := p.NewDecoder(n, 64, agrl.Sampling{Temperature: 1, Seed: 2, MaxActionTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seqs := make([][]int32, n)
	lps := make([][]float32, n)
	for i := range n {
		seqs[i] = append([]int32{agrl.BOS}, tok.Encode(fmt.Sprintf("task %d", i))...)
		lps[i] = make([]float32, len(seqs[i]))
		for j := range lps[i] {
			lps[i][j] = float32(math.NaN())
		}
		if err := d.Start(i, seqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	turns := make([]int, n)
	obs := tok.Encode("<obs>ok</obs>")
	err = d.Run(func(i int, c Completion) ([]int32, bool) {
		seqs[i] = append(seqs[i], c.Tokens...)
		lps[i] = append(lps[i], c.LogProbs...)
		turns[i]++
		if i%4 != 0 || turns[i] == 4 { // 12 of 16 stop after one action
			return nil, false
		}
		seqs[i] = append(seqs[i], obs...)
		for range obs {
			lps[i] = append(lps[i], float32(math.NaN()))
		}
		return obs, true
	})
	if err != nil {
		t.Fatal(err)
	}
	if b := d.parts[0].b; b > 4 {
		t.Errorf("batch still %d after 12 of 16 sequences stopped", b)
	}
	sc, err := p.Score(seqs, 1)
	if err != nil {
		t.Fatal(err)
	}
	n4 := 0
	for i := range seqs {
		for j := 1; j < len(seqs[i]); j++ {
			if math.IsNaN(float64(lps[i][j])) {
				continue
			}
			if i%4 == 0 && j > 20 {
				n4++
			}
			if d := math.Abs(float64(lps[i][j] - sc[i].LogProbs[j-1])); d > 1e-4 {
				t.Fatalf("sequence %d token %d: sampled log-prob %v, scored %v", i, j, lps[i][j], sc[i].LogProbs[j-1])
			}
		}
	}
	if n4 == 0 {
		t.Error("no tokens sampled after the compaction")
	}
}

func TestDecoderUnstartedSequences(t *testing.T) {
	p := MustNewPolicy(testLM().Shards(1))
	d, err := p.NewDecoder(16, 32, agrl.Sampling{Seed: 1, MaxActionTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, i := range []int{3, 11} { // 14 of 16 never start
		if err := d.Start(i, []int32{agrl.BOS, 20, 21}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int]int{}
	err = d.Run(func(i int, c Completion) ([]int32, bool) {
		got[i] = len(c.Tokens)
		return nil, false
	})
	if err != nil || len(got) != 2 || got[3] == 0 || got[11] == 0 {
		t.Errorf("Run: %v, completions %v", err, got)
	}
}

func TestDecoderCallbackPanic(t *testing.T) {
	p := MustNewPolicy(testLM())
	_, err := p.Complete([][]int32{{agrl.BOS, 20}}, 2, agrl.Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := p.NewDecoder(1, 16, agrl.Sampling{MaxActionTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(0, []int32{agrl.BOS, 20}); err != nil {
		t.Fatal(err)
	}
	err = d.Run(func(int, Completion) ([]int32, bool) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking callback: %v", err)
	}
}
