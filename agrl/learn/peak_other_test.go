//go:build !(goexperiment.simd && amd64)

package learn

// measureFMAPeak needs GOEXPERIMENT=simd on amd64 (see peak_simd_test.go); elsewhere the
// benchmarks report no share of peak.
func measureFMAPeak() (float64, string) { return 0, "" }
