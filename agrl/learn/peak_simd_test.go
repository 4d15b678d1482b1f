//go:build goexperiment.simd && amd64

package learn

import (
	"runtime"
	"simd/archsimd"
	"sync"
	"time"
)

// fmaSink keeps the peak loops' results alive.
var fmaSink [2]float32

// measureFMAPeak measures this CPU's fp32 peak: one goroutine per GOMAXPROCS running
// independent fused multiply-add chains (AVX-512, else AVX2+FMA) for about 0.3 s, all at once.
// It returns GFLOP/s (2 FLOPs per lane per FMA) and the instruction set, or 0 and "" where
// neither is available.
func measureFMAPeak() (float64, string) {
	var run func(iters int) float32
	var flopsPerIter float64
	var isa string
	const chains = 12 // independent accumulators: enough to cover FMA latency × pipes
	switch {
	case archsimd.X86.AVX512():
		isa, flopsPerIter = "avx512", chains*16*2
		run = func(iters int) float32 {
			a, b := archsimd.BroadcastFloat32x16(0.999), archsimd.BroadcastFloat32x16(1e-3)
			// Twelve accumulators in locals (an array of vectors would live in memory).
			c0, c1, c2, c3 := archsimd.BroadcastFloat32x16(0), archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(2), archsimd.BroadcastFloat32x16(3)
			c4, c5, c6, c7 := archsimd.BroadcastFloat32x16(4), archsimd.BroadcastFloat32x16(5), archsimd.BroadcastFloat32x16(6), archsimd.BroadcastFloat32x16(7)
			c8, c9, c10, c11 := archsimd.BroadcastFloat32x16(8), archsimd.BroadcastFloat32x16(9), archsimd.BroadcastFloat32x16(10), archsimd.BroadcastFloat32x16(11)
			for range iters {
				c0, c1, c2, c3 = c0.MulAdd(a, b), c1.MulAdd(a, b), c2.MulAdd(a, b), c3.MulAdd(a, b)
				c4, c5, c6, c7 = c4.MulAdd(a, b), c5.MulAdd(a, b), c6.MulAdd(a, b), c7.MulAdd(a, b)
				c8, c9, c10, c11 = c8.MulAdd(a, b), c9.MulAdd(a, b), c10.MulAdd(a, b), c11.MulAdd(a, b)
			}
			s := c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Add(c8).Add(c9).Add(c10).Add(c11)
			var out [16]float32
			s.Store(&out)
			return out[0]
		}
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		isa, flopsPerIter = "avx2", chains*8*2
		run = func(iters int) float32 {
			a, b := archsimd.BroadcastFloat32x8(0.999), archsimd.BroadcastFloat32x8(1e-3)
			// Twelve accumulators in locals (an array of vectors would live in memory).
			c0, c1, c2, c3 := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(1), archsimd.BroadcastFloat32x8(2), archsimd.BroadcastFloat32x8(3)
			c4, c5, c6, c7 := archsimd.BroadcastFloat32x8(4), archsimd.BroadcastFloat32x8(5), archsimd.BroadcastFloat32x8(6), archsimd.BroadcastFloat32x8(7)
			c8, c9, c10, c11 := archsimd.BroadcastFloat32x8(8), archsimd.BroadcastFloat32x8(9), archsimd.BroadcastFloat32x8(10), archsimd.BroadcastFloat32x8(11)
			for range iters {
				c0, c1, c2, c3 = c0.MulAdd(a, b), c1.MulAdd(a, b), c2.MulAdd(a, b), c3.MulAdd(a, b)
				c4, c5, c6, c7 = c4.MulAdd(a, b), c5.MulAdd(a, b), c6.MulAdd(a, b), c7.MulAdd(a, b)
				c8, c9, c10, c11 = c8.MulAdd(a, b), c9.MulAdd(a, b), c10.MulAdd(a, b), c11.MulAdd(a, b)
			}
			s := c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Add(c8).Add(c9).Add(c10).Add(c11)
			var out [8]float32
			s.Store(&out)
			return out[0]
		}
	default:
		return 0, ""
	}
	// Calibrate to about 0.3 s on one core, then run that on every core at once.
	iters := 1 << 16
	for {
		start := time.Now()
		fmaSink[0] = run(iters)
		if time.Since(start) > 30*time.Millisecond {
			break
		}
		iters *= 2
	}
	iters *= 10
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := run(iters)
			if w == 0 {
				fmaSink[1] = v
			}
		}()
	}
	wg.Wait()
	sec := time.Since(start).Seconds()
	return float64(workers) * float64(iters) * flopsPerIter / sec / 1e9, isa
}
