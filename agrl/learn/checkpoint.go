package learn

import (
	"agrl.dev/agrl"

	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/model/checkpoint"
)

// Checkpoints.
//
// A checkpoint directory holds numbered checkpoints and a pointer to the newest:
//
//	dir/ckpt-000007/policy.json   model configuration and tokenizer
//	dir/ckpt-000007/checkpoint-…  GoMLX checkpoint: weights and optimizer state (the whole store)
//	dir/LATEST                    "ckpt-000007"
//
// Save is atomic: it writes a new checkpoint into a temporary directory, syncs it, renames it
// into place and only then rewrites LATEST (written to a temporary file and renamed). A
// process killed at any moment leaves the previous checkpoint loadable; LoadPolicy also falls
// back to the newest complete checkpoint if LATEST is missing or points at a damaged one.

const (
	latestFile     = "LATEST"
	policyFile     = "policy.json"
	ckptPrefix     = "ckpt-"
	tmpPrefix      = ".tmp-ckpt-"
	policyFormat   = 1
	defaultKeepCkp = 2
)

type policyJSON struct {
	Format int `json:"format"`
	// Kind is "" for a Tiny policy and "pretrained" for a pretrained model's adapters.
	Kind  string    `json:"kind,omitempty"`
	LM    agrl.LM   `json:"lm"`
	Saved time.Time `json:"saved"`
	// Stage, Step and SFTStep: see CheckpointInfo (absent in checkpoints saved by Policy.Save
	// outside a GRPO run, and in those of older builds).
	Stage   string `json:"stage,omitempty"`
	Step    int    `json:"step,omitempty"`
	SFTStep int    `json:"sft_step,omitempty"`
	// Kernels is the kernel set of the process that saved it (Kernels; absent from older
	// checkpoints).
	Kernels string `json:"kernels,omitempty"`
}

// Checkpoint stages (CheckpointInfo.Stage).
const (
	// StageSFT marks a checkpoint taken during a GRPO run's warm start (SFTStep steps done).
	StageSFT = "sft"
	// StageGRPO marks a checkpoint taken by a GRPO run once its warm start was done: after Step
	// GRPO steps (0: right after the warm start; that policy is also the KL reference).
	StageGRPO = "grpo"
)

// CheckpointInfo says which checkpoint a policy was loaded from and how far its run had got.
type CheckpointInfo struct {
	// Dir is the checkpoint's directory (…/checkpoints/ckpt-000007); "" for a policy that was
	// not loaded from a checkpoint.
	Dir string `json:"checkpoint"`
	// Stage is StageSFT, StageGRPO, or "" (saved outside a GRPO run, or by an older build).
	Stage string `json:"stage,omitempty"`
	// Step is the number of GRPO steps done; SFTStep the warm-start steps done (StageSFT).
	Step    int `json:"step"`
	SFTStep int `json:"sft_step,omitempty"`
	// Kernels is the kernel set of the process that saved it (Kernels; "" for older
	// checkpoints).
	Kernels string `json:"kernels,omitempty"`
	// Skipped lists the newer checkpoints of the directory that could not be loaded, each with
	// the reason: LoadPolicy fell back to an older one.
	Skipped []string `json:"skipped,omitempty"`
}

// String describes the checkpoint: "ckpt-000004 (GRPO step 3)".
func (c CheckpointInfo) String() string {
	name := filepath.Base(c.Dir)
	switch c.Stage {
	case StageSFT:
		return fmt.Sprintf("%s (warm start, SFT step %d)", name, c.SFTStep)
	case StageGRPO:
		return fmt.Sprintf("%s (GRPO step %d)", name, c.Step)
	}
	return name + " (step not recorded)"
}

// Warning returns the message about the checkpoints LoadPolicy had to skip, or "".
func (c CheckpointInfo) Warning() string {
	if len(c.Skipped) == 0 {
		return ""
	}
	return fmt.Sprintf("warning: %d newer checkpoint(s) in %s could not be loaded (%s); loaded the older %s",
		len(c.Skipped), filepath.Dir(c.Dir), strings.Join(c.Skipped, "; "), c)
}

