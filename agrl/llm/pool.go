package llm

import (
	"math"
	"math/bits"
	"sync"
)

// A training step on the host traces its sequences and runs their backward passes, and the
// next step does it again with the same shapes, or nearly: the activations, the backward
// pass's working rows and the products' results come to gigabytes a step at a real shape
// (2.2 GB at SmolLM2-135M under full fine-tuning, four sequences of 256 tokens). Made fresh,
// that memory is collected and made again, and on the machines we run on the collector's
// cycles make the heap reach new pages every few steps, which the kernel hands out one 4 KB
// page fault at a time (33–42 µs each on the Zen 5 VM: 5–8 s of system time in some steps of
// 8). So the trace's buffers go back to a pool when the backward pass is done with them
// (PutFloats) and the next trace takes them from there (Floats), in size classes; the
// collector may still drop what the pool holds (sync.Pool), so memory that no step asks for
// again is not kept.

// poolMin is the smallest length pooled: below it, make is as cheap. (A variable for tests,
// whose models are small; at least 16.)
var poolMin = 4096

// poolPoison, in tests, makes PutFloats fill what it takes back with NaNs, so that a pass
// reading a buffer before writing it, or after giving it back, shows in its results.
var poolPoison bool

// PoolForTests sets, for other packages' tests of what they give back, the smallest length
// pooled (at least 16; 1<<40 pools nothing) and whether PutFloats poisons what it takes back
// with NaNs, so that a buffer read after it was given back shows in their results; restore
// puts the previous settings back. Not for use while anything else calls Floats or PutFloats.
func PoolForTests(min int, poison bool) (restore func()) {
	m, p := poolMin, poolPoison
	poolMin, poolPoison = max(min, 16), poison
	return func() { poolMin, poolPoison = m, p }
}

// floatPools holds the buffers of each size class (floatClass).
var floatPools [8 * 64]sync.Pool

// floatClass returns the size class of a buffer of n floats, n ≥ poolMin, and its capacity:
// the smallest j·2^e ≥ n with j in 9…16 (so that less than an eighth is spare), class
// 8e + j − 9.
func floatClass(n int) (class, capacity int) {
	e := bits.Len(uint(n-1)) - 4
	j := (n + 1<<e - 1) >> e // ⌈n / 2^e⌉, in 9…16
	return 8*e + j - 9, j << e
}

// Floats returns a buffer of n float32s whose contents are whatever was left there: from the
// pool that traces take their buffers from, where it holds one of n's class, else made. Give
// it back with PutFloats when done, for the next trace or step of the same shapes (the host
// trainer's log-probabilities and logits blocks go through it too).
func Floats(n int) []float32 {
	if n < poolMin {
		return make([]float32, n)
	}
	c, capacity := floatClass(n)
	if b, ok := floatPools[c].Get().(*[]float32); ok {
		return (*b)[:n]
	}
	return make([]float32, n, capacity)
}

// zeros is Floats cleared.
func zeros(n int) []float32 {
	b := Floats(n)
	clear(b)
	return b
}

// PutFloats gives buffers back to the pool (see Floats): each must be owned whole by the
// caller (from Floats, or a fresh make), given back once, and nothing may read or write it
// afterwards. A buffer whose capacity is a size class's (at least poolMin) is reused, all of
// its capacity, whatever its length; others are left to the collector. nil is ignored.
func PutFloats(bufs ...[]float32) {
	for _, b := range bufs {
		if cap(b) < poolMin {
			continue
		}
		c, capacity := floatClass(cap(b))
		if capacity != cap(b) {
			continue
		}
		b = b[:cap(b)]
		if poolPoison {
			for i := range b {
				b[i] = float32(math.NaN())
			}
		}
		floatPools[c].Put(&b)
	}
}
