// Package sysmem reads how much memory this process may use: the machine's, or its cgroup's
// limit when that is smaller. The CLI's soft memory limit and the pretrained loader's check
// that a model can fit at all share it.
package sysmem

import (
	"os"
	"strconv"
	"strings"
)

// Usable returns the memory, in bytes, this process may use on this machine (0 when no size
// can be read): Total with the real files.
func Usable() int64 { return Total(os.ReadFile) }

// Total returns the smaller of /proc/meminfo's MemTotal and the cgroup v2 limit
// /sys/fs/cgroup/memory.max, in bytes, with files read by read; 0 when neither can be read.
func Total(read func(string) ([]byte, error)) int64 {
	var total int64
	if b, err := read("/proc/meminfo"); err == nil {
		total = MemTotal(string(b))
	}
	if b, err := read("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n // "max" (no limit) does not parse
		}
	}
	return total
}

// MemTotal reads MemTotal from /proc/meminfo's text, in bytes (0 when it is not there).
func MemTotal(meminfo string) int64 {
	for line := range strings.SplitSeq(meminfo, "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0
		}
		return kb << 10
	}
	return 0
}
