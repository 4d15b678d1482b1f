package agrl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
)

// A run directory holds everything a later notebook cell or command needs to inspect a training
// run (each GoNB cell is a new process, so training writes files and later cells read them):
//
//	runs/NAME/config.json                     the full resolved configuration
//	runs/NAME/metrics.jsonl                   one JSON object per training step
//	runs/NAME/eval.jsonl                      one JSON object per evaluation (step, split, results)
//	runs/NAME/trajectories/step-000100.jsonl  sampled episodes (successes and failures)
//	runs/NAME/steps/step-000100.json          the step's whole update (StepRecord; InspectStep)
//	runs/NAME/checkpoints/                    model checkpoints
//	runs/NAME/summary.json                    written at the end (or on cancellation)
//
// Whole files are written atomically (temporary file, fsync, rename), so a killed process leaves
// either the old or the new version. JSONL files are appended one line per write; a reader skips a
// torn last line left by a process killed mid-write.

// Run directory entry names.
const (
	RunConfigFile      = "config.json"
	RunMetricsFile     = "metrics.jsonl"
	RunEvalFile        = "eval.jsonl"
	RunSummaryFile     = "summary.json"
	RunTrajectoriesDir = "trajectories"
	RunCheckpointsDir  = "checkpoints"
)

// Metrics is one step's line of metrics.jsonl: metric name → value. It always holds "step".
// Metric names are stable: the Metric constants (MetricReward "reward/mean", MetricSuccess,
// MetricKL, …) name every metric the GRPO trainer logs.
type Metrics map[string]float64

// Step returns the metrics' step number.
func (m Metrics) Step() int { return int(m[MetricStep]) }

// EvalRecord is one line of eval.jsonl: the results of evaluating the policy on a split.
type EvalRecord struct {
	Step  int   `json:"step"`
	Split Split `json:"split"`
	// Label names the policy evaluated when it is not a training step (LabelSFT, LabelFinal).
	Label string `json:"label,omitempty"`
	// Settings is the revision of the run's settings the evaluation was made under: the number
	// of lines config_history.jsonl held (0: the settings the run started with). Two
	// evaluations compare when no line between them changed what an evaluation measures
	// (Run.EvalChangesBetween).
	Settings int `json:"settings,omitempty"`
	EvalResult
}

// SplitSummary is a policy's headline numbers in summary.json (fractions in 0..1).
type SplitSummary struct {
	DevSuccess  float64 `json:"dev_success"`
	TestSuccess float64 `json:"test_success"`
	OODSuccess  float64 `json:"ood_success"`
	MeanReward  float64 `json:"mean_reward"`
}

// Summary is summary.json: what a run did and how well, before (SFT) and after (final) GRPO.
type Summary struct {
	Env         string        `json:"env"`
	Seed        uint64        `json:"seed"`
	Steps       int           `json:"steps"`
	WallSeconds float64       `json:"wall_seconds"`
	Backend     string        `json:"backend"`
	SFT         *SplitSummary `json:"sft,omitempty"`
	Final       *SplitSummary `json:"final,omitempty"`
	// Status is "completed", "cancelled" or "failed: …" ("warm-started" while GRPO runs).
	Status string `json:"status"`
	// StoppedEarly says why a completed run took fewer steps than configured (GRPO.StopOnPlateau).
	StoppedEarly string `json:"stopped_early,omitempty"`
	// Resume says, for a cancelled or failed run, which checkpoint the same command resumes
	// from.
	Resume string `json:"resume,omitempty"`
}

// RunWriter appends to a run directory. Its methods are safe for concurrent use.
type RunWriter struct {
	dir  string
	mu   sync.Mutex
	lock *runLock
}

// LockRun creates the run directory dir if needed, takes its lock (see RunLockFile) and returns
// a writer that holds it until Close. It writes nothing else: a trainer writes config.json
// (WriteConfig) only once the run can start, so a failure before that leaves no record. A
// directory locked by another process is a *RunLockedError naming its process id. The lock
// never goes stale: the kernel releases it when the holder exits, however it exits.
func LockRun(dir string) (*RunWriter, error) {
	if dir == "" {
		return nil, errors.New("agrl: empty run directory name")
	}
	l, err := lockRun(dir)
	if err != nil {
		return nil, err
	}
	return &RunWriter{dir: dir, lock: l}, nil
}