// Checkpoint returns which checkpoint the policy was loaded from (the zero value for a policy
// made by NewPolicy).
func (p *Policy) Checkpoint() CheckpointInfo { return p.loaded }

// saveHook, when set by tests, is called between the stages of Save; an error aborts the save
// there, like a crash.
var saveHook func(stage string) error

func hook(stage string) error {
	if saveHook != nil {
		return saveHook(stage)
	}
	return nil
}

// Save writes the policy — configuration, tokenizer, weights and every trainer's optimizer
// state — as a new checkpoint in dir, atomically, keeping the two newest checkpoints (and a GRPO
// run's warm start, GRPO step 0). It returns the checkpoint's directory.
func (p *Policy) Save(dir string) (string, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return commitCheckpoint(dir, p.writeCheckpoint)
}

// commitCheckpoint creates a temporary directory in dir, has write fill it, and makes it the
// newest checkpoint: synced, renamed to the next ckpt-N, then LATEST rewritten (through a
// renamed temporary file). Older checkpoints beyond the two newest are pruned, except the first
// of GRPO step 0 (pruneCheckpoints). A failure
// leaves the previous checkpoints as they were.
func commitCheckpoint(dir string, write func(tmp string) error) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("agrl: Save: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, tmpPrefix)
	if err != nil {
		return "", fmt.Errorf("agrl: Save: %w", err)
	}
	final, err := renameCheckpoint(dir, tmp, write)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("agrl: Save to %s: %w", dir, err)
	}
	pruneCheckpoints(dir, defaultKeepCkp)
	return final, nil
}

// writeCheckpoint writes policy.json and the GoMLX checkpoint of the whole store into tmp.
func (p *Policy) writeCheckpoint(tmp string) error {
	meta, err := json.MarshalIndent(policyJSON{Format: policyFormat, LM: p.cfg, Saved: time.Now().UTC(),
		Stage: p.mark.Stage, Step: p.mark.Step, SFTStep: p.mark.SFTStep, Kernels: p.kernels()}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, policyFile), meta); err != nil {
		return err
	}
	prevLoader := p.store.Loader()
	err = catch(func() error {
		h, err := checkpoint.Build(p.store).Dir(tmp).Keep(-1).Done()
		if err != nil {
			return err
		}
		return h.Save()
	})
	p.store.SetLoader(prevLoader)
	return err
}

func renameCheckpoint(dir, tmp string, write func(tmp string) error) (string, error) {
	if err := write(tmp); err != nil {
		return "", err
	}
	if err := hook("written"); err != nil {
		return "", err
	}
	if err := syncDir(tmp, true); err != nil {
		return "", err
	}
	n := 1
	if names := listCheckpoints(dir); len(names) > 0 {
		n = ckptNumber(names[len(names)-1]) + 1
	}
	name := fmt.Sprintf("%s%06d", ckptPrefix, n)
	final := filepath.Join(dir, name)
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	if err := syncDir(dir, false); err != nil {
		return "", err
	}
	if err := hook("renamed"); err != nil {
		return "", err
	}
	latestTmp := filepath.Join(dir, "."+latestFile+".tmp")
	if err := writeFileSync(latestTmp, []byte(name+"\n")); err != nil {
		return "", err
	}
	if err := os.Rename(latestTmp, filepath.Join(dir, latestFile)); err != nil {
		return "", err
	}
	return final, syncDir(dir, false)
}

