package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/envs/calc"
	"agrl.dev/internal/hubtest"
)

// fixture is the repository's tiny pretrained-format model (testdata/tiny-qwen3).
var fixture = filepath.Join("..", "..", "..", "testdata", "tiny-qwen3")

// TestModelRandomWritesTheFixture: testdata/tiny-qwen3 is exactly what `agrl model random`
// writes (so it can be regenerated, and never drifts from the generator), and it loads with the
// Qwen3 chat format recognised from its chat template.
func TestModelRandomWritesTheFixture(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	code, stdout, stderr := runCLI("model", "random", "-shape", "tiny-qwen3", "-vocab", "320", "-context", "2048",
		"-tokenizer", filepath.Join("..", "..", "llm", "agent", "testdata", "tokenizer.json"), "-out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "119232 parameters") {
		t.Errorf("output: %s", stdout)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		a, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(fixture, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("testdata/tiny-qwen3/%s differs from what agrl model random writes (see testdata/tiny-qwen3/README.md)", f)
		}
	}
	p, err := agent.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if p.Format().Name() != "qwen3" {
		t.Errorf("fixture format %s, want qwen3 (from its chat template)", p.Format().Name())
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	tok := filepath.Join(fixture, "tokenizer.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"model", "random", "-shape", "gpt-5", "-tokenizer", "x", "-out", fresh}, "gpt-5"},
		{[]string{"model", "random", "-shape", "tiny-qwen3", "-out", fresh}, "-tokenizer is required"},
		{[]string{"model", "random", "-shape", "tiny-qwen3", "-tokenizer", tok, "-out", fresh}, "312 ids"}, // > 256
		{[]string{"model", "random", "-shape", "tiny-qwen3", "-tokenizer", tok, "-vocab", "1000000000000", "-out", fresh}, "vocab_size is 1000000000000; want at most"},
		{[]string{"model", "random", "-shape", "tiny-qwen3", "-tokenizer", tok, "-vocab", "320", "-out", out}, "already holds a model (config.json"},
		{[]string{"model", "random", "-shape", "tiny-qwen3", "-tokenizer", tok, "-vocab", "320", "-out", filepath.Join(out, "config.json")}, "is a file"},
		{[]string{"model", "nope"}, `unknown subcommand "nope"`},
		{[]string{"model", "export", "-run", out}, "-run and -out are required"},
	} {
		if code, _, stderr := runCLI(c.args...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 (usage) and %q: %s", c.args, code, c.want, stderr)
		}
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused command created %s (%v)", fresh, err)
	}
}

// TestTrainPretrained: `agrl train -model DIR` trains LoRA adapters of the fixture end to end
// (run directory, before/after table, report), `agrl eval` evaluates the run's checkpoint, and
// `agrl model export` writes PEFT adapters and a merged model that read back.
func TestTrainPretrained(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI("train", "--env", "calc", "--model", fixture, "--lora-rank", "4", "--lora-alpha", "8",
		"--lora-dropout", "0.1", "--lora-targets", "down_proj,q_proj, v_proj", "--micro-batch", "4", "--steps", "2", "--group", "4", "--tasks", "1", "--eval-tasks", "2", "--eval-every", "0",
		"--max-action-tokens", "8", "--decoding", "graph", "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"2 steps", "before → after", "report:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train output lacks %q:\n%s", want, stdout)
		}
	}
	run, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if pc := run.Config.Pretrained; pc == nil || pc.Rank != 4 || pc.Dropout != 0.1 || !slices.Equal(pc.Targets, []string{"q_proj", "v_proj", "down_proj"}) ||
		pc.Decoding != "graph" || run.Config.WarmStart != nil || run.Config.Screen != 0 {
		t.Fatalf("config: pretrained %+v, warm start %+v, screen %d", pc, run.Config.WarmStart, run.Config.Screen)
	}
	// The trained adapters act in agrl play, in the model's own format.
	prev := stdin
	stdin = strings.NewReader(":task 6*7\n:step\n:why\n:quit\n")
	code, stdout, stderr = runCLI("play", "--run", out, "--temperature", "0")
	stdin = prev
	if code != 0 || !strings.Contains(stdout, "agent: "+out+" at ckpt-") || !strings.Contains(stdout, "(GRPO step 2)") ||
		!strings.Contains(stdout, "Compute: 6*7\n") || !strings.Contains(stdout, "turn 1> :step\nagent: ") || !strings.Contains(stdout, "reward ") ||
		!strings.Contains(stdout, "turn 1 as the agent reads it, token by token") {
		t.Fatalf("play -run on a pretrained run: exit %d: %s\n%q", code, stderr, stdout)
	}
	code, stdout, stderr = runCLI("eval", "--run", out, "--split", "test", "--n", "2")
	if code != 0 || !strings.Contains(stdout, "(GRPO step 2)") {
		t.Fatalf("eval: exit %d: %s %s", code, stdout, stderr)
	}
	if code, stdout, stderr = runCLI("eval", "--run", out, "--split", "test", "--n", "2", "--backend", "go:ops_sequential"); code != 0 {
		t.Fatalf("eval --backend: exit %d: %s %s", code, stdout, stderr)
	}
	if code, _, stderr = runCLI("eval", "--run", out, "--backend", "tpu:magic"); code != 2 {
		t.Errorf("eval with an unknown backend: exit %d, want 2: %s", code, stderr)
	}
	peft := filepath.Join(t.TempDir(), "peft")
	if code, _, stderr := runCLI("model", "export", "-run", out, "-out", peft); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	if code, _, stderr := runCLI("model", "export", "-run", out, "-out", merged, "-merged"); code != 0 {
		t.Fatalf("export -merged: exit %d: %s", code, stderr)
	}
	// Exporting into the run, a model or an earlier export is refused, and leaves them as they were.
	runConfig, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{{out, "a training run"}, {fixture, "a model"}, {peft, "files"}} {
		if code, _, stderr := runCLI("model", "export", "-run", out, "-out", c.dir, "-merged"); code != 2 || !strings.Contains(stderr, "already holds "+c.want) {
			t.Errorf("export -out %s: exit %d, want 2 and %q: %s", c.dir, code, c.want, stderr)
		}
	}
	if now, err := os.ReadFile(filepath.Join(out, "config.json")); err != nil || !bytes.Equal(now, runConfig) {
		t.Fatalf("the run's config.json changed (%v)", err)
	}
	base, err := llm.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	a, err := llm.LoadAdapters(peft, base)
	if err != nil {
		t.Fatal(err)
	}
	adapted, err := base.WithAdapters(a)
	if err != nil {
		t.Fatal(err)
	}
	m, err := llm.Load(merged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Logits([]int32{296, 72, 105}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(merged, "tokenizer.json")); err != nil {
		t.Error("merged model has no tokenizer.json")
	}
	// The exported adapters are the checkpoint's, and the merged model computes base + them.
	ck, err := llm.LoadAdapters(filepath.Join(out, "checkpoints", strings.TrimSpace(readFile(t, filepath.Join(out, "checkpoints", "LATEST")))), base)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range a.Params() {
		if !slices.Equal(p.Data, ck.Params()[i].Data) {
			t.Fatalf("exported %s differs from the checkpoint's", p.Name)
		}
	}
	ids := []int32{297, 72, 105, 33, 298}
	want, _ := adapted.Logits(ids)
	got, _ := m.Logits(ids)
	for i := range want {
		for j := range want[i] {
			if d := want[i][j] - got[i][j]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("merged logits differ from base + adapters at %d,%d by %g", i, j, d)
			}
		}
	}
	// A Tiny flag with -model is a usage error.
	if code, _, stderr := runCLI("train", "--model", fixture, "--screen", "16", "--out", filepath.Join(t.TempDir(), "x")); code != 2 || !strings.Contains(stderr, "-screen does not apply") {
		t.Errorf("-model with -screen: exit %d: %s", code, stderr)
	}
}

