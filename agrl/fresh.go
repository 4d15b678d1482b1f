package agrl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// runEntries are the names a run directory holds (see LockRun; report.html and
// before_after.json are written by nb.WriteReport and the CLI).
var runEntries = map[string]bool{
	RunConfigFile: true, RunMetricsFile: true, RunEvalFile: true, RunSummaryFile: true,
	RunTrajectoriesDir: true, RunCheckpointsDir: true, RunStepsDir: true, "report.html": true, "before_after.json": true,
	RunConfigHistoryFile: true, RunLockFile: true,
}

// ClearRun empties the run directory dir so that a run can start afresh in it (GRPO.Fresh):
// it removes everything inside dir and keeps dir. It refuses, removing nothing, unless dir is
// a run directory: it holds config.json, or only entries that a run writes (metrics.jsonl,
// eval.jsonl, summary.json, trajectories/, checkpoints/, report.html, temporary files), or
// nothing. A directory of other files (a typo in Out, or Out(".")) is never wiped. A missing
// dir is not an error.
func ClearRun(dir string) error {
	if strings.TrimSpace(dir) == "" {
		return errors.New("agrl: empty run directory name")
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agrl: clearing run directory: %w", err)
	}
	isRun := false
	var others []string
	for _, e := range entries {
		switch name := e.Name(); {
		case name == RunConfigFile:
			isRun = isRunConfig(filepath.Join(dir, name))
		case runEntries[name] || strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-"):
		default:
			others = append(others, name)
		}
	}
	if !isRun && len(others) > 0 {
		if slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return e.Name() == RunConfigFile }) {
			others = append([]string{RunConfigFile + " of another tool"}, others...)
		}
		if len(others) > 3 {
			others = append(others[:3], "…")
		}
		return fmt.Errorf("agrl: not clearing %s: it is not a run directory (no %s; it holds %s)", dir, RunConfigFile, strings.Join(others, ", "))
	}
	for _, e := range entries {
		if e.Name() == RunLockFile { // held by the caller (learn.Build clears under the lock)
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("agrl: clearing run directory: %w", err)
		}
	}
	return nil
}

// freshProblem reports a Fresh run whose starting checkpoint (From) lies inside the run
// directory that Fresh empties.
func (g GRPO) freshProblem() error {
	if !g.s.Fresh || g.s.From == "" || strings.TrimSpace(g.s.Out) == "" {
		return nil
	}
	out, err1 := filepath.Abs(g.s.Out)
	from, err2 := filepath.Abs(g.s.From)
	if err1 != nil || err2 != nil {
		return nil
	}
	if rel, err := filepath.Rel(out, from); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("the checkpoint to start from (%s) is inside the run directory that Fresh clears (%s)", g.s.From, g.s.Out)
	}
	return nil
}

// isRunConfig reports whether path is a run's config.json (a JSON object that decodes as a
// GRPOConfig naming its environment), not some other tool's file of the same name.
func isRunConfig(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var r Run
	return decodeConfig(b, &r) == nil && r.Config.Env != ""
}
