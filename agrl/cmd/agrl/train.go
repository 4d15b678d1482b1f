package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/learn"
	"agrl.dev/agrl/llm"
	"agrl.dev/agrl/nb"
	"agrl.dev/envs"
)

// trainFlags are the settings of `agrl train` (and of each run of `agrl sweep`).
type trainFlags struct {
	env, preset, out, backend, from   string
	rubric                            string
	gamma                             float64
	turnAdv                           bool
	demoMix, mix                      string
	steps, group, tasks, sftSteps     int
	demos, evalTasks, evalEvery       int
	maxTokens, maxActionTokens        int
	context, sftBatch                 int
	lr, kl, clip, clipHigh, guessFrac float64
	guessAfter                        float64
	sftLR                             float64
	temp, evalTemp                    float64
	seed                              uint64
	dynamic, quiet                    bool
	checkpointEvery, curriculum       int
	trajEvery                         int
	screen                            int
	plateau                           int
	newSettings                       bool
	watchdog                          time.Duration
	// model is a pretrained model directory (-model); loraRank, loraAlpha, loraDropout and
	// loraTargets its LoRA settings (the targets comma-separated), micro the sequences per
	// graph call.
	model           string
	loraRank, micro int
	// callMemory is -call-memory (GiB).
	callMemory  float64
	loraAlpha   float64
	loraDropout float64
	loraTargets string
	full        bool   // -full: train every weight of the -model, not LoRA adapters
	decoding    string // -decoding: where the -model's rollouts decode (agrl.PretrainedLM.Decoding)
	chatFormat  string // -chat-format: the -model's chat format by name (agrl.PretrainedLM.ChatFormat)
	compute     string // -compute: the dtype of the -model's products (agrl.PretrainedLM.Compute)
	weights     string // -weights: the -model's base weights' storage (agrl.PretrainedLM.Weights)
	// given lists the flags that args set explicitly, each between "|" (a string, so that
	// trainFlags stays comparable: the sweep keys maps by it).
	given string
}

// recipeDefaults returns the recipe of the environment named by the -env flag in args (calc when
// absent or unknown: an unknown name is reported when the flags are turned into a configuration),
// so that every flag's default is the chosen environment's recipe.
func recipeDefaults(args []string) (string, agrl.GRPOSpec) {
	name := "calc"
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") { // a flag's value, such as "--out env"
			continue
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, "env="); ok {
			name = v
		} else if a == "env" && i+1 < len(args) {
			name = args[i+1]
		}
	}
	entry, err := envs.Get(name)
	if err != nil {
		entry, _ = envs.Get("calc")
	}
	return name, entry.Recipe().Spec()
}

// givenFlags returns the names of the flags args set (before any "--"), as trainFlags.given.
func givenFlags(args []string) string {
	given := "|"
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		given += name + "|"
	}
	return given
}

// guessShare returns the share and the start (Demo.After) of a recipe's guessing demonstrations
// (0, 0 without a source named "guess").
func guessShare(demos []agrl.Demo) (share, after float64) {
	total := 0.0
	for _, d := range demos {
		total += d.Weight
	}
	for _, d := range demos {
		if d.Name == "guess" && total > 0 {
			return d.Weight / total, d.After
		}
	}
	return 0, 0
}

// formatMix writes a mix's easy, medium and hard shares as -demo-mix reads them.
func formatMix(m *agrl.Mix) string {
	if m == nil {
		return ""
	}
	fr := m.Fractions()
	return fmt.Sprintf("%g,%g,%g", fr[agrl.Easy], fr[agrl.Medium], fr[agrl.Hard])
}

// presets are the model presets of --preset.
var presets = map[string]func() agrl.LM{"tiny": agrl.TinyLM, "small": agrl.SmallLM}

