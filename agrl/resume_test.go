package agrl

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
	"agrl.dev/internal/hubtest"
)

// TestLockRun: a run directory is held by one writer at a time; the second is refused at once
// with the holder's process id, and the lock is free again after Close.
func TestLockRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := LockRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockRun(dir)
	var le *RunLockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrRunLocked) || le.PID != os.Getpid() ||
		!strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, err := LockRun(dir)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	w2.Close()
}

func TestAdamWRejectsARateThatIsZeroInFloat32(t *testing.T) {
	err := NewAdamW().LR(1e-300).Validate()
	if err == nil || !strings.Contains(err.Error(), "0 in float32") {
		t.Errorf("lr 1e-300: %v", err)
	}
	if err := NewAdamW().LR(1e-30).Validate(); err != nil {
		t.Errorf("lr 1e-30 (a normal float32): %v", err)
	}
}

func toyGRPO() GRPO {
	return NewGRPO().Env(toyEnv{}).Rubric(NewRubric().Add("answer", ExactAnswer, 1)).Steps(10).Out("runs/a")
}

// TestResumeChanges: settings that change what is trained need the opt-in, each one named;
// steps, out and reporting intervals do not — except steps under a schedule that decays over
// the run's length.
func TestResumeChanges(t *testing.T) {
	cfg, err := asMap(toyGRPO().Resolved())
	if err != nil {
		t.Fatal(err)
	}
	binding, free, err := toyGRPO().LR(1e-3).Seed(7).Policy(TinyLM().Width(64)).Steps(20).Out("runs/./a").EvalEvery(5).ResumeChanges(cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := func(cs []SettingChange) (out []string) {
		for _, c := range cs {
			out = append(out, c.Setting)
		}
		return out
	}
	for _, want := range []string{"optimizer.lr", "seed", "policy.width", "policy.params", "policy.seed"} {
		if !strings.Contains(strings.Join(names(binding), " "), want) {
			t.Errorf("binding changes %v lack %s", names(binding), want)
		}
	}
	if got := strings.Join(names(free), " "); got != "eval_every out steps" {
		t.Errorf("free changes: %s", got)
	}
	for _, c := range binding {
		if c.Setting == "optimizer.lr" && c.String() != "optimizer.lr: 0.0003 → 0.001" {
			t.Errorf("change reads %q", c.String())
		}
	}
	msg := (&ResumeMismatchError{Dir: "runs/a", Changes: binding}).Error()
	for _, want := range []string{"optimizer.lr: 0.0003 → 0.001", "seed: 1 → 7", "--new-settings"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	// The same settings: nothing differs.
	if b, f, _ := toyGRPO().ResumeChanges(cfg); len(b)+len(f) != 0 {
		t.Errorf("same settings differ: %v %v", b, f)
	}
	// Under a cosine decay over the run, more steps change the remaining learning rates.
	cos := toyGRPO().Schedule(CosineLR, 0.1)
	cfg, _ = asMap(cos.Resolved())
	if b, _, _ := cos.Steps(20).ResumeChanges(cfg); len(b) != 1 || b[0].Setting != "steps" {
		t.Errorf("steps under a decaying schedule: %v", b)
	}
}

// TestPretrainedWeightsResume: the base weights' storage is part of the model (a float32
// checkpoint computes another model in bfloat16): a resume cannot change it, while where the
// rollouts decode may change.
func TestPretrainedWeightsResume(t *testing.T) {
	g := toyGRPO().Pretrained(Pretrained("models/m"))
	cfg, err := asMap(g.Resolved())
	if err != nil {
		t.Fatal(err)
	}
	binding, _, err := toyGRPO().Pretrained(Pretrained("models/m").Weights("bfloat16")).ResumeChanges(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := ModelChanges(binding); len(m) != 1 || m[0].Setting != "pretrained.weights" {
		t.Errorf("model changes %v, want pretrained.weights alone", m)
	}
	binding, free, err := toyGRPO().Pretrained(Pretrained("models/m").Decoding("graph")).ResumeChanges(cfg)
	if err != nil || len(binding) != 0 || len(free) != 1 || free[0].Setting != "pretrained.decoding" {
		t.Errorf("decoding: binding %v, free %v, %v", binding, free, err)
	}
}

// TestPretrainedChatFormatResume: the chat format is the token layout trained on, so a resume
// cannot change it; a bad name is a validation error that lists the known ones.
func TestPretrainedChatFormatResume(t *testing.T) {
	cfg, err := asMap(toyGRPO().Pretrained(Pretrained("models/m")).Resolved())
	if err != nil {
		t.Fatal(err)
	}
	binding, _, err := toyGRPO().Pretrained(Pretrained("models/m").ChatFormat("llama3")).ResumeChanges(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := ModelChanges(binding); len(m) != 1 || m[0].Setting != "pretrained.chat_format" {
		t.Errorf("model changes %v, want pretrained.chat_format alone", m)
	}
	err = Pretrained(t.TempDir()).ChatFormat("chatml").Validate()
	if err == nil || !strings.Contains(err.Error(), `chat format "chatml"; want one of llama3, qwen2.5, qwen3, qwen3-no-thinking`) {
		t.Errorf("bad chat format: %v", err)
	}
}

// TestPretrainedTargetsResume: LoRA targets are kept in llm.LoRAModules' order, so a resume
// that lists them in another order changes nothing; another set is a model change; an
// unknown name stays for Validate to name.
func TestPretrainedTargetsResume(t *testing.T) {
	cfg, err := asMap(toyGRPO().Pretrained(Pretrained("models/m").Targets("v_proj", "q_proj")).Resolved())
	if err != nil {
		t.Fatal(err)
	}
	binding, _, err := toyGRPO().Pretrained(Pretrained("models/m").Targets("q_proj", "v_proj")).ResumeChanges(cfg)
	if err != nil || len(binding) != 0 {
		t.Errorf("the same targets in another order: changes %v, %v", binding, err)
	}
	binding, _, err = toyGRPO().Pretrained(Pretrained("models/m").Targets("q_proj", "k_proj")).ResumeChanges(cfg)
	if m := ModelChanges(binding); err != nil || len(m) != 1 || m[0].Setting != "pretrained.lora_targets" {
		t.Errorf("other targets: model changes %v, %v", m, err)
	}
	got := Pretrained("m").Targets("down_proj", "bogus", "q_proj").Spec().LoRA.TargetModules
	if !slices.Equal(got, []string{"q_proj", "down_proj", "bogus"}) {
		t.Errorf("targets %v", got)
	}
}

// TestPretrainedComputeResume: bfloat16 compute changes what is computed, so a resume cannot
// change it; a bad dtype is a validation error.
func TestPretrainedComputeResume(t *testing.T) {
	cfg, err := asMap(toyGRPO().Pretrained(Pretrained("models/m")).Resolved())
	if err != nil {
		t.Fatal(err)
	}
	binding, _, err := toyGRPO().Pretrained(Pretrained("models/m").Compute("bfloat16")).ResumeChanges(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := ModelChanges(binding); len(m) != 1 || m[0].Setting != "pretrained.compute" {
		t.Errorf("model changes %v, want pretrained.compute alone", m)
	}
	if binding, _, _ := toyGRPO().Pretrained(Pretrained("models/m").Compute("float32")).ResumeChanges(cfg); len(binding) != 0 {
		t.Errorf("float32 named explicitly: %v", binding)
	}
	if err := Pretrained(t.TempDir()).Compute("fp8").Validate(); err == nil || !strings.Contains(err.Error(), `compute "fp8"`) {
		t.Errorf("Compute(fp8): %v", err)
	}
}

// TestPretrainedCallMemoryResume: the call memory only changes how batches are split (the
// rounding of the sums), so a resume may change it freely; the default is not recorded, so
// configurations written before the setting existed resume unchanged; out of range is a
// validation error.
func TestPretrainedCallMemoryResume(t *testing.T) {
	cfg, err := asMap(toyGRPO().Pretrained(Pretrained("models/m")).Resolved())
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfg["pretrained"].(map[string]any); !ok || p["call_memory_gib"] != nil {
		t.Errorf("the default call memory recorded: %v", cfg["pretrained"])
	}
	binding, free, err := toyGRPO().Pretrained(Pretrained("models/m").CallMemory(12)).ResumeChanges(cfg)
	if err != nil || len(binding) != 0 || len(free) != 1 || free[0].Setting != "pretrained.call_memory_gib" {
		t.Errorf("call memory: binding %v, free %v, %v", binding, free, err)
	}
	for _, gib := range []float64{0, 0.1, -4, 5000} {
		if err := Pretrained(t.TempDir()).CallMemory(gib).Validate(); err == nil || !strings.Contains(err.Error(), "call memory") {
			t.Errorf("CallMemory(%v): %v", gib, err)
		}
	}
	if err := Pretrained(t.TempDir()).CallMemory(0.5).Validate(); err != nil && strings.Contains(err.Error(), "call memory") {
		t.Errorf("CallMemory(0.5): %v", err)
	}
}

// A run the CLI recorded with a hub id's download directory (as it did before ids were
// recorded) resumes with the id, and the other way round; another directory is another model.
func TestPretrainedHubIDResume(t *testing.T) {
	srv := hubtest.Serve(t, map[string]string{"agrl/m": filepath.Join("..", "testdata", "tiny-qwen3")})
	t.Setenv("AGRL_HUB_CACHE", t.TempDir())
	dir, err := hf.Download(context.Background(), "agrl/m", hf.HubOptions{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stored, next string }{{dir, "agrl/m"}, {"agrl/m", dir}} {
		cfg, err := asMap(toyGRPO().Pretrained(Pretrained(c.stored)).Resolved())
		if err != nil {
			t.Fatal(err)
		}
		binding, _, err := toyGRPO().Pretrained(Pretrained(c.next)).ResumeChanges(cfg)
		if err != nil || len(binding) != 0 {
			t.Errorf("%s → %s: %v, %v", c.stored, c.next, binding, err)
		}
	}
	cfg, _ := asMap(toyGRPO().Pretrained(Pretrained(t.TempDir())).Resolved())
	binding, _, _ := toyGRPO().Pretrained(Pretrained("agrl/m")).ResumeChanges(cfg)
	if !slices.ContainsFunc(ModelChanges(binding), func(c SettingChange) bool { return c.Setting == "pretrained.model" }) {
		t.Errorf("another directory → the id: %v", binding)
	}
}

// asMap is a configuration as config.json stores it, decoded.
func asMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}

// TestRewind: a run directory returned to a checkpoint keeps the metrics, evaluations,
// trajectories and step records up to it, each once, and drops a torn last line.
func TestRewind(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := LockRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.WriteConfig(map[string]any{"env": "toy"}); err != nil {
		t.Fatal(err)
	}
	ep, _ := Play(toyEnv{}, toyTask, toyExpert, Limits{})
	for step := 1; step <= 5; step++ {
		if err := w.LogMetrics(Metrics{"step": float64(step), "kl": math.NaN()}); err != nil {
			t.Fatal(err)
		}
		if err := w.LogEval(EvalRecord{Step: step, Split: Dev}); err != nil {
			t.Fatal(err)
		}
		if err := w.SaveTrajectories(step, []*Episode{ep}); err != nil {
			t.Fatal(err)
		}
		if err := w.SaveStepRecord(&StepRecord{Step: step}); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := os.OpenFile(filepath.Join(dir, RunEvalFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step": 6, "spl`) // torn by a kill
	f.Close()
	if err := w.Rewind(3, nil); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ms, es []int
	for _, m := range r.Metrics {
		ms = append(ms, m.Step())
		if !math.IsNaN(m["kl"]) {
			t.Error("NaN lost in the rewrite")
		}
	}
	for _, e := range r.Evals {
		es = append(es, e.Step)
	}
	trajs, _ := r.TrajectorySteps()
	recs, _ := r.StepRecordSteps()
	want := []int{1, 2, 3}
	if !reflect.DeepEqual(ms, want) || !reflect.DeepEqual(es, want) || !reflect.DeepEqual(trajs, want) || !reflect.DeepEqual(recs, want) || r.Skipped != 0 {
		t.Errorf("after Rewind(3): metrics %v, evals %v, trajectories %v, step records %v, skipped %d", ms, es, trajs, recs, r.Skipped)
	}
	if err := w.Rewind(3, func(e EvalRecord) bool { return e.Step < 2 }); err != nil {
		t.Fatal(err)
	}
	if r, _ := OpenRun(dir); len(r.Evals) != 1 {
		t.Errorf("keepEval ignored: %d records", len(r.Evals))
	}
}

// TestBeforeAfterAcrossSettings: a resume that changes what an evaluation measures leaves the
// start's evaluation out of the before/after table until the settings are those it was made
// under again; changes to how the run trains do not.
func TestBeforeAfterAcrossSettings(t *testing.T) {
	ch := func(setting string, old, new any) SettingChange {
		return SettingChange{Setting: setting, Old: old, New: new}
	}
	all := []SettingChange{ch("steps", 2.0, 3.0), ch("optimizer.lr", 1e-4, 3e-4), ch("warm_start.sft.steps", 10.0, 20.0),
		ch("kl", 0.01, 0.0), ch("eval_every", 5.0, 10.0), ch("pretrained.micro_batch", 1.0, 2.0),
		ch("eval_tasks", 64.0, 16.0), ch("seed", 1.0, 2.0), ch("env", "calc", "multihop"), ch("mix.easy", 0.2, 0.5),
		ch("rubric", nil, "x"), ch("max_tokens", 512.0, 256.0), ch("eval_temperature", 0.3, 0.5), ch("optimizers", 1.0, 2.0)}
	var names []string
	for _, c := range EvalChanges(all) {
		names = append(names, c.Setting)
	}
	want := []string{"eval_tasks", "seed", "env", "mix.easy", "rubric", "max_tokens", "eval_temperature", "optimizers"}
	if !slices.Equal(names, want) {
		t.Errorf("EvalChanges: %v, want %v", names, want)
	}

	rec := func(s Split, label string, settings int, success float64) EvalRecord {
		return EvalRecord{Split: s, Label: label, Settings: settings, EvalResult: EvalResult{Success: success}}
	}
	r := &Run{
		History: []ConfigChange{
			{Step: 2, Changes: []SettingChange{ch("eval_tasks", 64.0, 16.0), ch("steps", 2.0, 3.0)}},
			{Step: 3, Changes: []SettingChange{ch("optimizer.lr", 1e-4, 3e-4)}},
			{Step: 4, Changes: []SettingChange{ch("eval_tasks", 16.0, 64.0)}},
		},
		Evals: []EvalRecord{rec(Dev, LabelSFT, 0, 0.5), rec(Test, LabelSFT, 0, 0.4), rec(Dev, LabelFinal, 1, 0.9), rec(Test, LabelFinal, 3, 0.8)},
	}
	if got := r.EvalChangesBetween(0, 1); len(got) != 1 || got[0].String() != "eval_tasks: 64 → 16" {
		t.Errorf("EvalChangesBetween(0, 1) = %v", got)
	}
	if got := r.EvalChangesBetween(1, 2); len(got) != 0 {
		t.Errorf("a change of learning rate alone: %v", got)
	}
	if got := r.EvalChangesBetween(0, 3); len(got) != 0 {
		t.Errorf("eval_tasks changed and changed back: %v", got)
	}
	before, after := r.BeforeAfter()
	if _, ok := before[Dev]; ok || len(after) != 2 {
		t.Errorf("dev's start (64 tasks) and final (16 tasks) compared: before %v after %v", before, after)
	}
	if b, ok := before[Test]; !ok || b.Success != 0.4 {
		t.Errorf("test's final at revision 3 (64 tasks again, another learning rate) is not compared with its start: %v", before)
	}
	if got := r.BeforeAfterChanges(); len(got) != 1 || got[0].Setting != "eval_tasks" {
		t.Errorf("BeforeAfterChanges = %v", got)
	}
	// Back to 64 tasks: the final evaluation compares again.
	r.Evals = append(r.Evals, rec(Dev, LabelFinal, 3, 0.95))
	if before, _ := r.BeforeAfter(); before[Dev].Success != 0.5 || len(r.BeforeAfterChanges()) != 0 {
		t.Errorf("settings restored: before %v, changes %v", before, r.BeforeAfterChanges())
	}

	// A change of the mix's weights changes the dev and test tasks, not the OOD ones (all
	// Extreme, drawn whatever the weights): OOD's before stays; a change of the mix's seed
	// (the run's seed) changes every split.
	r = &Run{
		History: []ConfigChange{{Step: 2, Changes: []SettingChange{ch("mix.easy", 0.2, 0.5), ch("mix.hard", 0.3, 0.0)}}},
		Evals: []EvalRecord{rec(Dev, LabelSFT, 0, 0.5), rec(OOD, LabelSFT, 0, 0.1),
			rec(Dev, LabelFinal, 1, 0.9), rec(OOD, LabelFinal, 1, 0.3)},
	}
	if before, _ := r.BeforeAfter(); len(before) != 1 || before[OOD].Success != 0.1 {
		t.Errorf("after a change of the mix's weights: before %v, want OOD's only", before)
	}
	if got := r.BeforeAfterChanges(); len(got) != 2 || got[0].Setting != "mix.easy" || got[1].Setting != "mix.hard" {
		t.Errorf("BeforeAfterChanges after a change of the mix = %v", got)
	}
	r.History = append(r.History, ConfigChange{Step: 3, Changes: []SettingChange{ch("seed", 1.0, 2.0)}})
	r.Evals = append(r.Evals, rec(OOD, LabelFinal, 2, 0.3))
	if before, _ := r.BeforeAfter(); len(before) != 0 {
		t.Errorf("after a change of the seed: before %v, want none", before)
	}
}