// TestTrainPretrainedFull: `agrl train -model DIR -full` fully fine-tunes the fixture (every
// weight), `agrl play` acts with the trained weights, and `agrl model export -merged` writes
// them (the checkpoint's, bit for bit); export without -merged and the LoRA flags with -full,
// or -full without -model, are usage errors.
func TestTrainPretrainedFull(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI("train", "--env", "calc", "--model", fixture, "--full", "--lr", "1e-3",
		"--micro-batch", "4", "--steps", "2", "--group", "4", "--tasks", "1", "--eval-tasks", "2", "--eval-every", "0",
		"--max-action-tokens", "8", "--out", out)
	if code != 0 {
		t.Fatalf("train -full: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "full fine-tuning: ") || !strings.Contains(stdout, "before → after") {
		t.Errorf("train -full output:\n%s\n%s", stderr, stdout)
	}
	run, err := agrl.OpenRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if run.Config.Pretrained == nil || !run.Config.Pretrained.Full {
		t.Fatalf("config: pretrained %+v, want full fine-tuning", run.Config.Pretrained)
	}
	prev := stdin
	stdin = strings.NewReader(":task 6*7\n:step\n:quit\n")
	code, stdout, stderr = runCLI("play", "--run", out, "--temperature", "0")
	stdin = prev
	if code != 0 || !strings.Contains(stdout, "(GRPO step 2)") || !strings.Contains(stdout, "turn 1> :step\nagent: ") {
		t.Fatalf("play -run on a full fine-tuning run: exit %d: %s\n%q", code, stderr, stdout)
	}
	if code, _, stderr := runCLI("model", "export", "-run", out, "-out", filepath.Join(t.TempDir(), "peft")); code != 2 || !strings.Contains(stderr, "-merged") {
		t.Errorf("export of a full run without -merged: exit %d: %s", code, stderr)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	if code, _, stderr := runCLI("model", "export", "-run", out, "-out", merged, "-merged"); code != 0 {
		t.Fatalf("export -merged: exit %d: %s", code, stderr)
	}
	m, err := llm.Load(merged)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := llm.Load(filepath.Join(out, "checkpoints", strings.TrimSpace(readFile(t, filepath.Join(out, "checkpoints", "LATEST")))))
	if err != nil {
		t.Fatal(err)
	}
	base, err := llm.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Weights(), ck.Weights()) || reflect.DeepEqual(m.Weights(), base.Weights()) {
		t.Fatal("the exported model is not the checkpoint's trained weights")
	}
	for _, bad := range [][]string{
		{"train", "--model", fixture, "--full", "--lora-rank", "4", "--out", filepath.Join(t.TempDir(), "x")},
		{"train", "--model", fixture, "--full", "--lora-dropout", "0.1", "--out", filepath.Join(t.TempDir(), "x")},
		{"train", "--lora-targets", "q_proj", "--out", filepath.Join(t.TempDir(), "x")},
		{"train", "--full", "--out", filepath.Join(t.TempDir(), "y")},
		{"train", "--decoding", "graph", "--out", filepath.Join(t.TempDir(), "z")},
		{"train", "--weights", "bfloat16", "--out", filepath.Join(t.TempDir(), "w")},
		{"train", "--chat-format", "llama3", "--out", filepath.Join(t.TempDir(), "c")},
	} {
		if code, _, stderr := runCLI(bad...); code != 2 || !strings.Contains(stderr, "appl") {
			t.Errorf("%v: exit %d, want 2: %s", bad, code, stderr)
		}
	}
	code, _, stderr = runCLI("train", "--model", fixture, "--lora-rank", "1000000000", "--out", filepath.Join(t.TempDir(), "r"))
	if code != 2 || !strings.Contains(stderr, "rank 1000000000 is above 65536") {
		t.Errorf("--lora-rank 1000000000: exit %d, want 2: %s", code, stderr)
	}
	code, _, stderr = runCLI("train", "--model", fixture, "--chat-format", "chatml", "--out", filepath.Join(t.TempDir(), "v"))
	if code != 2 || !strings.Contains(stderr, `chat format "chatml"; want one of llama3, qwen2.5, qwen3, qwen3-no-thinking`) {
		t.Errorf("--chat-format chatml: exit %d, want 2: %s", code, stderr)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPretrainedPlayAgentExplains: :why on a pretrained agent's greedy action gives each token
// the log-prob the sampler recorded for it, and that token is the likeliest alternative.
func TestPretrainedPlayAgentExplains(t *testing.T) {
	pol, err := agent.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	env := calc.New()
	a := &pretrainedPlayAgent{p: pol, tools: env.Tools(), maxAction: 10}
	ep := &agrl.Episode{Prompt: "Compute: 6*7"}
	text, err := a.Act(ep, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, _, lps, err := pol.Act(env.Tools(), ep, agrl.Sampling{Seed: 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	ep.Turns = append(ep.Turns, agrl.Turn{Text: text, Action: agrl.ParseAction(text)})
	toks, err := a.Explain(ep, 0, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != len(lps) || len(toks) == 0 {
		t.Fatalf("%d explained tokens, %d sampled", len(toks), len(lps))
	}
	for i, tc := range toks {
		if math.Abs(tc.LogProb-float64(lps[i])) > 1e-4 || len(tc.Alternatives) != 3 || tc.Alternatives[0].Text != tc.Text ||
			math.Abs(tc.Alternatives[0].LogProb-tc.LogProb) > 1e-12 {
			t.Errorf("token %d: %+v, sampled log-prob %v", i, tc, lps[i])
		}
	}
	other := *ep
	other.Prompt = "Compute: 9-4" // the same text written after another context
	if _, err := a.Explain(&other, 0, 1, 3); err == nil {
		t.Error("explained an action in a context the agent did not write it in")
	}
	ep.Turns[0].Text = "<answer>1</answer>" // typed over: not the agent's
	if _, err := a.Explain(ep, 0, 1, 3); err == nil {
		t.Error("explained a turn the agent did not write")
	}
}

// TestTrainPretrainedFromHub: -model takes a hub id; the model is downloaded once (progress on
// stderr) into $AGRL_HUB_CACHE from $HF_ENDPOINT (here a local server serving the fixture at
// the hub's file route) and trained; a second run finds it there with the hub gone.
func TestTrainPretrainedFromHub(t *testing.T) {
	srv := hubtest.Serve(t, map[string]string{"agrl/tiny-qwen3": fixture})
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("AGRL_HUB_CACHE", cache)
	args := func(out string) []string {
		return []string{"train", "--env", "calc", "--model", "agrl/tiny-qwen3", "--lora-rank", "4", "--lora-alpha", "8",
			"--micro-batch", "4", "--steps", "1", "--group", "2", "--tasks", "1", "--eval-tasks", "1", "--eval-every", "0",
			"--max-action-tokens", "4", "--out", out, "--quiet"}
	}
	code, _, stderr := runCLI(args(filepath.Join(t.TempDir(), "a"))...)
	if code != 0 {
		t.Fatalf("train --model <hub id>: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "downloading agrl/tiny-qwen3: model.safetensors") {
		t.Errorf("no download progress on stderr:\n%s", stderr)
	}
	want, _ := os.ReadFile(filepath.Join(fixture, "model.safetensors"))
	got, err := os.ReadFile(filepath.Join(cache, "agrl--tiny-qwen3", "main", "model.safetensors"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the cached weights differ from the hub's (%v)", err)
	}
	srv.Close()
	n := srv.Requests()
	if code, _, stderr := runCLI(args(filepath.Join(t.TempDir(), "b"))...); code != 0 || srv.Requests() != n {
		t.Fatalf("a second run with the hub gone: exit %d, %d more requests: %s", code, srv.Requests()-n, stderr)
	}
	// The run records the hub id (and the architecture read from the download), as do its
	// checkpoint and adapters; eval and export find the model in the cache with the hub gone.
	var cfg struct {
		Pretrained struct{ Model, Architecture string } `json:"pretrained"`
	}
	out := filepath.Join(t.TempDir(), "d")
	if code, _, stderr := runCLI(args(out)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "config.json"))), &cfg); err != nil ||
		cfg.Pretrained.Model != "agrl/tiny-qwen3" || cfg.Pretrained.Architecture != "Qwen3ForCausalLM" {
		t.Errorf("config.json records %+v (%v), want the hub id and Qwen3ForCausalLM", cfg.Pretrained, err)
	}
	if code, _, stderr := runCLI("eval", "--run", out, "--split", "test", "--n", "1"); code != 0 {
		t.Errorf("eval with the hub gone: exit %d: %s", code, stderr)
	}
	peft := filepath.Join(t.TempDir(), "peft")
	if code, _, stderr := runCLI("model", "export", "-run", out, "-out", peft); code != 0 {
		t.Fatalf("export with the hub gone: exit %d: %s", code, stderr)
	}
	var ac struct {
		Base string `json:"base_model_name_or_path"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(peft, "adapter_config.json"))), &ac); err != nil || ac.Base != "agrl/tiny-qwen3" {
		t.Errorf("adapter_config.json base_model_name_or_path %q (%v), want the hub id", ac.Base, err)
	}
	if srv.Requests() != n {
		t.Errorf("%d requests to the gone hub", srv.Requests()-n)
	}
	if code, _, stderr := runCLI(append(args(filepath.Join(t.TempDir(), "c")), "--model", "agrl/absent")...); code == 0 || !strings.Contains(stderr, "agrl/absent") {
		t.Errorf("an id the hub cannot serve: exit %d: %s", code, stderr)
	}
}

// TestPretrainedBaseSwapped: a run's checkpoints record a digest of the base model's weights;
// when the model directory holds other weights of the same shape afterwards, eval, export and
// a resume refuse to pair the run's adapters with them.
func TestPretrainedBaseSwapped(t *testing.T) {
	root := t.TempDir()
	m, out := filepath.Join(root, "m"), filepath.Join(root, "run")
	if err := os.CopyFS(m, os.DirFS(fixture)); err != nil {
		t.Fatal(err)
	}
	train := []string{"train", "--env", "calc", "--model", m, "--lora-rank", "4", "--lora-alpha", "8", "--steps", "1", "--group", "2",
		"--tasks", "1", "--eval-tasks", "1", "--eval-every", "0", "--max-action-tokens", "8", "--sft-steps", "0", "--out", out, "--quiet"}
	if code, _, stderr := runCLI(train...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI("eval", "--run", out, "--n", "1"); code != 0 {
		t.Fatalf("eval with the same weights: exit %d: %s", code, stderr)
	}
	other := filepath.Join(root, "other")
	if code, _, stderr := runCLI("model", "random", "-shape", "tiny-qwen3", "-vocab", "320", "-context", "2048", "-seed", "2",
		"-tokenizer", filepath.Join(fixture, "tokenizer.json"), "-out", other); code != 0 {
		t.Fatalf("model random: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(other, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "model.safetensors"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"eval", "--run", out, "--n", "1"},
		{"model", "export", "-run", out, "-out", filepath.Join(root, "peft")},
		append(slices.Clone(train[:len(train)-1]), "--steps", "2"),
	} {
		if code, _, stderr := runCLI(args...); code != 1 || !strings.Contains(stderr, m+" holds other weights than the run trained on") {
			t.Errorf("%v: exit %d, want 1 and the weights' mismatch: %s", args, code, stderr)
		}
	}
}
