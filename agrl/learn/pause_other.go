//go:build !amd64

package learn

// spinPause does nothing here (see pause_amd64.go).
func spinPause() {}