// register defines the flags; each default is the recipe of the environment that args name.
func (f *trainFlags) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	Float64Var(*float64, string, float64, string)
	Uint64Var(*uint64, string, uint64, string)
	BoolVar(*bool, string, bool, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}, args []string) {
	env, r := recipeDefaults(args)
	f.given = givenFlags(args)
	sftSteps, sftLR, sftBatch := 0, 0.0, agrl.SFT().Spec().Batch
	if r.SFT != nil {
		sftSteps, sftLR, sftBatch = r.SFT.Spec().Steps, r.SFT.Spec().Optimizer.Spec().LR, r.SFT.Spec().Batch
	}
	guess, after := guessShare(r.Demos)
	clipHigh := 0.0
	if r.ClipHigh != r.ClipLow {
		clipHigh = r.ClipHigh
	}
	fs.StringVar(&f.env, "env", env, "environment: "+strings.Join(envs.Names(), ", ")+"; every other default is its recipe's")
	fs.StringVar(&f.preset, "preset", "tiny", "model preset: tiny (CPU; the recipe's policy) or small (GPU)")
	fs.StringVar(&f.backend, "backend", "", `compute backend, e.g. "go:ops_sequential" or "xla:cuda" (default: $AGRL_BACKEND, else $GOMLX_BACKEND, else go:ops_sequential)`)
	fs.StringVar(&f.from, "from", "", "start from this checkpoint directory instead of a warm start")
	fs.IntVar(&f.steps, "steps", r.Steps, "GRPO steps")
	fs.IntVar(&f.group, "group", r.Group, "episodes per task (G)")
	fs.IntVar(&f.tasks, "tasks", r.TasksPerStep, "tasks per step")
	fs.IntVar(&f.sftSteps, "sft-steps", sftSteps, "warm-start SFT steps (0: no warm start)")
	fs.IntVar(&f.sftBatch, "sft-batch", sftBatch, "demonstration episodes per warm-start SFT step")
	fs.IntVar(&f.demos, "demos", r.DemoEpisodes, "warm-start demonstration episodes")
	fs.Float64Var(&f.sftLR, "sft-lr", sftLR, "warm-start SFT peak learning rate")
	fs.Float64Var(&f.guessFrac, "guess-frac", guess, "share of warm-start demonstrations that answer without tools (environments with a guesser)")
	fs.Float64Var(&f.guessAfter, "guess-after", after, "fraction of the warm-start SFT steps before the guessing demonstrations join (a curriculum: tool use first)")
	trainMix := r.Mix
	fs.StringVar(&f.mix, "mix", formatMix(&trainMix), "easy,medium,hard shares of the training tasks (and of the evaluation splits)")
	fs.StringVar(&f.demoMix, "demo-mix", formatMix(r.DemoMix), "easy,medium,hard shares of the warm-start demonstration tasks (long demonstrations teach copying); empty: the training mix")
	fs.IntVar(&f.evalTasks, "eval-tasks", r.EvalTasks, "tasks per evaluation split")
	fs.IntVar(&f.evalEvery, "eval-every", r.EvalEvery, "evaluate on dev every N steps (0: only before and after)")
	fs.IntVar(&f.maxTokens, "max-tokens", r.MaxTokens, "episode token budget (0: the model's context)")
	fs.IntVar(&f.context, "context", 0, "model context in tokens (0: the recipe's)")
	fs.IntVar(&f.maxActionTokens, "max-action-tokens", r.MaxActionTokens, "tokens per action (0: no cap)")
	fs.Float64Var(&f.lr, "lr", r.Optimizer.Spec().LR, "learning rate")
	fs.Float64Var(&f.kl, "kl", r.KL, "KL coefficient β to the reference policy (0: none)")
	fs.Float64Var(&f.clip, "clip", r.ClipLow, "clip ε (both sides)")
	fs.Float64Var(&f.clipHigh, "clip-high", clipHigh, "upper clip ε (DAPO: 0.28); 0 means the same as -clip")
	fs.Float64Var(&f.temp, "temperature", r.Temperature, "sampling temperature of training rollouts")
	fs.Float64Var(&f.evalTemp, "eval-temperature", r.EvalTemperature, "sampling temperature of evaluations")
	fs.Uint64Var(&f.seed, "seed", r.Seed, "seed of everything")
	fs.BoolVar(&f.dynamic, "dynamic", r.DynamicSampling, "dynamic sampling: refill groups whose rewards are all equal")
	fs.IntVar(&f.curriculum, "curriculum", r.Curriculum, "adapt the task mix to the difficulties whose groups carried signal over the last N steps (0: the fixed mix)")
	fs.IntVar(&f.screen, "screen", r.Screen, "task screening: draw up to N candidates per task and keep those whose groups are most likely to disagree, judged by the policy's likelihood of the expert's and the guesser's successful episodes (0: off)")
	fs.IntVar(&f.plateau, "stop-on-plateau", r.StopOnPlateau, "end GRPO early once dev success has not improved for N evaluations (0: run every step)")
	fs.StringVar(&f.rubric, "rubric", "preset", "the environment's rubric: preset, or another it names (filesearch: naive; multihop: process, with a per-turn reward)")
	fs.Float64Var(&f.gamma, "gamma", r.Gamma, "discount γ of the returns advantages come from (0 < γ <= 1)")
	fs.BoolVar(&f.turnAdv, "turn-advantages", r.TurnAdvantages, "turn-level credit: each turn's tokens get the advantage of the return from that turn on")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress output")
	fs.IntVar(&f.trajEvery, "trajectories-every", r.TrajectoriesEvery, "save trajectories and the step record (agrl inspect) at step 1 and every N GRPO steps (1: every step; 0: step 1 only)")
	fs.IntVar(&f.checkpointEvery, "checkpoint-every", r.CheckpointEvery, "checkpoint every N GRPO steps (0: only after the warm start and at the end)")
	pre := agrl.Pretrained("").Spec().LoRA
	fs.StringVar(&f.model, "model", "", "train this pretrained Hugging Face model (a directory, or a hub id such as Qwen/Qwen3-0.6B, downloaded once into $AGRL_HUB_CACHE; HF_ENDPOINT and HF_TOKEN apply) — Qwen3, Qwen2.5, Llama 3.x, SmolLM2 — with LoRA (or every weight, -full) instead of the Tiny model; task screening is off, and the warm start too unless -sft-steps is given (it then trains the adapters, or the weights, on the demonstrations in the model's own chat format)")
	fs.IntVar(&f.loraRank, "lora-rank", pre.Rank, "LoRA rank r of a -model")
	fs.Float64Var(&f.loraAlpha, "lora-alpha", pre.Alpha, "LoRA alpha of a -model (the adapters' output is scaled by alpha/r)")
	fs.Float64Var(&f.loraDropout, "lora-dropout", pre.Dropout, "LoRA dropout of a -model, in [0, 1): the training steps zero each entry of an adapter's input with this probability (PEFT's lora_dropout)")
	fs.StringVar(&f.loraTargets, "lora-targets", strings.Join(pre.TargetModules, ","), "the projections a -model's LoRA adapters train, comma-separated, of "+strings.Join(llm.LoRAModules(), ", "))
	fs.BoolVar(&f.full, "full", false, "fully fine-tune the -model (every weight trained, no LoRA adapters; for small models: 16 bytes a parameter for the weights, gradients and AdamW, plus copies for the sampler and the KL reference); checkpoints are then whole model directories")
	fs.StringVar(&f.chatFormat, "chat-format", "", "the chat and tool-call format a -model talks, for a model whose chat template agrl does not know byte for byte: "+strings.Join(agrl.ChatFormats(), ", ")+` (Llama 3.1 and 3.3 Instruct: llama3; qwen3-no-thinking turns Qwen3's reasoning off); default: the model's own template's`)
	fs.StringVar(&f.decoding, "decoding", "", `where a -model's rollouts run: "host" (agrl/llm's KV cache and kernels, the fastest on a CPU) or "graph" (the model's graph on the -backend, KV caches in its memory: on a GPU, sampling runs there); default host on the go backend, graph on any other`)
	fs.StringVar(&f.weights, "weights", "", `the dtype a -model's frozen base weights are kept in on the -backend: "float32" (default) or "bfloat16" (half the memory; computed in float32 from the rounded values unless -compute bfloat16; LoRA only)`)
	fs.StringVar(&f.compute, "compute", "", `the dtype of a -model's matrix products with its base weights on the -backend: "float32" (default) or "bfloat16" (mixed precision, for GPUs: the projections' inputs and results rounded, float32 sums, float32 logits; rollouts then decode with the graph)`)
	fs.IntVar(&f.micro, "micro-batch", agrl.Pretrained("").Spec().MicroBatch, "sequences per graph call of a -model, at most (its gradients are added up over a step's micro-batches; on the go backend long sequences go fewer at a time, each call estimated within -call-memory, and one too long for that trains layer by layer)")
	fs.Float64Var(&f.callMemory, "call-memory", agrl.DefaultCallMemoryGiB, "GiB one graph call of a -model may take on the go backend, by agrl's estimate: more trains long sequences faster (whole graphs) where the machine has the memory; less fits a smaller one")
	fs.BoolVar(&f.newSettings, "new-settings", false, "resume a run with settings that differ from those it was started with (recorded in the run's "+agrl.RunConfigHistoryFile+")")
	fs.DurationVar(&f.watchdog, "watchdog", learn.ExecTimeout, "fail a graph execution that runs longer than this (time the process is stopped does not count; 0: no watchdog)")
}

