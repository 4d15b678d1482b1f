package agrl

import (
	"errors"
	"fmt"
	"math"
)

// PassAtK is the unbiased estimate of pass@k for one task from n ≥ k samples of which c are
// correct: the probability that k samples drawn without replacement from the n contain at
// least one correct, 1 − C(n−c, k)/C(n, k) (Chen et al., 2021). Unlike "some of the k samples
// was correct" (best-of-k), it uses every sample and does not depend on their order. It is an
// error unless 0 ≤ c ≤ n and 1 ≤ k ≤ n.
func PassAtK(n, c, k int) (float64, error) {
	if n < 1 || c < 0 || c > n || k < 1 || k > n {
		return 0, fmt.Errorf("agrl: pass@k with n=%d samples, c=%d correct, k=%d: want 0 ≤ c ≤ n and 1 ≤ k ≤ n", n, c, k)
	}
	if n-c < k {
		return 1, nil
	}
	// C(n−c, k)/C(n, k) = Π_{i=n−c+1..n} (1 − k/i), a product of factors in (0, 1): no overflow.
	q := 1.0
	for i := n - c + 1; i <= n; i++ {
		q *= 1 - float64(k)/float64(i)
	}
	return 1 - q, nil
}

// Interval is a sample mean with a two-sided confidence interval.
type Interval struct {
	// N is the number of values, Mean their mean and Std their sample standard deviation
	// (n − 1 in the denominator; 0 for one value).
	N         int     `json:"n"`
	Mean      float64 `json:"mean"`
	Std       float64 `json:"std"`
	Lo        float64 `json:"lo"`
	Hi        float64 `json:"hi"`
	Level     float64 `json:"level"`
	HalfWidth float64 `json:"half_width"`
}

// String writes "mean ± half-width (lo…hi)", or the bare mean for a single value.
func (iv Interval) String() string {
	if iv.N < 2 {
		return fmt.Sprintf("%.3f", iv.Mean)
	}
	return fmt.Sprintf("%.3f ± %.3f", iv.Mean, iv.HalfWidth)
}

// MeanCI returns the mean of xs with its 95% Student-t confidence interval, mean ± t·s/√n with
// t the 0.975 quantile of Student's t with n − 1 degrees of freedom: the interval for the mean
// of a few roughly normal values (per-seed results), which a bootstrap of 3–10 seeds would make
// too narrow. With one value the interval is the value itself and Std is 0. It is an error to
// pass no value or a NaN or infinite one.
func MeanCI(xs []float64) (Interval, error) {
	if len(xs) == 0 {
		return Interval{}, errors.New("agrl: MeanCI of no values")
	}
	n := len(xs)
	sum := 0.0
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Interval{}, fmt.Errorf("agrl: MeanCI: value %d is %v", i, x)
		}
		sum += x
	}
	mean := sum / float64(n)
	iv := Interval{N: n, Mean: mean, Lo: mean, Hi: mean, Level: 0.95}
	if n < 2 {
		return iv, nil
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	iv.Std = math.Sqrt(ss / float64(n-1))
	iv.HalfWidth = studentT975(n-1) * iv.Std / math.Sqrt(float64(n))
	iv.Lo, iv.Hi = mean-iv.HalfWidth, mean+iv.HalfWidth
	return iv, nil
}

// t975 holds the 0.975 quantiles of Student's t for 1–30 degrees of freedom (standard tables).
var t975 = [...]float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// studentT975 is the 0.975 quantile of Student's t with df ≥ 1 degrees of freedom: the table up
// to 30, then interpolated linearly in 1/df between the tabulated 40, 60, 120 and ∞ (1.960),
// which is exact to the table's three decimals.
func studentT975(df int) float64 {
	if df <= len(t975) {
		return t975[df-1]
	}
	knots := []struct{ df, t float64 }{{30, 2.042}, {40, 2.021}, {60, 2.000}, {120, 1.980}, {math.Inf(1), 1.960}}
	x := 1 / float64(df)
	for i := 0; i+1 < len(knots); i++ {
		a, b := knots[i], knots[i+1]
		if float64(df) <= b.df {
			xa, xb := 1/a.df, 1/b.df
			return a.t + (b.t-a.t)*(x-xa)/(xb-xa)
		}
	}
	return 1.960
}
