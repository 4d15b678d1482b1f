package agrl

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"agrl.dev/agrl/hf"
)

// Resuming a run.
//
// A run directory that holds a checkpoint is resumed by the next Build (or `agrl train`) that
// names it. Before resuming, the new resolved configuration is compared with the stored
// config.json setting by setting (dotted JSON paths: "optimizer.lr", "policy.width",
// "warm_start.sft.steps"):
//
//   - Settings that change what is trained (env, rubric, mix, model, warm start, optimizer, seed,
//     GRPO coefficients, sampling, limits, evaluation tasks…) must match: a difference is an error
//     naming each setting, old → new, unless ResumeWithNewSettings(true) says to continue with the
//     new ones.
//   - Settings that only say how long the run goes, where it is written and how often it reports
//     may change freely: "steps" (extending or shortening a run is what resuming is for — unless
//     the learning-rate schedule decays over the run's length, whose remaining steps it would
//     change), "out" (the same directory spelled differently), "eval_every", "checkpoint_every",
//     "trajectories_every" and "policy.backend" (the same model on another backend).
//
// Either way config.json then holds the new configuration and config_history.jsonl one line
// (a ConfigChange) naming every change and the step it took effect at, so the record never
// claims settings the run did not have. Callbacks (OnStep, Progress) are not settings.
//
// Each evaluation records the revision of the settings it was made under (EvalRecord.Settings,
// the lines config_history.jsonl then held). When a resume changes what an evaluation measures
// (EvalChanges: the env, rubric, mix, evaluation tasks, temperature or seed, the episode's
// limits), the evaluations made before no longer compare with those after: Run.BeforeAfter
// leaves out the start's evaluation (Run.BeforeAfterChanges names why, and the trainer warns
// when it resumes), and StopOnPlateau compares only the dev evaluations made under the settings
// in force.

// RunConfigHistoryFile records, one JSON line each, the settings changed when a run resumed.
const RunConfigHistoryFile = "config_history.jsonl"

// SettingChange is one setting whose value differs between two configurations.
type SettingChange struct {
	// Setting is the dotted path of the setting in config.json ("optimizer.lr").
	Setting string `json:"setting"`
	// Old and New are its JSON values (nil: absent).
	Old any `json:"old"`
	New any `json:"new"`
}

// String reads "setting: old → new" (values as JSON).
func (c SettingChange) String() string {
	return fmt.Sprintf("%s: %s → %s", c.Setting, jsonText(c.Old), jsonText(c.New))
}

// JoinChanges reads "setting: old → new; …", the changes in order.
func JoinChanges(changes []SettingChange) string {
	list := make([]string, len(changes))
	for i, c := range changes {
		list[i] = c.String()
	}
	return strings.Join(list, "; ")
}