// config turns the flags into a GRPO configuration: the environment's recipe with the flags'
// values (whose defaults are the recipe's, so no flags means exactly the recipe). Every problem —
// of a flag, or of the configuration the flags describe (agrl.GRPO.Validate) — is returned at
// once, as a usage error.
func (f *trainFlags) config(stderr io.Writer) (agrl.GRPO, error) {
	var errs []error
	entry, err := envs.Get(f.env)
	if err != nil {
		errs = append(errs, err)
		entry = envs.All()[0] // a stand-in, so that every other problem is reported too
	}
	g := entry.Recipe()
	r := g.Spec()
	lm := r.LM // the preset "tiny" is the recipe's policy
	if newLM, ok := presets[f.preset]; !ok {
		errs = append(errs, fmt.Errorf("-preset %q: want tiny or small", f.preset))
	} else if f.preset != "tiny" {
		lm = newLM()
	}
	if f.backend != "" {
		lm = lm.Backend(f.backend)
	}
	if _, err := learn.ParseBackend(f.backend); err != nil {
		errs = append(errs, err)
	}
	switch {
	case f.context < 0:
		errs = append(errs, fmt.Errorf("-context %d: want >= 0 (0: the preset's)", f.context))
	case f.context > 0:
		lm = lm.Context(f.context)
	}
	if f.out == "" {
		f.out = filepath.Join("runs", f.env)
	}
	if f.sftSteps < 0 {
		errs = append(errs, fmt.Errorf("-sft-steps %d: want >= 0 (0: no warm start)", f.sftSteps))
	}
	if f.sftBatch < 1 {
		errs = append(errs, fmt.Errorf("-sft-batch %d: want >= 1", f.sftBatch))
	}
	if math.IsNaN(f.clipHigh) || f.clipHigh < 0 {
		errs = append(errs, fmt.Errorf("-clip-high %v: want > 0, or 0 for the same as -clip", f.clipHigh))
	}
	if f.guessFrac < 0 || f.guessFrac > 1 {
		errs = append(errs, fmt.Errorf("-guess-frac %v: want 0..1", f.guessFrac))
	}
	if f.guessAfter < 0 || f.guessAfter >= 1 {
		errs = append(errs, fmt.Errorf("-guess-after %v: want 0 <= x < 1", f.guessAfter))
	}
	if f.watchdog < 0 {
		errs = append(errs, fmt.Errorf("-watchdog %v: want >= 0 (0: none)", f.watchdog))
	}
	trainMix := r.Mix
	if f.mix != formatMix(&trainMix) {
		if m, err := parseMix(f.mix); err != nil {
			errs = append(errs, fmt.Errorf("-mix %q: %w", f.mix, err))
		} else {
			g = g.Mix(m)
			r.Mix = m
		}
	}
	var demoMix agrl.Mix
	switch {
	case f.demoMix == formatMix(r.DemoMix):
	case f.demoMix == "":
		demoMix = r.Mix
	default:
		if demoMix, err = parseMix(f.demoMix); err != nil {
			errs = append(errs, fmt.Errorf("-demo-mix %q: %w", f.demoMix, err))
		}
	}
	g = g.Policy(lm).Steps(f.steps).Group(f.group).TasksPerStep(f.tasks).LR(f.lr).KL(f.kl).ClipEps(f.clip).
		Temperature(f.temp).EvalTemperature(f.evalTemp).MaxTokens(f.maxTokens).MaxActionTokens(f.maxActionTokens).
		EvalTasks(f.evalTasks).EvalEvery(f.evalEvery).CheckpointEvery(f.checkpointEvery).TrajectoriesEvery(f.trajEvery).DynamicSampling(f.dynamic).
		Curriculum(f.curriculum).Seed(f.seed).Out(f.out).ResumeWithNewSettings(f.newSettings)
	if f.clipHigh > 0 {
		g = g.ClipHigh(f.clipHigh)
	}
	if f.screen > 0 {
		agents := r.ScreenAgents
		if len(agents) == 0 { // the expert, and the guesser whose successes the warm start imitates
			agents = []agrl.Agent{entry.Expert()}
			if entry.Guesser != nil {
				agents = append(agents, entry.Guesser(f.seed))
			}
		}
		g = g.Screen(f.screen, agents...)
	} else {
		g = g.Screen(0)
	}
	if f.model != "" {
		for _, name := range []string{"from", "screen", "preset", "context"} {
			if strings.Contains(f.given, "|"+name+"|") {
				errs = append(errs, fmt.Errorf("-%s does not apply to a pretrained -model", name))
			}
		}
		// A hub id is downloaded here, with a progress line, and recorded as the id: the
		// learner then finds the download in the cache.
		if err := fetchModel(f.model, stderr); err != nil {
			errs = append(errs, err)
		}
		p := agrl.Pretrained(f.model).LoRA(f.loraRank, f.loraAlpha).Dropout(f.loraDropout).Targets(splitList(f.loraTargets)...).MicroBatch(f.micro).CallMemory(f.callMemory).Decoding(f.decoding).Weights(f.weights).ChatFormat(f.chatFormat).Compute(f.compute)
		if f.full {
			for _, name := range []string{"lora-rank", "lora-alpha", "lora-dropout", "lora-targets"} {
				if strings.Contains(f.given, "|"+name+"|") {
					errs = append(errs, fmt.Errorf("-%s does not apply to -full (no adapters)", name))
				}
			}
			p = p.Full()
		}
		if f.backend != "" {
			p = p.Backend(f.backend)
		}
		g = g.Pretrained(p).Screen(0)
		f.from = ""
		if !strings.Contains(f.given, "|sft-steps|") { // a warm start in the model's own format only when asked for
			f.sftSteps = 0
		}
	} else {
		for _, name := range []string{"full", "lora-rank", "lora-alpha", "lora-dropout", "lora-targets", "micro-batch", "call-memory", "decoding", "weights", "chat-format", "compute"} {
			if strings.Contains(f.given, "|"+name+"|") {
				errs = append(errs, fmt.Errorf("-%s applies to a pretrained -model only", name))
			}
		}
	}
	switch {
	case f.from != "":
		g = g.From(f.from).WarmStartSteps(0)
	case f.sftSteps <= 0:
		g = g.WarmStartSteps(0)
	case r.SFT == nil:
		sft := agrl.SFT().Steps(f.sftSteps).Batch(f.sftBatch).Optimizer(agrl.NewAdamW().LR(f.sftLR).Warmup(20).Schedule(agrl.CosineLR, 0, 0.1))
		g = g.WarmStart(sft, entry.Demos(f.guessFrac, f.guessAfter)...)
	default:
		sft := r.SFT.Steps(f.sftSteps).Batch(f.sftBatch)
		if opt := sft.Spec().Optimizer; opt.Spec().LR != f.sftLR {
			sft = sft.Optimizer(opt.LR(f.sftLR))
		}
		demos := g.Spec().Demos
		if guess, after := guessShare(r.Demos); guess != f.guessFrac || after != f.guessAfter {
			demos = entry.Demos(f.guessFrac, f.guessAfter)
		}
		g = g.WarmStart(sft, demos...)
	}
	if g.Spec().SFT != nil {
		g = g.DemoEpisodes(f.demos)
		if f.demoMix != formatMix(r.DemoMix) && demoMix.Validate() == nil {
			g = g.DemoMix(demoMix)
		}
	}
	if f.rubric != "preset" {
		if rub, err := entry.RubricNamed(f.rubric); err != nil {
			errs = append(errs, fmt.Errorf("-rubric: %w", err))
		} else {
			g = g.Rubric(rub)
		}
	}
	g = g.Gamma(f.gamma).TurnAdvantages(f.turnAdv).StopOnPlateau(f.plateau)
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return agrl.GRPO{}, usageError{errors.Join(errs...)}
	}
	if !f.quiet {
		g = g.Progress(func(msg string) { fmt.Fprintf(stderr, "\r\033[K%s\n", msg) })
	}
	return g, nil
}

func cmdTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("train", stderr)
	var f trainFlags
	f.register(fs, args)
	fs.StringVar(&f.out, "out", "", "run directory (default runs/ENV); an existing run with checkpoints is resumed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (read it with go tool pprof)")
	if err := parse(fs, args); err != nil {
		return err
	}
	g, err := f.config(stderr)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	learn.ExecTimeout = f.watchdog
	ctx, stop := signalContext(stderr)
	defer stop()
	_, err = train(ctx, g, f, stdout, stderr)
	return asInterrupted(ctx, err)
}

// train builds and runs one configuration, printing progress and the before/after table, and
// writes report.html. It returns the finished run directory.
func train(ctx context.Context, g agrl.GRPO, f trainFlags, stdout, stderr io.Writer) (*agrl.Run, error) {
	prog := newProgress(stderr, f.steps)
	if !f.quiet {
		g = g.OnSFTStep(prog.sft)
	}
	tr, err := learn.Build(g)
	var mismatch *agrl.ResumeMismatchError
	if errors.As(err, &mismatch) {
		return nil, usageError{err} // the command line asks for other settings than the run's
	}
	if err != nil {
		return nil, err
	}
	if !f.quiet {
		if p := tr.Pretrained(); p != nil {
			c := p.Config()
			how := fmt.Sprintf("LoRA r=%d", p.Spec().LoRA.Rank)
			if p.IsFull() {
				how = "full fine-tuning"
			}
			fmt.Fprintf(stderr, "training %s on %s (%s, %d layers, hidden %d; %s: %d trainable params; backend %s) into %s\n",
				f.env, f.model, c.Architecture, c.NumHiddenLayers, c.HiddenSize, how, p.TrainableParams(), p.BackendConfig(), f.out)
		} else {
			fmt.Fprintf(stderr, "training %s on %s (%d params, backend %s) into %s\n", f.env, f.preset,
				tr.Policy().Config().Params(), tr.Policy().BackendConfig(), f.out)
		}
		prog.alarms = tr.Alarms
		tr.OnStep(prog.update)
		tr.OnPhase(prog.phase)
	}
	start := time.Now()
	res, err := tr.Train(ctx)
	if !f.quiet {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		resume := tr.ResumePoint()
		if errors.Is(err, context.Canceled) {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			if resume == "" {
				return nil, fmt.Errorf("stopped after %d GRPO steps (%v) before any checkpoint: the same command starts afresh", len(res.History), err)
			}
			return nil, fmt.Errorf("stopped after %d GRPO steps (%v); checkpoint saved: %s", len(res.History), err, resume)
		}
		if tooLong := (*agrl.PromptTooLongError)(nil); errors.As(err, &tooLong) {
			// A setting, not an interruption: the same command would stop at the same prompt.
			var advice string
			switch {
			case tooLong.Need > tooLong.Context && f.model != "":
				advice = "the model's context cannot hold this environment's prompts: train a model with a longer context"
			case tooLong.Need > tooLong.Context:
				advice = fmt.Sprintf("give the model a context of at least %d tokens (-context), in a new run (-out): a run keeps its model's shape", tooLong.Need)
			default:
				advice = fmt.Sprintf("raise -max-tokens to at least %d", tooLong.Need)
				if resume != "" {
					advice += "; this run then resumes with -new-settings, or start afresh in another -out"
				}
			}
			return nil, fmt.Errorf("%w\n%s", err, advice)
		}
		if resume != "" {
			return nil, fmt.Errorf("%w\n%s", err, resume)
		}
		return nil, err
	}
	run, err := agrl.OpenRun(f.out)
	if err != nil {
		return nil, err
	}
	before, after := run.BeforeAfter()
	fmt.Fprintf(stdout, "%s: %d steps in %s (summary: %s)\n", f.out, res.Summary.Steps, time.Since(start).Round(time.Second), filepath.Join(f.out, agrl.RunSummaryFile))
	fmt.Fprint(stdout, agrl.FormatBeforeAfter(before, after))
	if changed := run.BeforeAfterChanges(); len(changed) > 0 {
		fmt.Fprintf(stdout, "no before: the start was evaluated under other settings (%s)\n", agrl.JoinChanges(changed))
	}
	b, err := json.MarshalIndent(map[string]any{"before": before, "after": after}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(f.out, "before_after.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	report, err := nb.WriteReport(run)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "report: %s\n", report)
	return run, nil
}

// progress prints a one-line progress bar with live reward, success and KL: redrawn in place on
// a terminal, one line every 10 steps otherwise (logs, CI).
type progress struct {
	w     io.Writer
	total int
	tty   bool
	// first is the first step seen and when it started: the ETA ignores the warm start.
	first      int
	firstStart time.Time
	// alarms, when set, returns the alarms the run sets off so far; each is printed once when
	// it first fires, and the progress line names those firing.
	alarms func() []agrl.Alarm
	shown  map[string]bool
	// phaseStep is the step of the phases shown since the last step line (phaseEval: of an
	// evaluation after it, whose phases start their clock again), nextPhase the elapsed time
	// at which a log (not a terminal) gets the next phase line, lastElapsed the last phase's
	// (a new split's evaluation starts its clock again too).
	phaseStep   int
	phaseEval   bool
	nextPhase   time.Duration
	lastElapsed time.Duration
}

// phaseEvery is how long a step runs before a log gets a line of where it is, and then how
// often: a pretrained model's steps take minutes on a CPU, the Tiny model's a second.
const phaseEvery = 30 * time.Second

// phase shows where a running step is: on a terminal in place of the progress line at every
// phase, in a log a line once the step has run phaseEvery, and then at most one a phaseEvery.
func (p *progress) phase(ph agrl.StepPhase) {
	line := fmt.Sprintf("step %d/%d: %s (%s)", ph.Step, p.total, ph.What, ph.Elapsed.Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		return
	}
	if ph.Step != p.phaseStep || ph.Evaluation != p.phaseEval || ph.Elapsed < p.lastElapsed {
		p.phaseStep, p.phaseEval, p.nextPhase = ph.Step, ph.Evaluation, phaseEvery
	}
	p.lastElapsed = ph.Elapsed
	if ph.Elapsed >= p.nextPhase {
		fmt.Fprintln(p.w, line)
		p.nextPhase = ph.Elapsed + phaseEvery
	}
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, total: total, tty: tty, nextPhase: phaseEvery}
}

func (p *progress) update(m agrl.Metrics) {
	step := m.Step()
	if p.first == 0 {
		p.first, p.firstStart = step, time.Now().Add(-time.Duration(m[agrl.MetricStepSeconds]*float64(time.Second)))
	}
	perStep := time.Since(p.firstStart) / time.Duration(step-p.first+1)
	eta := perStep * time.Duration(p.total-step)
	warn := ""
	if p.alarms != nil {
		var names []string
		for _, a := range p.alarms() {
			names = append(names, a.Name)
			if !p.shown[a.Name] {
				if p.shown == nil {
					p.shown = map[string]bool{}
				}
				p.shown[a.Name] = true
				if p.tty {
					fmt.Fprint(p.w, "\r\033[K")
				}
				fmt.Fprintf(p.w, "alarm: %s\n", a)
			}
		}
		if len(names) > 0 {
			warn = " alarms: " + strings.Join(names, ",")
		}
	}
	p.emit(step, p.total, 10, fmt.Sprintf("step %d/%d [%s] reward %.3f success %.2f tool %.2f kl %.4f %.1fs/step eta %s%s",
		step, p.total, bar(step, p.total), m[agrl.MetricReward], m[agrl.MetricSuccess], m[agrl.MetricToolCallRate], m[agrl.MetricKL], m[agrl.MetricStepSeconds], eta.Round(time.Second), warn))
}

// sft shows the warm start's progress: on a terminal one line updated in place, otherwise a
// line every 5% of the steps.
func (p *progress) sft(s agrl.SFTProgress) {
	step := s.Stats.Step
	p.emit(step, s.Steps, max(s.Steps/20, 1), fmt.Sprintf("warm start %d/%d [%s] loss %.3f accuracy %.3f %.0f tokens/s eta %s",
		step, s.Steps, bar(step, s.Steps), s.Stats.Loss, s.Stats.Metrics["accuracy"], s.Metrics()[agrl.MetricTokensPerSecond], s.ETA().Round(time.Second)))
}

// emit writes a progress line: on a terminal it replaces the current line at every step,
// otherwise it prints the first and last steps and every every-th.
func (p *progress) emit(step, total, every int, line string) {
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	case step%every == 0 || step == total || step == 1:
		fmt.Fprintln(p.w, line)
	}
}

