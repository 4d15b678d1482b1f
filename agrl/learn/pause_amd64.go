//go:build amd64

package learn

// spinPause is one PAUSE instruction, for the pool's polling loops (pool.go): the hint that
// the thread is spinning, which lets a core shared by two hardware threads give the other
// one its execution resources, and spares the memory-order flush when the polled word
// changes.
func spinPause()
