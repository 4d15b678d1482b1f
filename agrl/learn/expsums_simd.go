//go:build amd64 && goexperiment.simd

package learn

import (
	"simd/archsimd"

	"agrl.dev/agrl/llm/agent"
)

// The sums over the vocabulary behind every sampled and scored position of a pretrained policy
// (agent.SetExpSums: the log-softmax's normaliser, and the scorer's log-sum-exp and entropy),
// float64 exponentials of the 49,152 to 151,936 logits of a real model's row. math.Exp took
// them one call at a time: 7% of a scoring pass's CPU at the SmolLM2-135M shape on a Zen 3
// EPYC (docs/performance.md, "The vocabulary's exponentials and the AVX2 transposes").
func init() {
	if expSumsOK() {
		agent.SetExpSums(expSumsFMA)
	}
}

// expSumsOK reports whether expSumsFMA runs here with math.Exp's bits: the CPU has AVX2 and
// FMA for the kernel, and AVX as well, the condition under which math.Exp takes its FMA
// branch (math's useFMA, AVX and FMA). AVX2 implies AVX on every CPU, but GODEBUG=cpu.avx=off
// clears AVX alone, and math.Exp then runs its branch without FMA, whose bits differ.
func expSumsOK() bool { return hasAVX2 && archsimd.X86.AVX() }

// expSumsFMA goes on with agent's expSums loop over z from the running sums: blocks of four
// exponentials on AVX2 vectors, with math.Exp's steps and bits, the sums added in element
// order; it returns how many elements it took (a multiple of 4: it stops before the last
// three or fewer, or before a block holding a d outside [−700, 700]) and the sums after them.
// Written in assembly (expsums_amd64.s) so that each step is the very instruction math.Exp's
// amd64 assembly runs, on four lanes.
//
//go:noescape
func expSumsFMA(z []float32, invT, mx, sum, sd float64) (n int, sum2, sd2 float64)
