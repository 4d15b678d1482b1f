//go:build !unix

package agrl

import "os"

// tryLock is a no-op where flock(2) is not available: run directories are not locked there.
func tryLock(*os.File) (held bool, err error) { return false, nil }
