package main

import (
	"os"
	"runtime/debug"

	"agrl.dev/internal/sysmem"
)

// Memory. Go collects garbage when the heap has grown by GOGC percent (100 by default) since
// the last collection, so a process whose live data is L may hold up to about 2L. For training,
// where L is gigabytes of weights, gradients and optimizer moments, that slack is what decides
// whether a run fits: fully fine-tuning the SmolLM2-135M shape peaked at 14.5 GB resident with
// the defaults, 11.4 GB with GOGC=50 at the same speed, and 9.1 GB with GOMEMLIMIT=9GiB at
// 0.75× its speed (docs/llm.md, "Memory"). Unless GOMEMLIMIT is set, agrl therefore gives
// itself a soft memory limit of memoryShare of the memory it may use (the machine's, or its
// cgroup's when that is smaller): below it nothing changes, near it the collector works harder
// instead of the process being killed for running out of memory.

// memoryShare is the part of the available memory the default soft limit allows.
const memoryShare = 0.85

// setMemoryLimit applies defaultMemoryLimit, when there is one.
func setMemoryLimit() {
	if n := defaultMemoryLimit(os.Getenv, os.ReadFile); n > 0 {
		debug.SetMemoryLimit(n)
	}
}

// defaultMemoryLimit returns the soft memory limit, in bytes, for a process whose environment
// is getenv and whose files read reads: 0 (none) when GOMEMLIMIT is set — the Go runtime then
// applies it — or when no memory size can be read; otherwise memoryShare of the smaller of
// /proc/meminfo's MemTotal and the cgroup v2 limit /sys/fs/cgroup/memory.max (sysmem.Total).
func defaultMemoryLimit(getenv func(string) string, read func(string) ([]byte, error)) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return int64(float64(sysmem.Total(read)) * memoryShare)
}