// bar draws step of total as a 24-character bar.
func bar(step, total int) string {
	const width = 24
	done := min(width, max(0, width*step/max(total, 1)))
	return strings.Repeat("=", done) + strings.Repeat(" ", width-done)
}

// maxEvalEpisodes bounds an evaluation's tasks × k: its episodes are rolled out and kept
// together (a few kilobytes each, more for long ones).
const maxEvalEpisodes = 100000

func cmdEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	runDir := fs.String("run", "", "run directory to evaluate (its newest checkpoint)")
	splitName := fs.String("split", "test", "dev, test or ood")
	k := fs.Int("k", 1, "samples per task (pass@k and mean@k)")
	n := fs.Int("n", 0, "tasks (0: the run's eval-tasks)")
	temp := fs.Float64("temperature", 0, "sampling temperature, >= 0 (default: the run's eval temperature)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	backendFlag := fs.String("backend", "", `compute backend of the policy's graphs (default: a pretrained run's own, else $AGRL_BACKEND or go:ops_sequential); e.g. "go:ops_sequential" to evaluate a run trained on "xla:cuda" on a CPU`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := learn.ParseBackend(*backendFlag); err != nil {
		return usageError{err}
	}
	tempSet := false
	fs.Visit(func(fl *flag.Flag) { tempSet = tempSet || fl.Name == "temperature" })
	var problems []error
	if *runDir == "" {
		problems = append(problems, errors.New("-run is required"))
	}
	split, err := agrl.ParseSplit(*splitName)
	switch {
	case err != nil:
		problems = append(problems, err)
	case split == agrl.Train:
		problems = append(problems, errors.New("-split train: the run trained on it; evaluate on dev, test or ood"))
	}
	if *k < 1 || *k > maxEvalEpisodes {
		problems = append(problems, fmt.Errorf("-k %d: want 1..%d", *k, maxEvalEpisodes))
	}
	if *n < 0 || *n > 100000 {
		problems = append(problems, fmt.Errorf("-n %d: want 1..100000, or 0 for the run's eval-tasks", *n))
	}
	if tempSet && (math.IsNaN(*temp) || math.IsInf(*temp, 0) || *temp < 0) {
		problems = append(problems, fmt.Errorf("-temperature %v: want >= 0 (0: greedy)", *temp))
	}
	if tempSet && *k > 1 && *temp == 0 {
		problems = append(problems, errors.New("pass@k with k > 1 needs a temperature above 0"))
	}
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
	}
	run, err := agrl.OpenRun(*runDir)
	if err != nil {
		return err
	}
	cfg := run.Config
	if cfg.Env == "" {
		return fmt.Errorf("%s: config.json does not describe a GRPO run", *runDir)
	}
	entry, err := envs.Get(cfg.Env)
	if err != nil {
		return err
	}
	backend := *backendFlag
	if backend == "" && cfg.Pretrained != nil {
		backend = cfg.Pretrained.Backend
	}
	pol, err := learn.LoadModel(filepath.Join(*runDir, agrl.RunCheckpointsDir), backend)
	if err != nil {
		return err
	}
	ck := pol.Checkpoint()
	count := cfg.EvalTasks
	if *n > 0 {
		count = *n
	}
	if count*(*k) > maxEvalEpisodes {
		return usageError{fmt.Errorf("%d tasks × k %d is %d episodes, held together: want at most %d (fewer tasks with -n, or a smaller -k)", count, *k, count*(*k), maxEvalEpisodes)}
	}
	tasks, err := cfg.TaskMix().Tasks(entry.New(), split, count)
	if err != nil {
		return err
	}
	t := cfg.EvalTemperature
	if tempSet {
		t = *temp
	}
	if *k > 1 && t == 0 {
		return usageError{errors.New("pass@k with k > 1 needs a temperature above 0 (the run's eval temperature is 0; pass -temperature)")}
	}
	opt := agrl.RolloutOptions{Sampling: agrl.Sampling{Temperature: t, Seed: cfg.Seed, MaxActionTokens: cfg.MaxActionTokens},
		Limits: agrl.Limits{MaxTurns: cfg.MaxTurns}, MaxTokens: cfg.MaxTokens}
	res, _, err := learn.EvaluatePolicy(pol, entry.New(), entry.Rubric(), tasks, *k, opt)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			learn.CheckpointInfo
			agrl.EvalResult
		}{ck, res})
	}
	fmt.Fprintf(stdout, "%s %s at %s: %d tasks × k=%d at temperature %g\n", *runDir, split, ck, res.Tasks, res.K, t)
	fmt.Fprintf(stdout, "success (mean@%d) %.1f%%  pass@%d %.1f%%  mean reward %.3f  turns %.2f\n", res.K, 100*res.Success, res.K, 100*res.PassAtK, res.MeanReward, res.MeanTurns)
	fmt.Fprintf(stdout, "tool-call rate %.1f%%  tool-error rate %.1f%%  invalid-action rate %.1f%%\n", 100*res.ToolCallRate, 100*res.ToolErrorRate, 100*res.InvalidRate)
	for _, d := range res.Difficulties() {
		fmt.Fprintf(stdout, "  %-8s success %.1f%%\n", d, 100*res.SuccessByDifficulty[d])
	}
	if w := ck.Warning(); w != "" {
		fmt.Fprintln(stdout, w)
	}
	return nil
}

