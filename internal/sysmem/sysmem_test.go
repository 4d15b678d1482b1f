package sysmem

import (
	"errors"
	"testing"
)

// TestTotal: the smaller of MemTotal and the cgroup's limit; "max" and unreadable or malformed
// files leave the other; nothing readable gives 0.
func TestTotal(t *testing.T) {
	const meminfo = "MemFree:  1000 kB\nMemTotal:       24576000 kB\nSwapTotal: 0 kB\n"
	for _, c := range []struct {
		name             string
		meminfo, cgroup  string
		noMeminfo, noCgr bool
		want             int64
	}{
		{"meminfo only", meminfo, "", false, true, 24576000 << 10},
		{"cgroup smaller", meminfo, "8589934592\n", false, false, 8 << 30},
		{"cgroup larger", meminfo, "68719476736\n", false, false, 24576000 << 10},
		{"cgroup max", meminfo, "max\n", false, false, 24576000 << 10},
		{"cgroup only", "", "1073741824", true, false, 1 << 30},
		{"MemTotal in MB", "MemTotal: 24000 MB\n", "", false, true, 0},
		{"nothing", "", "", true, true, 0},
	} {
		read := func(path string) ([]byte, error) {
			switch {
			case path == "/proc/meminfo" && !c.noMeminfo:
				return []byte(c.meminfo), nil
			case path == "/sys/fs/cgroup/memory.max" && !c.noCgr:
				return []byte(c.cgroup), nil
			}
			return nil, errors.New("no such file")
		}
		if got := Total(read); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
