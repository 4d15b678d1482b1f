package main

import (
	"errors"
	"testing"
)

func TestDefaultMemoryLimit(t *testing.T) {
	const meminfo = "MemTotal:       24000000 kB\nMemFree:        20000000 kB\n"
	gib := int64(1) << 30
	for _, c := range []struct {
		name             string
		env, info, group string // "" for a file that cannot be read
		want             int64
	}{
		{"machine", "", meminfo, "max\n", int64(float64(24000000<<10) * 0.85)},
		{"cgroup smaller", "", meminfo, "8589934592\n", int64(float64(8*gib) * 0.85)},
		{"cgroup larger", "", meminfo, "99999999999999\n", int64(float64(24000000<<10) * 0.85)},
		{"no cgroup file", "", meminfo, "", int64(float64(24000000<<10) * 0.85)},
		{"only the cgroup", "", "", "4294967296", int64(float64(4*gib) * 0.85)},
		{"GOMEMLIMIT set", "6GiB", meminfo, "max", 0},
		{"nothing readable", "", "", "", 0},
		{"malformed meminfo", "", "MemTotal: lots\n", "max", 0},
		{"meminfo in other units", "", "MemTotal: 24000000 MB\n", "", 0},
	} {
		getenv := func(k string) string {
			if k == "GOMEMLIMIT" {
				return c.env
			}
			return ""
		}
		read := func(path string) ([]byte, error) {
			s := map[string]string{"/proc/meminfo": c.info, "/sys/fs/cgroup/memory.max": c.group}[path]
			if s == "" {
				return nil, errors.New("no such file")
			}
			return []byte(s), nil
		}
		if got := defaultMemoryLimit(getenv, read); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
