package learn

import "math"

// exp32 is e^x in float32 for the host trainer's softmaxes: Cody–Waite range reduction by
// ln 2 and a degree-6 polynomial on [−ln2/2, ln2/2] (Cephes' expf coefficients), within 2 ulp
// of the exact value; 0 below −87.3 (where the result would be subnormal) and +Inf above
// 88.72. It is several times faster than math.Exp, and deterministic: plain float32
// arithmetic, so the same bits on every machine.
func exp32(x float32) float32 {
	switch {
	case x < -87.3:
		return 0
	case x > 88.72:
		return float32(math.Inf(1))
	case x != x:
		return x
	}
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	t := x * log2e
	if t >= 0 {
		t += 0.5
	} else {
		t -= 0.5
	}
	n := int32(t) // x/ln2 rounded to the nearest integer
	fn := float32(n)
	r := x - fn*c1 - fn*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	if n == 128 { // 2^128 overflows the exponent: multiply by 2^127 twice
		return p * 0x1p127 * 2
	}
	return p * math.Float32frombits(uint32(n+127)<<23)
}

// arena hands out float32 buffers for one training step and takes them all back at the next,
// so that a step does not allocate (the garbage collector and page faults cost several percent
// of a step); alloc clears what it returns, raw does not.
type arena struct {
	chunks [][]float32
	cur    int // chunk being filled
	used   int // floats used in chunks[cur]
	total  int // floats handed out since reset
}

// reset takes every buffer back. After a step that needed several chunks, they are merged
// into one large enough for the whole step.
func (a *arena) reset() {
	if len(a.chunks) > 1 {
		a.chunks = [][]float32{make([]float32, a.total+a.total/8)}
	}
	a.cur, a.used, a.total = 0, 0, 0
}

// alloc returns a zeroed buffer of n floats.
func (a *arena) alloc(n int) []float32 {
	b := a.raw(n)
	clear(b)
	return b
}

// raw returns a buffer of n floats holding whatever an earlier step left there: for buffers
// written in full before they are read.
func (a *arena) raw(n int) []float32 {
	a.total += n
	for a.cur < len(a.chunks) && a.used+n > len(a.chunks[a.cur]) {
		a.cur++
		a.used = 0
	}
	if a.cur == len(a.chunks) {
		a.chunks = append(a.chunks, make([]float32, max(n, 1<<20)))
		a.used = 0
	}
	b := a.chunks[a.cur][a.used : a.used+n : a.used+n]
	a.used += n
	return b
}
