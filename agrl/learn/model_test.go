package learn

import (
	"agrl.dev/agrl"

	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// testLM is the small configuration the tests use: fast to compile and run on two cores.
func testLM() agrl.LM {
	return agrl.TinyLM().Width(32).Layers(2).Heads(4).MLP(64).Context(64).Backend("") // AGRL_BACKEND, else go:ops_sequential
}

func TestLMValidate(t *testing.T) {
	if err := agrl.TinyLM().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := agrl.SmallLM().Validate(); err != nil {
		t.Fatal(err)
	}
	// NewPolicy reports the shape's problems (LM.Validate) and the backend's together.
	_, err := NewPolicy(agrl.TinyLM().Width(30).Heads(4).Layers(0).Backend("nope"))
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"multiple of heads", "layers", "unknown backend"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	base := agrl.TinyLM()
	_ = base.Width(64)
	if base.Spec().Width != 128 {
		t.Error("setter changed the receiver")
	}
	if n := agrl.TinyLM().Params(); n < 400_000 || n > 600_000 {
		t.Errorf("TinyLM has %d params", n)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

func TestScoreShapes(t *testing.T) {
	p := MustNewPolicy(testLM())
	tok := p.Tokenizer()
	seqs := [][]int32{
		append([]int32{agrl.BOS}, tok.Encode("What is 2+2?<answer>4</answer>")...),
		append([]int32{agrl.BOS}, tok.Encode("hi")...),
	}
	sc, err := p.Score(seqs, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sc {
		if len(s.LogProbs) != len(seqs[i])-1 || len(s.Entropy) != len(seqs[i])-1 {
			t.Fatalf("seq %d: %d logprobs for %d tokens", i, len(s.LogProbs), len(seqs[i]))
		}
		for j, lp := range s.LogProbs {
			// An untrained model is close to uniform over the allowed tokens.
			if lp > 0 || lp < -10 || math.IsNaN(float64(lp)) {
				t.Errorf("seq %d pos %d: logp %v", i, j, lp)
			}
			if e := s.Entropy[j]; e <= 0 || e > float32(math.Log(float64(p.Config().Vocab()))) {
				t.Errorf("entropy %v", e)
			}
		}
	}
	// A causal model: a sequence's scores do not depend on what follows or on padding.
	short, err := p.Score(seqs[1:], 1)
	if err != nil {
		t.Fatal(err)
	}
	for j := range short[0].LogProbs {
		if d := math.Abs(float64(short[0].LogProbs[j] - sc[1].LogProbs[j])); d > 1e-5 {
			t.Errorf("pos %d differs by %g with different batch padding", j, d)
		}
	}
	if _, err := p.Score([][]int32{{agrl.BOS}}, 1); err == nil {
		t.Error("1-token sequence accepted")
	}
	if _, err := p.Score([][]int32{{agrl.BOS, 9999}}, 1); err == nil {
		t.Error("out-of-vocabulary token accepted")
	}
}

func TestWatchdog(t *testing.T) {
	p := MustNewPolicy(testLM())
	p.graphOnly = true // the watchdog guards graph executions (the host code has no worker pool to hang in)
	old := ExecTimeout
	ExecTimeout = time.Nanosecond
	defer func() { ExecTimeout = old }()
	_, err := p.Score([][]int32{{agrl.BOS, 20, 21, 22}}, 1)
	if err == nil || !strings.Contains(err.Error(), "watchdog") {
		t.Errorf("a call past the watchdog returned %v", err)
	}
}

func TestScoreShardsAgree(t *testing.T) {
	var seqs [][]int32
	for i := range 21 {
		s := []int32{agrl.BOS}
		for j := range 5 + i%13 {
			s = append(s, int32(12+(i*5+j*7)%90))
		}
		seqs = append(seqs, s)
	}
	// The graph on one batch padded to its longest sequence, on two shards of pieces cut by
	// length, and the host scorer.
	whole := MustNewPolicy(testLM().Shards(1))
	whole.wholeBatches, whole.graphOnly = true, true
	one, err := whole.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	sharded := MustNewPolicy(testLM().Shards(2))
	sharded.graphOnly = true
	two, err := sharded.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	hp := MustNewPolicy(testLM().Shards(2))
	hp.hostAlways = true
	host, err := hp.Score(seqs, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	for k, other := range [][]TokenScores{two, host} {
		for i := range seqs {
			for j := range one[i].LogProbs {
				if d := math.Abs(float64(one[i].LogProbs[j] - other[i].LogProbs[j])); d > 1e-5 {
					t.Fatalf("case %d, sequence %d position %d: %v vs %v", k, i, j, one[i].LogProbs[j], other[i].LogProbs[j])
				}
				if d := math.Abs(float64(one[i].Entropy[j] - other[i].Entropy[j])); d > 1e-5 {
					t.Fatalf("case %d, sequence %d position %d: entropy %v vs %v", k, i, j, one[i].Entropy[j], other[i].Entropy[j])
				}
			}
		}
	}
}

func ExampleTinyLM() {
	pol, err := NewPolicy(agrl.TinyLM().Seed(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	tok := pol.Tokenizer()
	prompt := tok.AppendEncode([]int32{agrl.BOS}, "What is 2+3?")
	out, err := pol.Complete([][]int32{prompt}, 8, agrl.Sampling{Temperature: 0.3, Seed: 42})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pol.Config().Vocab(), pol.Config().Params(), len(out[0].Tokens), len(out[0].LogProbs))
	// Output: 209 448000 8 8
}
