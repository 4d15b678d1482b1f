package agrl

import (
	"math"
	"strings"
	"testing"
)

func TestPassAtK(t *testing.T) {
	// Hand-computed: n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; n=10, c=3, k=5:
	// 1 - C(7,5)/C(10,5) = 1 - 21/252; k=1 is c/n; c=0 is 0; n−c < k is 1.
	for _, c := range []struct {
		n, c, k int
		want    float64
	}{{4, 1, 2, 0.5}, {10, 3, 5, 1 - 21.0/252}, {8, 3, 1, 3.0 / 8}, {8, 0, 4, 0}, {8, 6, 3, 1}, {5, 5, 5, 1}, {1, 0, 1, 0}} {
		got, err := PassAtK(c.n, c.c, c.k)
		if err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("PassAtK(%d, %d, %d) = %v, %v; want %v", c.n, c.c, c.k, got, err, c.want)
		}
	}
	// It is the mean over all k-subsets of "some sample is correct": check by enumeration.
	correct := []bool{true, false, false, true, false, false, false}
	for k := 1; k <= len(correct); k++ {
		hits, subsets := 0, 0
		for mask := 0; mask < 1<<len(correct); mask++ {
			if popcount(mask) != k {
				continue
			}
			subsets++
			for i, ok := range correct {
				if ok && mask&(1<<i) != 0 {
					hits++
					break
				}
			}
		}
		got, _ := PassAtK(len(correct), 2, k)
		if want := float64(hits) / float64(subsets); math.Abs(got-want) > 1e-12 {
			t.Errorf("k=%d: %v, enumeration %v", k, got, want)
		}
	}
	for _, bad := range [][3]int{{0, 0, 1}, {4, 5, 1}, {4, -1, 1}, {4, 1, 0}, {4, 1, 5}} {
		if _, err := PassAtK(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("PassAtK%v: no error", bad)
		}
	}
}

func popcount(x int) int {
	n := 0
	for ; x > 0; x &= x - 1 {
		n++
	}
	return n
}

func TestMeanCI(t *testing.T) {
	// Hand-computed: 1, 2, 3, 4, 5: mean 3, s = √2.5, t(0.975, 4) = 2.776,
	// half-width 2.776·√2.5/√5 = 1.96292…
	iv, err := MeanCI([]float64{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	hw := 2.776 * math.Sqrt(2.5) / math.Sqrt(5)
	if iv.N != 5 || iv.Mean != 3 || math.Abs(iv.Std-math.Sqrt(2.5)) > 1e-12 || math.Abs(iv.HalfWidth-hw) > 1e-12 ||
		math.Abs(iv.Lo-(3-hw)) > 1e-12 || math.Abs(iv.Hi-(3+hw)) > 1e-12 || iv.Level != 0.95 {
		t.Errorf("MeanCI = %+v", iv)
	}
	if s := iv.String(); !strings.HasPrefix(s, "3.000 ± 1.963") {
		t.Errorf("String = %q", s)
	}
	one, err := MeanCI([]float64{0.7})
	if err != nil || one.Mean != 0.7 || one.Lo != 0.7 || one.Hi != 0.7 || one.Std != 0 {
		t.Errorf("one value: %+v %v", one, err)
	}
	for _, bad := range [][]float64{nil, {1, math.NaN()}, {math.Inf(1)}} {
		if _, err := MeanCI(bad); err == nil {
			t.Errorf("MeanCI(%v): no error", bad)
		}
	}
	// The t quantiles: tabulated values and the large-df interpolation (t(0.975, 50) = 2.009,
	// t(0.975, 1000) = 1.962 in standard tables).
	for df, want := range map[int]float64{1: 12.706, 4: 2.776, 9: 2.262, 30: 2.042, 40: 2.021, 50: 2.009, 120: 1.980, 1000: 1.962} {
		if got := studentT975(df); math.Abs(got-want) > 0.0015 {
			t.Errorf("t975(%d) = %.4f, want %.3f", df, got, want)
		}
	}
}

func TestCurriculumWeights(t *testing.T) {
	base := map[Difficulty]float64{Easy: 0.2, Medium: 0.5, Hard: 0.3}
	// No history: (0+1)/(0+2) for all, so the base mix.
	w, err := CurriculumWeights(base, nil, nil)
	if err != nil || math.Abs(w[Easy]-0.2) > 1e-12 || math.Abs(w[Medium]-0.5) > 1e-12 || math.Abs(w[Hard]-0.3) > 1e-12 {
		t.Errorf("no history: %v %v", w, err)
	}
	// Hand-computed: easy 0 of 18 groups with signal → max(1/20, 0.1) = 0.1; medium 8 of 38 →
	// 9/40; hard 18 of 24 → 19/26. Products 0.02, 0.1125, 0.219231; sum 0.351731.
	w, err = CurriculumWeights(base, map[Difficulty]int{Easy: 18, Medium: 38, Hard: 24}, map[Difficulty]int{Medium: 8, Hard: 18})
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.02 + 0.1125 + 0.3*19.0/26
	for d, want := range map[Difficulty]float64{Easy: 0.02 / sum, Medium: 0.1125 / sum, Hard: 0.3 * 19 / 26 / sum} {
		if math.Abs(w[d]-want) > 1e-12 {
			t.Errorf("%s: %v, want %v", d, w[d], want)
		}
	}
	// A difficulty of base weight 0 stays out.
	w, _ = CurriculumWeights(map[Difficulty]float64{Hard: 1}, map[Difficulty]int{Easy: 4}, map[Difficulty]int{Easy: 4})
	if len(w) != 1 || w[Hard] != 1 {
		t.Errorf("hard only: %v", w)
	}
	for _, bad := range []struct {
		base          map[Difficulty]float64
		groups, signl map[Difficulty]int
	}{{map[Difficulty]float64{}, nil, nil}, {map[Difficulty]float64{Easy: -1, Hard: 1}, nil, nil},
		{base, map[Difficulty]int{Hard: 2}, map[Difficulty]int{Hard: 3}}, {base, map[Difficulty]int{Hard: -1}, nil}} {
		if _, err := CurriculumWeights(bad.base, bad.groups, bad.signl); err == nil {
			t.Errorf("CurriculumWeights(%v, %v, %v): no error", bad.base, bad.groups, bad.signl)
		}
	}
}

func TestPlateaued(t *testing.T) {
	for _, c := range []struct {
		vals     []float64
		patience int
		want     bool
	}{
		{[]float64{0.3, 0.9, 0.94, 0.97, 0.94, 0.95}, 2, true},  // the best (0.97) is 2 evaluations old
		{[]float64{0.3, 0.9, 0.94, 0.97, 0.94, 0.98}, 2, false}, // the last one improved
		{[]float64{0.3, 0.9, 0.94, 0.97, 0.97}, 1, true},        // equal is not better
		{[]float64{0.3, 0.9}, 2, false},                         // too few evaluations
		{[]float64{0.5, 0.4, 0.3}, 0, false},                    // off
	} {
		if got := Plateaued(c.vals, c.patience); got != c.want {
			t.Errorf("Plateaued(%v, %d) = %v", c.vals, c.patience, got)
		}
	}
}