// Close releases the run directory's lock (a no-op for writers made by CreateRun, and the
// second time).
func (w *RunWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lock.unlock()
}

// WriteConfig writes config as config.json (atomically) and makes the run directory's
// sub-directories.
func (w *RunWriter) WriteConfig(config any) error {
	for _, sub := range []string{RunTrajectoriesDir, RunCheckpointsDir} {
		if err := os.MkdirAll(filepath.Join(w.dir, sub), 0o755); err != nil {
			return fmt.Errorf("agrl: creating run directory: %w", err)
		}
	}
	return writeJSONAtomic(filepath.Join(w.dir, RunConfigFile), config)
}

// Discard removes what an earlier start left in the run directory (configuration and its
// history, metrics, evaluations, trajectories, summary, report) so that a run starts afresh in it. It
// keeps the checkpoints directory and files it does not know.
func (w *RunWriter) Discard() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range runEntries { // what a run writes (fresh.go), less its checkpoints and lock
		if name == RunCheckpointsDir || name == RunLockFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.dir, name)); err != nil {
			return fmt.Errorf("agrl: clearing %s: %w", w.dir, err)
		}
	}
	return nil
}

// Rewind returns the run directory's logs to a checkpoint taken after step: metrics.jsonl keeps
// the steps up to step, eval.jsonl the records keepEval accepts (nil: those of steps up to
// step), and trajectory files and step records of later steps are removed. Both files are rewritten atomically
// (after a torn last line is dropped), so that the resumed run appends each later line exactly
// once.
func (w *RunWriter) Rewind(step int, keepEval func(EvalRecord) bool) error {
	if keepEval == nil {
		keepEval = func(r EvalRecord) bool { return r.Step <= step }
	}
	r, err := OpenRun(w.dir)
	if err != nil {
		for _, name := range []string{RunMetricsFile, RunEvalFile} {
			if _, serr := os.Stat(filepath.Join(w.dir, name)); serr == nil {
				return err
			}
		}
		r = &Run{Dir: w.dir} // nothing logged yet
	}
	var ms []Metrics
	for _, m := range r.Metrics {
		if m.Step() <= step {
			ms = append(ms, m)
		}
	}
	var evals []EvalRecord
	for _, e := range r.Evals {
		if keepEval(e) {
			evals = append(evals, e)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.rewrite(RunMetricsFile, len(ms), func(i int) any { return nanSafe(ms[i]) }); err != nil {
		return err
	}
	if err := w.rewrite(RunEvalFile, len(evals), func(i int) any { return evals[i] }); err != nil {
		return err
	}
	// Trajectory files and step records of later steps go.
	for _, d := range []struct {
		dir  string
		name *regexp.Regexp
		ext  string
	}{{RunTrajectoriesDir, trajectoryFile, "jsonl"}, {RunStepsDir, stepRecordFile, "json"}} {
		steps, err := stepFiles(filepath.Join(w.dir, d.dir), d.name)
		if err != nil {
			return err
		}
		for _, s := range steps {
			if s > step {
				if err := os.Remove(filepath.Join(w.dir, d.dir, fmt.Sprintf("step-%06d.%s", s, d.ext))); err != nil {
					return fmt.Errorf("agrl: %w", err)
				}
			}
		}
	}
	return nil
}

// rewrite replaces a JSONL file with n lines (atomically).
func (w *RunWriter) rewrite(name string, n int, line func(int) any) error {
	var buf []byte
	for i := range n {
		b, err := json.Marshal(line(i))
		if err != nil {
			return fmt.Errorf("agrl: encoding %s: %w", name, err)
		}
		buf = append(append(buf, b...), '\n')
	}
	return writeFileAtomic(filepath.Join(w.dir, name), buf)
}

// CreateRun makes (or, with resume, reopens) the run directory dir and writes config as
// config.json. Without resume, a directory that already holds a run is an error, so a run is
// never overwritten by accident. It does not lock the directory (trainers use LockRun).
func CreateRun(dir string, config any, resume bool) (*RunWriter, error) {
	if dir == "" {
		return nil, errors.New("agrl: empty run directory name")
	}
	if _, err := os.Stat(filepath.Join(dir, RunConfigFile)); err == nil && !resume {
		return nil, fmt.Errorf("agrl: %s already holds a run (resume it, or choose another directory)", dir)
	}
	for _, sub := range []string{RunTrajectoriesDir, RunCheckpointsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("agrl: creating run directory: %w", err)
		}
	}
	w := &RunWriter{dir: dir}
	if resume {
		for _, name := range []string{RunMetricsFile, RunEvalFile} {
			if err := dropTornLine(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	if config != nil {
		if err := writeJSONAtomic(filepath.Join(dir, RunConfigFile), config); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Dir returns the run directory.
func (w *RunWriter) Dir() string { return w.dir }

// CheckpointDir returns the directory for model checkpoints.
func (w *RunWriter) CheckpointDir() string { return filepath.Join(w.dir, RunCheckpointsDir) }

// LogMetrics appends one step's metrics to metrics.jsonl. NaN and Inf values are written as
// null (JSON has no NaN) and read back as NaN.
func (w *RunWriter) LogMetrics(m Metrics) error {
	if _, ok := m["step"]; !ok {
		return errors.New("agrl: metrics without a step")
	}
	return w.appendLine(RunMetricsFile, nanSafe(m))
}

// LogEval appends one evaluation to eval.jsonl.
func (w *RunWriter) LogEval(r EvalRecord) error { return w.appendLine(RunEvalFile, r) }

// SaveTrajectories writes episodes as trajectories/step-NNNNNN.jsonl (atomically).
func (w *RunWriter) SaveTrajectories(step int, eps []*Episode) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, ep := range eps {
		if err := enc.Encode(ep); err != nil {
			return fmt.Errorf("agrl: encoding trajectory: %w", err)
		}
	}
	name := filepath.Join(w.dir, RunTrajectoriesDir, fmt.Sprintf("step-%06d.jsonl", step))
	return writeFileAtomic(name, buf.Bytes())
}

// WriteSummary writes summary.json (atomically).
func (w *RunWriter) WriteSummary(s Summary) error {
	return writeJSONAtomic(filepath.Join(w.dir, RunSummaryFile), s)
}

func (w *RunWriter) appendLine(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agrl: encoding %s: %w", name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(w.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	// One write call per line: a process killed mid-line leaves at most one torn last line.
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("agrl: appending to %s: %w", name, err)
	}
	return f.Close()
}

// dropTornLine truncates a JSONL file after its last newline, removing the partial line that a
// process killed mid-write leaves, so that appending resumes on a clean line.
func dropTornLine(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || len(b) == 0 || b[len(b)-1] == '\n' {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	if err := os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1)); err != nil {
		return fmt.Errorf("agrl: repairing %s: %w", path, err)
	}
	return nil
}

func nanSafe(m Metrics) map[string]*float64 {
	out := make(map[string]*float64, len(m))
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			out[k] = nil
			continue
		}
		v := v
		out[k] = &v
	}
	return out
}

// writeJSONAtomic writes v as indented JSON through writeFileAtomic.
func writeJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("agrl: encoding %s: %w", filepath.Base(path), err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// writeFileAtomic writes data to a temporary file beside path, syncs it and renames it over
// path: readers see the old content or the new, never a mix.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("agrl: writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("agrl: syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	return nil
}

// Run is a run directory read back.
type Run struct {
	// Dir is the directory; Name its base name.
	Dir, Name string
	// Config is config.json (the zero value if absent). Settings it does not know are read
	// with Setting.
	Config GRPOConfig
	// ConfigJSON is config.json as written (nil if absent).
	ConfigJSON json.RawMessage
	// Metrics holds metrics.jsonl in order.
	Metrics []Metrics
	// Evals holds eval.jsonl in order.
	Evals []EvalRecord
	// History holds config_history.jsonl in order: the settings changed at each resume that
	// changed any (nil when none did).
	History []ConfigChange
	// Summary is nil while the run has not finished.
	Summary *Summary
	// Skipped counts lines that could not be read (a torn last line after a crash).
	Skipped int
}

// OpenRun reads a run directory. Missing files are fine (a run that just started has only
// config.json); a directory that is not a run at all is an error.
func OpenRun(dir string) (*Run, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("agrl: opening run: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("agrl: %s is not a directory", dir)
	}
	r := &Run{Dir: dir, Name: filepath.Base(dir)}
	found := false
	if b, err := os.ReadFile(filepath.Join(dir, RunConfigFile)); err == nil {
		found = true
		if err := decodeConfig(b, r); err != nil {
			return nil, fmt.Errorf("agrl: %s/%s: %w", dir, RunConfigFile, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, RunSummaryFile)); err == nil {
		found = true
		r.Summary = new(Summary)
		if err := json.Unmarshal(b, r.Summary); err != nil {
			return nil, fmt.Errorf("agrl: %s/%s: %w", dir, RunSummaryFile, err)
		}
	}
	n, skipped, err := readJSONL(filepath.Join(dir, RunMetricsFile), func(line []byte) error {
		var raw map[string]*float64
		if err := json.Unmarshal(line, &raw); err != nil {
			return err
		}
		m := make(Metrics, len(raw))
		for k, v := range raw {
			if v == nil {
				m[k] = math.NaN()
			} else {
				m[k] = *v
			}
		}
		r.Metrics = append(r.Metrics, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Skipped += skipped
	found = found || n > 0
	n, skipped, err = readJSONL(filepath.Join(dir, RunEvalFile), func(line []byte) error {
		var e EvalRecord
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		r.Evals = append(r.Evals, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Skipped += skipped
	if r.History, err = ConfigHistory(dir); err != nil {
		return nil, err
	}
	if !found && n == 0 {
		return nil, fmt.Errorf("agrl: %s is not a run directory (no %s, %s or %s)", dir, RunConfigFile, RunMetricsFile, RunSummaryFile)
	}
	return r, nil
}

// readJSONL calls fn on each non-empty line of path. A line that fails to decode is skipped and
// counted when it is the last line (a torn write); anywhere else it is an error. A missing file
// reads as empty.
func readJSONL(path string, fn func([]byte) error) (lines, skipped int, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("agrl: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var all [][]byte
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			all = append(all, append([]byte(nil), line...))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("agrl: reading %s: %w", path, err)
	}
	for i, line := range all {
		if err := fn(line); err != nil {
			if i == len(all)-1 {
				return lines, 1, nil
			}
			return lines, 0, fmt.Errorf("agrl: %s line %d: %w", path, i+1, err)
		}
		lines++
	}
	return lines, 0, nil
}

// Series returns the steps and values of one metric, skipping steps that lack it.
func (r *Run) Series(metric string) (steps, values []float64) {
	for _, m := range r.Metrics {
		if v, ok := m[metric]; ok {
			steps = append(steps, m[MetricStep])
			values = append(values, v)
		}
	}
	return steps, values
}

// MetricNames lists every metric name present in metrics.jsonl, sorted.
func (r *Run) MetricNames() []string {
	seen := map[string]bool{}
	for _, m := range r.Metrics {
		for k := range m {
			seen[k] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var trajectoryFile = regexp.MustCompile(`^step-(\d+)\.jsonl$`)

// TrajectorySteps lists the steps that have saved trajectories, in increasing order.
func (r *Run) TrajectorySteps() ([]int, error) {
	return stepFiles(filepath.Join(r.Dir, RunTrajectoriesDir), trajectoryFile)
}

// stepFiles lists, in increasing order, the step numbers of the files in dir whose names match
// name (its first group is the number); a missing dir has none.
func stepFiles(dir string, name *regexp.Regexp) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agrl: %w", err)
	}
	var steps []int
	for _, e := range entries {
		if m := name.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// Trajectories reads the episodes saved at step.
func (r *Run) Trajectories(step int) ([]*Episode, error) {
	path := filepath.Join(r.Dir, RunTrajectoriesDir, fmt.Sprintf("step-%06d.jsonl", step))
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("agrl: no trajectories at step %d in %s", step, r.Dir)
	}
	return ReadEpisodes(path)
}

// ReadEpisodes reads a JSON-lines file of episodes: a run directory's trajectories, or the
// episodes `agrl play` saved (:save).
func ReadEpisodes(path string) ([]*Episode, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("agrl: %w", err)
	}
	var eps []*Episode
	_, _, err := readJSONL(path, func(line []byte) error {
		ep := new(Episode)
		if err := json.Unmarshal(line, ep); err != nil {
			return err
		}
		eps = append(eps, ep)
		return nil
	})
	return eps, err
}
