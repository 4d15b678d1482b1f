package learn

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/envs/calc"
	"agrl.dev/internal/hubtest"
)

// agrl.Pretrained takes a hub id: building the value and validating it contact nothing; the
// learner downloads the model once (progress as lines), a run records the id and the
// architecture read from the download, and resumes from the cache with the hub gone.
func TestPretrainedFromHub(t *testing.T) {
	srv := hubtest.Serve(t, map[string]string{"agrl/tiny-qwen3": tinyQwen3(t)})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("AGRL_HUB_CACHE", t.TempDir())

	p := agrl.Pretrained("agrl/tiny-qwen3").LoRA(4, 8).MicroBatch(4)
	if s := p.Spec(); !s.Hub || s.Dir != "agrl/tiny-qwen3" {
		t.Fatalf("spec %+v: want the hub id", s)
	}
	if err := p.Validate(); err != nil || srv.Requests() != 0 {
		t.Fatalf("Validate before the download: %v, %d requests", err, srv.Requests())
	}
	var progress bytes.Buffer
	dir, err := fetchHub("agrl/tiny-qwen3", agrl.Pretrained("agrl/tiny-qwen3").Spec(), &progress)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"downloading agrl/tiny-qwen3: config.json\n", "downloading agrl/tiny-qwen3: model.safetensors: done, "} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if cached, ok := hf.Cached("agrl/tiny-qwen3", hf.HubOptions{}); !ok || cached != dir {
		t.Errorf("Cached = %q, %v; want %q", cached, ok, dir)
	}
	// Once cached, Validate reads the download's config.json.
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["GPT2LMHeadModel"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "GPT2LMHeadModel") {
		t.Errorf("Validate with a cached config.json of another architecture: %v", err)
	}

	// A run on a fresh cache: Build downloads, config.json records the id and what the
	// download's config.json says; stopped after step 1, it resumes with the hub gone.
	t.Setenv("AGRL_HUB_CACHE", t.TempDir())
	out := filepath.Join(t.TempDir(), "run")
	g := agrl.NewGRPO().Env(calc.New()).Rubric(calc.Rubric()).Pretrained(p).Screen(0).WarmStartSteps(0).
		Group(2).TasksPerStep(1).MaxTurns(1).MaxActionTokens(4).EvalTasks(1).EvalEvery(0).Steps(2).Seed(1).Out(out)
	trainUntil(t, g, 1)
	var cfg struct {
		Pretrained agrl.PretrainedRecord `json:"pretrained"`
	}
	b, _ := os.ReadFile(filepath.Join(out, agrl.RunConfigFile))
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.Pretrained.Model != "agrl/tiny-qwen3" || cfg.Pretrained.Architecture != "Qwen3ForCausalLM" {
		t.Fatalf("config.json records %+v (%v)", cfg.Pretrained, err)
	}
	srv.Close()
	n := srv.Requests()
	tr, err := Build(g)
	if err != nil {
		t.Fatalf("resume with the hub gone: %v", err)
	}
	if tr.StepNumber() != 1 || srv.Requests() != n {
		t.Errorf("resumed at step %d, %d requests", tr.StepNumber(), srv.Requests()-n)
	}
	tr.Close()
}
