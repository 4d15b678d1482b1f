//go:build amd64 && goexperiment.simd

package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"
)

// expSumsLoop is agent's expSums without a kernel: the reference.
func expSumsLoop(z []float32, invT, mx, sum, sd float64) (float64, float64) {
	for _, v := range z {
		d := float64(float64(v)*invT) - mx
		e := math.Exp(d)
		sum += e
		if e != 0 {
			sd += e * d
		}
	}
	return sum, sd
}

// expSumsDriven is agent's expSums with expSumsFMA as its kernel.
func expSumsDriven(z []float32, invT, mx float64) (sum, sd float64, taken int) {
	for j := 0; j < len(z); {
		var n int
		n, sum, sd = expSumsFMA(z[j:], invT, mx, sum, sd)
		j, taken = j+n, taken+n
		end := min(j+4, len(z))
		sum, sd = expSumsLoop(z[j:end], invT, mx, sum, sd)
		j = end
	}
	return sum, sd, taken
}

// TestExpSumsFMAExp: each of the kernel's exponentials has math.Exp's bits, in every lane.
// A block holds the value under test in one lane and d ≈ −680 in the other three, whose
// exponentials (~1e-296) are below half an ulp of the tested one's (d ≥ −600 here), so the
// block's Σe is the tested exponential itself. The values: uniform over [−600, 700], around
// the points where k = round(d·log2 e) changes (d = (m + ½)·ln 2, a few ulps either side),
// and near 0.
func TestExpSumsFMAExp(t *testing.T) {
	if !expSumsOK() {
		t.Skip("no AVX, AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ds []float64
	for range 20000 {
		ds = append(ds, -600+1300*rng.Float64())
	}
	for m := -866; m <= 1009; m += 7 {
		b := (float64(m) + 0.5) * math.Ln2
		for u := -3; u <= 3; u++ {
			ds = append(ds, math.Float64frombits(uint64(int64(math.Float64bits(b))+int64(u))))
		}
	}
	ds = append(ds, 0, 1e-300, -1e-300, 1e-17, -1e-17, 0.5, -0.5, math.Ln2, -math.Ln2)
	for i, d := range ds {
		// d_j = float64(z_j)·1 − mx: z_p = 0 gives d = −mx exactly; the others are −680-ish.
		mx := -d
		other := float32(mx - 680)
		for p := range 4 {
			z := []float32{other, other, other, other}
			z[p] = 0
			n, sum, _ := expSumsFMA(z, 1, mx, 0, 0)
			if n != 4 {
				t.Fatalf("d = %v: the kernel took %d of 4", d, n)
			}
			if want := math.Exp(d); math.Float64bits(sum) != math.Float64bits(want) {
				t.Fatalf("value %d, lane %d: exp(%v) = %v (%#x), math.Exp %v (%#x)", i, p, d, sum, math.Float64bits(sum), want, math.Float64bits(want))
			}
		}
	}
}

// TestExpSumsFMABlocks: blocks of four independent d each, over the whole range the kernel
// takes ([−700, 700], a quarter of the lanes in [−700, −600], and the ends themselves), give
// both sums as the loop does, bit for bit; a d just past either end stops the kernel.
func TestExpSumsFMABlocks(t *testing.T) {
	if !expSumsOK() {
		t.Skip("no AVX, AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	z := make([]float32, 4)
	for i := range 200000 {
		mx := 0.0
		for l := range z {
			var d float64
			switch {
			case i < 4:
				d = []float64{-700, 700, -700, 700}[(i+l)%4]
			case rng.IntN(4) == 0:
				d = -700 + 100*rng.Float64()
			default:
				d = -700 + 1400*rng.Float64()
			}
			z[l] = float32(d) // d = float64(z)·1 − 0: exact
		}
		n, sum, sd := expSumsFMA(z, 1, mx, 0.5, -0.25)
		wantSum, wantSD := expSumsLoop(z, 1, mx, 0.5, -0.25)
		if n != 4 || math.Float64bits(sum) != math.Float64bits(wantSum) || math.Float64bits(sd) != math.Float64bits(wantSD) {
			t.Fatalf("block %v: took %d, Σe %v Σe·d %v, loop %v %v", z, n, sum, sd, wantSum, wantSD)
		}
	}
	for _, past := range []float32{math.Nextafter32(700, 800), math.Nextafter32(-700, -800)} {
		if n, _, _ := expSumsFMA([]float32{0, past, 0, 0, 0, 0, 0, 0}, 1, 0, 0, 0); n != 0 {
			t.Errorf("d = %v: the kernel took %d elements, want 0", past, n)
		}
	}
}

// TestExpSumsFMARows: over whole rows the kernel and agent's loop give the same Σe and Σe·d
// bits, with the kernel stopping where it must: rows of every length up to 37 and one of
// SmolLM2's vocabulary size, the sampler's and scorer's temperatures, and rows holding −∞
// logits, logits far below the maximum (d < −700, which the kernel leaves to the loop) and
// the maximum itself (d = 0).
func TestExpSumsFMARows(t *testing.T) {
	if !expSumsOK() {
		t.Skip("no AVX, AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	lengths := []int{49152}
	for n := range 38 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, invT := range []float64{1, 1 / 0.7, 1 / 0.3} {
			for variant := range 3 {
				z := make([]float32, n)
				for j := range z {
					z[j] = float32(rng.NormFloat64() * 6)
				}
				if n > 0 && variant > 0 {
					for range 1 + n/8 {
						j := rng.IntN(n)
						if variant == 1 {
							z[j] = float32(math.Inf(-1))
						} else {
							z[j] = -1e4 // d < −700 at these temperatures
						}
					}
				}
				mx := math.Inf(-1)
				for _, v := range z {
					mx = max(mx, float64(v)*invT)
				}
				if n == 0 {
					mx = 0
				}
				wantSum, wantSD := expSumsLoop(z, invT, mx, 0, 0)
				sum, sd, taken := expSumsDriven(z, invT, mx)
				if math.Float64bits(sum) != math.Float64bits(wantSum) || math.Float64bits(sd) != math.Float64bits(wantSD) {
					t.Fatalf("n %d, 1/T %v, variant %d: Σe %v Σe·d %v, loop %v %v", n, invT, variant, sum, sd, wantSum, wantSD)
				}
				if n >= 64 && variant == 0 && taken != n&^3 {
					t.Errorf("n %d, 1/T %v: the kernel took %d elements of a finite row, want %d", n, invT, taken, n&^3)
				}
			}
		}
	}
}

// TestExpSumsKernelScores: through the policy, with the kernel installed and without it, a
// rollout samples the same tokens with the same log-probs and the scorer gives the same
// log-probs and entropies, bit for bit (the tiny Qwen3 fixture: 320 logits a row, 80 blocks).
func TestExpSumsKernelScores(t *testing.T) {
	if !expSumsOK() {
		t.Skip("no AVX, AVX2 and FMA")
	}
	p, err := LoadPretrained(agrl.Pretrained(tinyQwen3(t)), 1)
	if err != nil {
		t.Fatal(err)
	}
	env := calc.New()
	tasks, err := agrl.NewMix(3).Tasks(env, agrl.Dev, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.SetExpSums(expSumsFMA) })
	taken := 0 // elements the kernel took
	counted := func(z []float32, invT, mx, sum, sd float64) (int, float64, float64) {
		n, sum, sd := expSumsFMA(z, invT, mx, sum, sd)
		taken += n
		return n, sum, sd
	}
	run := func(kernel bool) ([]*agrl.Episode, []TokenScores) {
		if kernel {
			agent.SetExpSums(counted)
		} else {
			agent.SetExpSums(nil)
		}
		eps, _, err := p.Rollout(env, tasks, agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: 0.7, Seed: 9, MaxActionTokens: 10}, Limits: agrl.Limits{MaxTurns: 2}})
		if err != nil {
			t.Fatal(err)
		}
		var seqs [][]int32
		for _, ep := range eps {
			seqs = append(seqs, ep.Tokens)
		}
		sc, err := p.Score(seqs, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		return eps, sc
	}
	eps0, sc0 := run(false)
	eps1, sc1 := run(true)
	sampled := 0
	for i := range eps0 {
		sampled += len(eps0[i].LogProbs)
		if !slices.Equal(eps0[i].Tokens, eps1[i].Tokens) || !slices.Equal(eps0[i].LogProbs, eps1[i].LogProbs) {
			t.Errorf("episode %d: sampled tokens or log-probs differ with the kernel", i)
		}
		if !slices.Equal(sc0[i].LogProbs, sc1[i].LogProbs) || !slices.Equal(sc0[i].Entropy, sc1[i].Entropy) {
			t.Errorf("episode %d: scores differ with the kernel", i)
		}
	}
	if sampled == 0 || taken == 0 {
		t.Errorf("nothing compared: %d sampled tokens, %d elements through the kernel", sampled, taken)
	}
}

var expSumsSink float64

// BenchmarkExpSums times one row's Σe and Σe·d at SmolLM2's and Qwen3's vocabulary sizes, by
// agent's loop (math.Exp) and with the kernel (ns a row; ns/element = ns/op ÷ the size).
func BenchmarkExpSums(b *testing.B) {
	if !expSumsOK() {
		b.Skip("no AVX, AVX2 and FMA")
	}
	for _, n := range []int{49152, 151936} {
		rng := rand.New(rand.NewPCG(1, 2))
		z := make([]float32, n)
		mx := math.Inf(-1)
		for j := range z {
			z[j] = float32(rng.NormFloat64() * 4)
			mx = max(mx, float64(z[j]))
		}
		b.Run(fmt.Sprintf("loop_%d", n), func(b *testing.B) {
			for range b.N {
				s, d := expSumsLoop(z, 1, mx, 0, 0)
				expSumsSink += s + d
			}
		})
		b.Run(fmt.Sprintf("kernel_%d", n), func(b *testing.B) {
			for range b.N {
				s, d, _ := expSumsDriven(z, 1, mx)
				expSumsSink += s + d
			}
		})
	}
}