func jsonText(v any) string {
	if v == nil {
		return "(unset)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// ConfigChange is one line of config_history.jsonl: the settings a resumed run changed.
type ConfigChange struct {
	Time time.Time `json:"time"`
	// Step is the GRPO step the new settings apply from (the checkpoint resumed).
	Step int `json:"step"`
	// Changes lists every setting that differs from the previous configuration.
	Changes []SettingChange `json:"changes"`
	// NewSettings is true when the changes needed the explicit opt-in
	// (GRPO.ResumeWithNewSettings, `agrl train --new-settings`).
	NewSettings bool `json:"new_settings"`
}

// ResumeWithNewSettings lets a resumed run continue with settings that differ from those it was
// started with (default false: Build refuses and names each difference). The changes are
// recorded in the run directory (config_history.jsonl); see RunConfigHistoryFile.
func (g GRPO) ResumeWithNewSettings(on bool) GRPO { g.s.ResumeWithNewSettings = on; return g }

// DiffSettings compares two configurations through their JSON encodings and returns every
// setting (dotted path) whose value differs, sorted by path. Objects are compared key by key;
// lists and scalars as a whole.
func DiffSettings(old, new any) ([]SettingChange, error) {
	a, err := flatJSON(old)
	if err != nil {
		return nil, err
	}
	b, err := flatJSON(new)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []SettingChange
	for k := range keys {
		if !reflect.DeepEqual(a[k], b[k]) {
			out = append(out, SettingChange{Setting: k, Old: a[k], New: b[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Setting < out[j].Setting })
	return out, nil
}

// flatJSON encodes v as JSON and flattens its objects into dotted paths.
func flatJSON(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("agrl: encoding a configuration: %w", err)
	}
	var root any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("agrl: decoding a configuration: %w", err)
	}
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && (len(m) > 0 || prefix == "") {
			for k, x := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		out[prefix] = v
	}
	walk("", root)
	return out, nil
}

// resumeFree are the settings a resume may change without the opt-in (see the comment above).
var resumeFree = []string{"steps", "out", "eval_every", "checkpoint_every", "trajectories_every", "policy.backend",
	"pretrained.backend", "pretrained.decoding", "pretrained.micro_batch", "pretrained.call_memory_gib"}

// ResumeChanges compares the configuration a run directory stores (config.json, decoded) with
// g's and splits the differences into those that need ResumeWithNewSettings (binding) and
// those a resume may make freely (see the package comment on resuming). Changes to the model
// are binding and, in addition, listed by ModelChanges: no opt-in can apply them to a resumed
// run, whose checkpoint's weights are the model.
func (g GRPO) ResumeChanges(stored any) (binding, free []SettingChange, err error) {
	next := g.Resolved()
	all, err := DiffSettings(stored, next)
	if err != nil {
		return nil, nil, err
	}
	flat, err := flatJSON(next)
	if err != nil {
		return nil, nil, err
	}
	// A schedule that decays over the run's length (no horizon of its own) gives the remaining
	// steps other learning rates when Steps changes.
	decaying := flat["optimizer.schedule"] != nil && flat["optimizer.schedule"] != ConstantLR.String() &&
		(flat["optimizer.horizon"] == nil || flat["optimizer.horizon"] == 0.0)
	for _, c := range all {
		if c.Setting == "pretrained.model" && sameHubModel(c.Old, c.New) {
			continue
		}
		if slices.Contains(resumeFree, c.Setting) && !(c.Setting == "steps" && decaying) {
			free = append(free, c)
		} else {
			binding = append(binding, c)
		}
	}
	return binding, free, nil
}

// sameHubModel reports whether two recorded models are one: a hub id and the directory its
// download is cached in (runs the CLI made before ids were recorded hold the directory).
func sameHubModel(a, b any) bool {
	x, ok1 := a.(string)
	y, ok2 := b.(string)
	if !ok1 || !ok2 {
		return false
	}
	for _, p := range [][2]string{{x, y}, {y, x}} {
		if dir, ok := hf.Cached(p[0], hf.HubOptions{}); ok && filepath.Clean(dir) == filepath.Clean(p[1]) {
			return true
		}
	}
	return false
}

// ResumeMismatchError is Build's error when a run directory is resumed with settings that differ
// from those it was started with.
type ResumeMismatchError struct {
	Dir     string
	Changes []SettingChange
	// Model is true when the changes are to the model itself (ModelChanges), which no opt-in
	// allows.
	Model bool
}

// Error names every differing setting and the ways forward.
func (e *ResumeMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agrl: %s holds a run with other settings; resuming it would continue that run under a record of settings it was not trained with:", e.Dir)
	for _, c := range e.Changes {
		b.WriteString("\n  " + c.String())
	}
	if e.Model {
		b.WriteString("\nthe model cannot change in a resumed run (its checkpoint's weights are the model): " +
			"use the same model settings, or start a new run in another directory (From the checkpoint to keep the weights)")
		return b.String()
	}
	b.WriteString("\nuse the same settings to resume it, another directory to start a new run, " +
		"or ResumeWithNewSettings(true) (agrl train --new-settings) to continue it with the new settings (recorded in " +
		RunConfigHistoryFile + ")")
	return b.String()
}

// RecordConfigChange appends c to config_history.jsonl.
func (w *RunWriter) RecordConfigChange(c ConfigChange) error {
	return w.appendLine(RunConfigHistoryFile, c)
}

// ConfigHistory reads config_history.jsonl of a run directory (nil when the settings never
// changed).
func ConfigHistory(dir string) ([]ConfigChange, error) {
	var out []ConfigChange
	_, _, err := readJSONL(filepath.Join(dir, RunConfigHistoryFile), func(line []byte) error {
		var c ConfigChange
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// trainingOnly are the settings (dotted paths; a trailing "." names every setting under it)
// that change how a run trains or reports but not what its evaluations measure: a policy
// evaluated before such a change and one evaluated after it were measured alike. Every other
// setting — the env, its tools, rubric and mix, the evaluation's tasks, temperature and seed,
// the turn and token limits, the model — counts as changing the measure (EvalChanges).
var trainingOnly = []string{"steps", "out", "eval_every", "checkpoint_every", "trajectories_every",
	"policy.backend", "policy.seed", "pretrained.backend", "pretrained.decoding", "pretrained.micro_batch", "pretrained.call_memory_gib",
	"from", "group", "tasks_per_step", "clip_low", "clip_high", "kl", "kl_estimator", "optimizer.", "epochs", "minibatches",
	"advantage_norm", "loss_norm", "temperature", "dynamic_sampling", "curriculum", "screen", "gamma",
	"stop_on_plateau", "turn_advantages", "mask_truncated", "warm_start."}

// EvalChanges returns those of changes that alter what an evaluation measures (the env, its
// rubric or mix, the evaluation's tasks, temperature or seed, the limits of an episode…): an
// evaluation made before them is not comparable with one made after. Changes to how the run
// trains or reports (the optimizer, GRPO's coefficients, the warm start, how often it
// evaluates) are left out.
func EvalChanges(changes []SettingChange) []SettingChange {
	var out []SettingChange
	for _, c := range changes {
		free := slices.ContainsFunc(trainingOnly, func(p string) bool {
			return c.Setting == p || strings.HasSuffix(p, ".") && strings.HasPrefix(c.Setting, p)
		})
		if !free {
			out = append(out, c)
		}
	}
	return out
}

// splitEvalChanges returns those of changes to the evaluation settings (EvalChanges) that alter
// split's tasks: all of them but for OOD, whose tasks are all Extreme, drawn whatever the mix's
// weights (Mix.Tasks), so that a change of the mix leaves them alike.
func splitEvalChanges(s Split, changes []SettingChange) []SettingChange {
	if s != OOD {
		return changes
	}
	return slices.DeleteFunc(slices.Clone(changes), func(c SettingChange) bool {
		return c.Setting == "mix" || strings.HasPrefix(c.Setting, "mix.")
	})
}

// EvalChangesBetween returns the changes to the evaluation settings (EvalChanges) that
// config_history.jsonl records between two settings revisions (EvalRecord.Settings): those of
// its lines from+1 to to. A setting changed twice is named once, from its first old value to
// its last new one; one changed and changed back is left out.
func (r *Run) EvalChangesBetween(from, to int) []SettingChange {
	return EvalChangesIn(r.History, from, to)
}

// EvalChangesIn is Run.EvalChangesBetween on a history read with ConfigHistory.
func EvalChangesIn(history []ConfigChange, from, to int) []SettingChange {
	if from > to {
		from, to = to, from
	}
	from, to = max(from, 0), min(to, len(history))
	var out []SettingChange
	for _, line := range history[from:to] {
		for _, c := range EvalChanges(line.Changes) {
			if k := slices.IndexFunc(out, func(x SettingChange) bool { return x.Setting == c.Setting }); k >= 0 {
				out[k].New = c.New
				continue
			}
			out = append(out, c)
		}
	}
	out = slices.DeleteFunc(out, func(c SettingChange) bool { return reflect.DeepEqual(c.Old, c.New) })
	sort.Slice(out, func(i, j int) bool { return out[i].Setting < out[j].Setting })
	return out
}

// ModelChanges returns the changes to the model's shape or tokenizer ("policy.*" other than
// its backend and initialisation seed): a resumed run keeps the model of its checkpoint, so
// these cannot be resumed with, even with ResumeWithNewSettings. (Start a new run From the
// checkpoint to reuse its weights.)
func ModelChanges(changes []SettingChange) []SettingChange {
	var out []SettingChange
	for _, c := range changes {
		if strings.HasPrefix(c.Setting, "policy.") && c.Setting != "policy.backend" && c.Setting != "policy.seed" ||
			c.Setting == "pretrained" || strings.HasPrefix(c.Setting, "pretrained.") && !slices.Contains(resumeFree, c.Setting) {
			out = append(out, c)
		}
	}
	return out
}
