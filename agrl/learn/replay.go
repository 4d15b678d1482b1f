package learn

import (
	"agrl.dev/agrl"

	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Replay is a GRPO step re-run from a checkpoint (ReplayStep).
type Replay struct {
	// From is the GRPO step of the checkpoint the replay started from; Steps the steps re-run
	// (the last one is the step replayed).
	From, Steps int
	// Inspection is the replayed step's record with the run's logged metrics of that step.
	Inspection *agrl.StepInspection
	// Metrics are the metrics the replayed step computed.
	Metrics agrl.Metrics
	// Differences lists what the replay did not reproduce: metrics that differ from the log
	// (timings aside), and, when the run recorded the step, episodes whose tokens differ from the
	// record's. Empty: the step was reproduced exactly.
	Differences []string
	// Kernels is the kernel set of the process that saved the checkpoint the replay started
	// from (CheckpointInfo.Kernels; "" for older checkpoints and other backends). When it is
	// not the replay's (Computes), the replay sums in another order: differences in the last
	// bits are expected.
	Kernels string
	// Computes is the kernel set the replay computed with (Kernels; "" on another backend
	// than the CPU's).
	Computes string
}

// Err is nil when the replay reproduced the step exactly, else an error listing the differences.
func (r *Replay) Err() error {
	if len(r.Differences) == 0 {
		return nil
	}
	why := ""
	if k := kernelChange(r.Kernels, r.Computes); k != "" {
		why = fmt.Sprintf(" (the checkpoint it started from: %s; their sums round differently)", k)
	}
	return fmt.Errorf("agrl: step %d replayed from step %d differs from the run%s: %s", r.Inspection.Record.Step, r.From, why, strings.Join(r.Differences, "; "))
}

// ReplayStep re-runs GRPO step `step` of the run in g's output directory, which g must describe
// (the configuration it was trained with: Build's resume check refuses one that differs in what
// is trained). It copies the run's logs and the newest checkpoint from before the step into a
// temporary directory, resumes there (the run directory itself is not touched), takes the steps
// up to `step` recording each one, and compares the replayed step's metrics with the logged
// ones, and its episodes with the run's step record when there is one. Resuming is exact, so a
// faithful run reproduces bit for bit; the replay's record (Replay.Inspection) is available for
// every step, recorded or not.
//
// Checkpoints: the trainer keeps the two newest and the warm start's (GRPO step 0), so any step
// can be replayed, re-running up to CheckpointEvery steps (from the warm start, for the steps
// before the older kept checkpoint). A Tiny run with a KL penalty also needs its reference
// checkpoint.
func ReplayStep(g agrl.GRPO, step int) (*Replay, error) {
	dir := g.Spec().Out
	run, err := agrl.OpenRun(dir)
	if err != nil {
		return nil, err
	}
	var logged agrl.Metrics
	for _, m := range run.Metrics {
		if m.Step() == step {
			logged = m
		}
	}
	if logged == nil {
		return nil, fmt.Errorf("agrl: ReplayStep: %s logged no step %d", dir, step)
	}
	// The settings first: a g that is not the run's fails for that reason, named against the run
	// (not its copy below), before a checkpoint its settings would need is looked for.
	if len(run.ConfigJSON) > 0 {
		binding, _, err := g.ResumeChanges(run.ConfigJSON)
		if err != nil {
			return nil, err
		}
		if len(binding) > 0 {
			return nil, &agrl.ResumeMismatchError{Dir: dir, Changes: binding, Model: len(agrl.ModelChanges(binding)) > 0}
		}
	}
	// A step taken before a resume that changed the settings ran under others than config.json
	// now holds: re-running it under these would not be that step.
	for _, h := range run.History {
		if h.NewSettings && step <= h.Step {
			return nil, fmt.Errorf("agrl: ReplayStep: step %d of %s ran under the settings the run changed when it resumed after step %d (%s): steps after %d replay", step, dir, h.Step, agrl.JoinChanges(h.Changes), h.Step)
		}
	}
	ckdir := filepath.Join(dir, agrl.RunCheckpointsDir)
	var from CheckpointInfo
	from.Step = -1
	var marks []string
	for _, c := range Checkpoints(ckdir) {
		m, err := readMark(c)
		if err != nil || m.Stage != StageGRPO {
			continue
		}
		marks = append(marks, fmt.Sprint(m.Step))
		if m.Step < step && m.Step > from.Step {
			from = m
		}
	}
	if from.Step < 0 {
		return nil, fmt.Errorf("agrl: ReplayStep: %s has no checkpoint from before step %d (GRPO checkpoints at steps: %s)", ckdir, step, strings.Join(marks, ", "))
	}
	for _, h := range run.History {
		if h.NewSettings && from.Step < h.Step {
			return nil, fmt.Errorf("agrl: ReplayStep: re-running step %d from the checkpoint of step %d would take steps %d to %d under the settings the run changed only after step %d, and its checkpoint there is no longer kept (GRPO checkpoints at steps: %s)", step, from.Step, from.Step+1, h.Step, h.Step, strings.Join(marks, ", "))
		}
	}
	// The copy goes next to the run (the same file system as its checkpoints, which may be large),
	// else to the system's temporary directory.
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), ".agrl-replay-")
	if err != nil {
		if tmp, err = os.MkdirTemp("", "agrl-replay-"); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{agrl.RunConfigFile, agrl.RunMetricsFile, agrl.RunEvalFile, agrl.RunSummaryFile, agrl.RunConfigHistoryFile} {
		if err := copyFile(filepath.Join(dir, name), filepath.Join(tmp, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	tmpCk := filepath.Join(tmp, agrl.RunCheckpointsDir)
	if err := copyTree(from.Dir, filepath.Join(tmpCk, filepath.Base(from.Dir))); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmpCk, latestFile), []byte(filepath.Base(from.Dir)+"\n"), 0o644); err != nil {
		return nil, err
	}
	ref := filepath.Join(ckdir, "reference")
	if _, err := os.Stat(ref); err == nil {
		if err := copyTree(ref, filepath.Join(tmpCk, "reference")); err != nil {
			return nil, err
		}
	} else if g.Spec().KL > 0 && (g.Spec().Pretrained == nil || g.Spec().SFT != nil) && from.Step > 0 {
		return nil, fmt.Errorf("agrl: ReplayStep: %s has no reference checkpoint (the KL penalty's): it cannot be replayed", ckdir)
	}
	tr, err := Build(g.Out(tmp).Fresh(false).Progress(nil).OnStep(nil).OnSFTStep(nil))
	if err != nil {
		return nil, fmt.Errorf("agrl: ReplayStep: %w", err)
	}
	defer tr.Close()
	if tr.step != from.Step || !tr.warmed {
		return nil, fmt.Errorf("agrl: ReplayStep: resumed at step %d, not at the checkpoint's %d", tr.step, from.Step)
	}
	tr.recordAll = true
	r := &Replay{From: from.Step, Kernels: from.Kernels, Computes: tr.model.kernels()}
	for tr.step < step {
		if r.Metrics, err = tr.Step(); err != nil {
			return nil, err
		}
		r.Steps++
	}
	s, err := agrl.InspectRecord(tr.lastRecord, logged)
	if err != nil {
		return nil, err
	}
	r.Inspection = s
	r.Differences = metricDifferences(r.Metrics, logged)
	recPath := filepath.Join(dir, agrl.RunStepsDir, fmt.Sprintf("step-%06d.json", step))
	if _, err := os.Stat(recPath); err == nil {
		orig, err := run.StepRecord(step)
		if err != nil {
			r.Differences = append(r.Differences, fmt.Sprintf("the run's record of the step cannot be read: %v", err))
			return r, nil
		}
		if len(orig.Episodes) != len(tr.lastRecord.Episodes) {
			r.Differences = append(r.Differences, fmt.Sprintf("%d episodes replayed, %d recorded", len(tr.lastRecord.Episodes), len(orig.Episodes)))
		} else {
			for i, e := range orig.Episodes {
				if !slices.Equal(e.Episode.Tokens, tr.lastRecord.Episodes[i].Episode.Tokens) {
					r.Differences = append(r.Differences, fmt.Sprintf("episode %d's tokens differ from the record", i))
				}
			}
		}
	}
	return r, nil
}

// metricDifferences lists the metrics of a replayed step that differ from the logged ones,
// timings and throughput aside (they are the machine's, not the step's).
func metricDifferences(got, want agrl.Metrics) []string {
	var diffs []string
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "time/") || k == agrl.MetricTokensPerSecond {
			continue
		}
		a, okA := got[k]
		b, okB := want[k]
		same := okA && okB && (a == b || math.IsNaN(a) && math.IsNaN(b))
		if !same {
			diffs = append(diffs, fmt.Sprintf("%s: replayed %v, logged %v", k, a, b))
		}
	}
	return diffs
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyTree copies the directory src (regular files and subdirectories) to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
}