// splitList splits a comma-separated list, its items trimmed (an empty string is no items;
// an empty item stays, for the configuration's validation to name).
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	items := strings.Split(s, ",")
	for i, v := range items {
		items[i] = strings.TrimSpace(v)
	}
	return items
}

// parseMix reads "easy,medium,hard" shares such as "0.1,0.3,0.6" (they must sum to 1).
func parseMix(s string) (agrl.Mix, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return agrl.Mix{}, errors.New("want three comma-separated shares: easy,medium,hard")
	}
	var w [3]float64
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return agrl.Mix{}, fmt.Errorf("share %q is not a number", p)
		}
		w[i] = v
	}
	m := agrl.NewMix(1).Easy(w[0]).Medium(w[1]).Hard(w[2])
	return m, m.Validate()
}

// fetchModel downloads -model into the hub cache (hf.Download) with its progress on stderr when
// it names no path and is a hub id, unless the cache has it already; agrl.Pretrained then
// finds it there.
func fetchModel(arg string, stderr io.Writer) error {
	if _, err := os.Stat(arg); err == nil || !hf.IsHubID(arg) {
		return nil
	}
	midLine := false // a progress line without its newline yet
	_, err := hf.Download(context.Background(), arg, hf.HubOptions{Progress: func(file string, done, total int64) {
		line := fmt.Sprintf("downloading %s: %s %.1f MB", arg, file, float64(done)/1e6)
		if total > 0 {
			line += fmt.Sprintf(" of %.1f", float64(total)/1e6)
		}
		fmt.Fprintf(stderr, "\r\033[K%s", line)
		midLine = done != total
		if !midLine {
			fmt.Fprintln(stderr)
		}
	}})
	if midLine {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return fmt.Errorf("-model %s: no such directory, and as a hub id: %w", arg, err)
	}
	return nil
}

// startCPUProfile starts a CPU profile into the file at path (runtime/pprof); stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		fh.Close()
	}, nil
}