// MustSave is Save for notebooks: it panics on error.
func (p *Policy) MustSave(dir string) string {
	d, err := p.Save(dir)
	if err != nil {
		panic(err)
	}
	return d
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory (and, with files set, every regular file in it).
func syncDir(dir string, files bool) error {
	if files {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			err = f.Sync()
			_ = f.Close()
			if err != nil {
				return err
			}
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func ckptNumber(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, ckptPrefix))
	if err != nil {
		return -1
	}
	return n
}

// listCheckpoints returns the checkpoint directory names in dir, oldest first.
func listCheckpoints(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), ckptPrefix) && ckptNumber(e.Name()) >= 0 {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return ckptNumber(names[i]) < ckptNumber(names[j]) })
	return names
}

// pruneCheckpoints removes all but the newest keep checkpoints (never the one LATEST names, nor
// the newest of GRPO step 0: the warm-started policy every step of the run can be replayed
// from, see ReplayStep) and temporary directories left by interrupted saves.
func pruneCheckpoints(dir string, keep int) {
	latest := readLatest(dir)
	names := listCheckpoints(dir)
	start := ""
	for _, n := range names {
		if m, err := readMark(filepath.Join(dir, n)); err == nil && m.Stage == StageGRPO && m.Step == 0 {
			start = n // the newest such
		}
	}
	for i := 0; i < len(names)-keep; i++ {
		if names[i] != latest && names[i] != start {
			_ = os.RemoveAll(filepath.Join(dir, names[i]))
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), tmpPrefix) {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
}

func readLatest(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, latestFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Checkpoints lists the complete checkpoints in dir, newest first (LATEST's first when valid).
func Checkpoints(dir string) []string {
	names := listCheckpoints(dir)
	var out []string
	latest := readLatest(dir)
	if latest != "" {
		out = append(out, filepath.Join(dir, latest))
	}
	for i := len(names) - 1; i >= 0; i-- {
		if names[i] != latest {
			out = append(out, filepath.Join(dir, names[i]))
		}
	}
	return out
}

// LoadPolicy restores the newest loadable checkpoint in dir (the one LATEST names, else the
// newest complete one) on the given backend ("" means BackendFromEnv()). The policy's
// trainers, rebuilt with the same names, continue from the saved optimizer state. Which
// checkpoint was loaded is p.Checkpoint(); when newer ones were damaged and skipped, LoadPolicy
// also prints the warning (CheckpointInfo.Warning) to standard error: a fallback is never silent.
func LoadPolicy(dir, backend string) (*Policy, error) {
	return loadPolicy(dir, backend, func(msg string) { fmt.Fprintln(os.Stderr, "agrl: "+msg) })
}

// loadPolicy is LoadPolicy with the fallback warning sent to warn.
func loadPolicy(dir, backend string, warn func(string)) (*Policy, error) {
	var p *Policy
	info, err := loadNewest(dir, "LoadPolicy", warn, func(ckdir string) (checkpointMark, error) {
		q, meta, err := loadCheckpoint(ckdir, backend)
		if err != nil {
			return checkpointMark{}, err
		}
		p = q
		return checkpointMark{Stage: meta.Stage, Step: meta.Step, SFTStep: meta.SFTStep, Kernels: meta.Kernels}, nil
	})
	if err != nil {
		return nil, err
	}
	p.loaded = info
	return p, nil
}

// loadNewest runs load on the checkpoints of dir, newest first (see Checkpoints), until one
// loads, and describes it; the ones that failed are listed in its Skipped, and warn hears of
// them. what names the caller in errors.
func loadNewest(dir, what string, warn func(string), load func(ckdir string) (checkpointMark, error)) (CheckpointInfo, error) {
	cands := Checkpoints(dir)
	if len(cands) == 0 {
		return CheckpointInfo{}, fmt.Errorf("agrl: %s: no checkpoint in %s", what, dir)
	}
	var errs []error
	var skipped []string
	for _, c := range cands {
		mark, err := load(c)
		if err == nil {
			info := CheckpointInfo{Dir: c, Stage: mark.Stage, Step: mark.Step, SFTStep: mark.SFTStep, Kernels: mark.Kernels, Skipped: skipped}
			if w := info.Warning(); w != "" && warn != nil {
				warn(w)
			}
			return info, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(c), err))
		skipped = append(skipped, fmt.Sprintf("%s: %v", filepath.Base(c), err))
	}
	return CheckpointInfo{}, fmt.Errorf("agrl: %s: no loadable checkpoint in %s: %w", what, dir, errors.Join(errs...))
}

// newestCheckpoint describes the checkpoint LoadPolicy would try first in dir, from its
// policy.json alone.
func newestCheckpoint(dir string) (CheckpointInfo, bool) {
	cands := Checkpoints(dir)
	if len(cands) == 0 {
		return CheckpointInfo{}, false
	}
	var meta policyJSON
	b, err := os.ReadFile(filepath.Join(cands[0], policyFile))
	if err == nil {
		_ = json.Unmarshal(b, &meta)
	}
	return CheckpointInfo{Dir: cands[0], Stage: meta.Stage, Step: meta.Step, SFTStep: meta.SFTStep}, true
}

// MustLoadPolicy is LoadPolicy for notebooks: it panics on error.
func MustLoadPolicy(dir, backend string) *Policy {
	p, err := LoadPolicy(dir, backend)
	if err != nil {
		panic(err)
	}
	return p
}

func loadCheckpoint(ckdir, backend string) (*Policy, policyJSON, error) {
	var meta policyJSON
	b, err := os.ReadFile(filepath.Join(ckdir, policyFile))
	if err != nil {
		return nil, meta, err
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, meta, fmt.Errorf("reading %s: %w", policyFile, err)
	}
	if meta.Kind == kindPretrained {
		return nil, meta, errors.New("a checkpoint of a pretrained model (LoRA adapters or fine-tuned weights), not of a Tiny policy (load it with LoadPretrained, or train it with GRPO.Pretrained)")
	}
	if meta.Format != policyFormat {
		return nil, meta, fmt.Errorf("format %d; this build reads %d", meta.Format, policyFormat)
	}
	p, err := NewPolicy(meta.LM.Backend(backend))
	if err != nil {
		return nil, meta, err
	}
	err = catch(func() error {
		prev := p.store.Loader()
		defer p.store.SetLoader(prev)
		// Not Immediate(): in GoMLX v0.28.2 it looks existing variables up by their checkpoint
		// key and silently leaves them unset. Done() sets the existing variables (the weights);
		// the rest (optimizer state) is created from LoadedVariables.
		h, err := checkpoint.Load(p.store).Dir(ckdir).Done()
		if err != nil {
			return err
		}
		for key, val := range h.LoadedVariables() {
			path, ok := strings.CutPrefix(key, "var:")
			if !ok {
				continue
			}
			if p.store.GetVariable(path) != nil {
				continue
			}
			v, err := p.store.CreateVariable(path, val)
			if err != nil {
				return err
			}
			v.SetTrainable(false)
		}
		return nil
	})
	if err != nil {
		return nil, meta, err
	}
	if err := checkWeightsSaved(ckdir, p.cfg); err != nil {
		return nil, meta, err
	}
	p.mark = checkpointMark{Stage: meta.Stage, Step: meta.Step, SFTStep: meta.SFTStep}
	return p, meta, nil
}

// checkpointMark is what Save records about the run's progress in policy.json (set by the
// GRPO trainer before it saves).
type checkpointMark struct {
	Stage         string
	Step, SFTStep int
	// Kernels is what a loaded checkpoint recorded (CheckpointInfo.Kernels); a save records
	// the saving process's instead.
	Kernels string
}

// checkWeightsSaved verifies that the GoMLX checkpoint in ckdir holds every weight of cfg
// with its shape (a weight it lacks would silently keep its random initial value).
func checkWeightsSaved(ckdir string, cfg agrl.LM) error {
	files, _ := filepath.Glob(filepath.Join(ckdir, "checkpoint-*.json"))
	if len(files) != 1 {
		return fmt.Errorf("want one GoMLX checkpoint in %s, found %d", ckdir, len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return err
	}
	var saved struct {
		Variables []struct {
			ParameterName string
			Dimensions    []int
		}
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return err
	}
	dims := map[string][]int{}
	for _, v := range saved.Variables {
		dims[v.ParameterName] = v.Dimensions
	}
	for _, w := range (arch{cfg.Spec()}).weightSpecs() {
		d, ok := dims["var:"+model.JoinPath(lmScope, w.name)]
		if !ok {
			return fmt.Errorf("weight %s missing from the checkpoint", w.name)
		}
		if fmt.Sprint(d) != fmt.Sprint(w.dims) {
			return fmt.Errorf("weight %s saved with shape %v, the configuration says %v", w.name, d, w.dims)
		}
	}
	return nil
}

// Clone returns a new policy with the same configuration and a copy of the current weights
// (no optimizer state): the frozen reference model of a KL penalty, or a snapshot to compare
// against. It runs on the same backend.
func (p *Policy) Clone() (*Policy, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	q, err := NewPolicy(p.cfg)
	if err != nil {
		return nil, err
	}
	err = catch(func() error {
		for _, w := range p.arch.weightSpecs() {
			path := model.JoinPath(lmScope, w.name)
			val, err := p.store.GetVariable(path).Value()
			if err != nil {
				return err
			}
			data, err := tensors.CopyFlatData[float32](val)
			if err != nil {
				return err
			}
			if err := q.store.GetVariable(path).SetValue(tensors.FromFlatDataAndDimensions(data, w.dims...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agrl: Clone: %w", err)
	}
	return q, nil
}

// readMark reads the progress mark (stage and steps) recorded in a checkpoint's policy.json.
func readMark(ckpt string) (CheckpointInfo, error) {
	b, err := os.ReadFile(filepath.Join(ckpt, policyFile))
	if err != nil {
		return CheckpointInfo{}, err
	}
	var pj struct { // the mark's fields, common to Tiny and pretrained checkpoints
		Stage   string `json:"stage"`
		Step    int    `json:"step"`
		SFTStep int    `json:"sft_step"`
		Kernels string `json:"kernels"`
	}
	if err := json.Unmarshal(b, &pj); err != nil {
		return CheckpointInfo{}, err
	}
	return CheckpointInfo{Dir: ckpt, Stage: pj.Stage, Step: pj.Step, SFTStep: pj.SFTStep, Kernels: pj.Kernels}, nil
}

// Kernels names the CPU kernels this process computes with on the host: "avx512" or "avx2"
// (GOEXPERIMENT=simd builds on amd64 CPUs with those instructions) or "portable" (Go loops).
// Checkpoints saved by a process whose sums depend on them — on the go backend, or decoding
// on the host — record it (CheckpointInfo.Kernels): each kernel set sums in its own order, so
// a run resumed or replayed under another set continues correctly but not bit for bit as it
// would have under its own.
func Kernels() string { return kernelSet() }

// kernels is what the policy's checkpoints record as Kernels: this process's set on the go
// backend (the host path and the backend's own CPU kernels), "" on another backend.
func (p *Policy) kernels() string {
	if p.backend.String() == "go" {
		return Kernels()
	}
	return ""
}

// kernelChange says why a model computing with the kernel set now (a model's kernels: "" on
// another backend than the CPU's) does not continue bit for bit what a checkpoint saved under
// the set saved computed; "" when nothing says so (the same set, or a checkpoint that
// recorded none: an older build, or another backend).
func kernelChange(saved, now string) string {
	switch {
	case saved == "" || saved == now:
		return ""
	case now == "":
		return fmt.Sprintf("it was saved by a process computing with the %s CPU kernels, and this model computes on another backend", saved)
	default:
		return fmt.Sprintf("it was saved by a process computing with the %s kernels, and this one computes with the %s ones", saved, now)
	}
}
