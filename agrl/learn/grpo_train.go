package learn

import (
	"agrl.dev/agrl"

	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/gomlx/gomlx/core/tensors"
)

// GRPOTrainer runs GRPO on one policy. Make it with Build; drive it with Train, or by
// hand with WarmStart, Step and EvaluateSplit (the tutorials do). It is not safe for concurrent
// use.
type GRPOTrainer struct {
	cfg      agrl.GRPOSpec
	resolved agrl.GRPOConfig
	run      *agrl.RunWriter
	// model is the policy trained: policy (the Tiny model) or pre (a pretrained one), the
	// other nil.
	model   trainee
	policy  *Policy
	pre     *PretrainedPolicy
	ref     Model
	learner learner
	onPhase func(agrl.StepPhase) // OnPhase's callback
	begun   time.Time            // when the running step began (for OnPhase)
	env     agrl.Env
	rubric  agrl.Rubric
	splits  map[agrl.Split][]agrl.Task
	step    int
	history []agrl.Metrics
	started time.Time
	sft     *agrl.SplitSummary
	// revision is the revision of the run's settings (agrl.EvalRecord.Settings); startStale:
	// the start's evaluation (sft) was made under settings that measured something else.
	revision   int
	startStale bool
	resumed    bool
	// priorWall is the wall time a resumed run had spent before its stop.
	priorWall float64
	// unsaved: the policy changed since the last checkpoint (or load); a stop saves it only then,
	// so a run stopped before any progress stays a fresh start that other settings may take.
	unsaved bool
	// warmed: the warm start is done and checkpointed (GRPO step 0). inSFT: the warm start's
	// SFT is under way, sftDone of its steps taken (checkpoints then record the SFT stage).
	warmed  bool
	inSFT   bool
	sftDone int
	// devHist holds the dev success of the periodic evaluations so far (StopOnPlateau).
	devHist []float64
	// evals are the evaluations logged so far (resumed ones included), for Alarms.
	evals []agrl.EvalRecord
	// recordAll makes every step write its step record (ReplayStep); lastRecord is the newest
	// step record made.
	recordAll  bool
	lastRecord *agrl.StepRecord
}

// plateaued reports whether StopOnPlateau ends GRPO here: the warm start's dev success and the
// periodic ones since have not improved for its patience.
func (t *GRPOTrainer) plateaued() bool {
	if t.cfg.StopOnPlateau <= 0 || t.sft == nil {
		return false
	}
	if t.startStale { // the start measured something else: the periodic evaluations alone
		return agrl.Plateaued(t.devHist, t.cfg.StopOnPlateau)
	}
	return agrl.Plateaued(append([]float64{t.sft.DevSuccess}, t.devHist...), t.cfg.StopOnPlateau)
}

// SFTCheckpointEvery is the wall time between checkpoints during a GRPO run's warm start (longer
// when a save takes more than a twentieth of it): a run killed during SFT resumes from the
// newest one, and continues exactly as if it had not stopped (a cancelled run also checkpoints
// when it stops). 0 turns the periodic ones off.
var SFTCheckpointEvery = 2 * time.Minute

// Build validates the configuration (reporting every problem at once), takes the run
// directory's lock (a directory in use by another process is an error naming it), builds or
// loads the policy and draws the evaluation splits. Nothing is trained yet.
//
// A run directory that holds a checkpoint is resumed from it. Its stored settings are compared
// with the new ones first: a difference in what is trained is an error naming each setting,
// unless ResumeWithNewSettings(true) (see agrl.GRPO.ResumeChanges); changes are recorded in
// config_history.jsonl. A directory whose earlier start stopped before its first checkpoint
// (that checkpoint is taken right after the warm start, and during it every
// SFTCheckpointEvery) starts afresh. config.json is written only once the run can start: after
// the starting policy has loaded. A pretrained model named by hub id is downloaded once the
// rest of the settings are valid (progress on stderr), and its config.json checked then, so
// that the run records what the download holds.
func Build(g agrl.GRPO) (*GRPOTrainer, error) {
	backend := g.Spec().LM.Spec().Backend
	if p := g.Spec().Pretrained; p != nil {
		backend = p.Spec().Backend
	}
	if err := errors.Join(g.Validate(), backendProblem(backend)); err != nil {
		return nil, err
	}
	if p := g.Spec().Pretrained; p != nil && p.Spec().Hub {
		if _, err := fetchHub(p.Spec().Dir, p.Spec(), os.Stderr); err != nil {
			return nil, err
		}
		if err := p.Validate(); err != nil { // now with the download's config.json
			return nil, err
		}
	}
	s := g.Spec()
	t := &GRPOTrainer{cfg: s, resolved: g.Resolved(), env: s.Env, rubric: *s.Rubric}
	t.cfg.Mix = s.Mix.Seed(s.Seed)
	_, statErr := os.Stat(s.Out)
	created := errors.Is(statErr, fs.ErrNotExist)
	run, err := agrl.LockRun(s.Out)
	if err != nil {
		return nil, err
	}
	t.run = run
	if err := t.open(g); err != nil {
		if created { // leave nothing behind: the same command will find the directory as it was
			_ = os.Remove(filepath.Join(s.Out, agrl.RunLockFile)) // while still holding its lock
		}
		_ = run.Close()
		if created {
			_ = os.Remove(s.Out)
		}
		return nil, err
	}
	return t, nil
}

// open is Build's work once the run directory is locked.
func (t *GRPOTrainer) open(g agrl.GRPO) error {
	s := t.cfg
	ckdir := t.run.CheckpointDir()
	resume := !s.Fresh && len(Checkpoints(ckdir)) > 0
	var prev *agrl.Run // the run the directory holds (nil: none, or Fresh)
	if _, err := os.Stat(filepath.Join(s.Out, agrl.RunConfigFile)); err == nil && !s.Fresh {
		if prev, err = agrl.OpenRun(s.Out); err != nil {
			return fmt.Errorf("%w (to start afresh there, remove the directory or use GRPO.Fresh; or choose another directory)", err)
		}
	}
	var changes []agrl.SettingChange
	optIn := false
	if resume && prev != nil && len(prev.ConfigJSON) > 0 {
		binding, free, err := g.ResumeChanges(prev.ConfigJSON)
		if err != nil {
			return err
		}
		if model := agrl.ModelChanges(binding); len(model) > 0 { // no opt-in applies these
			if s.ResumeWithNewSettings {
				binding = model // the opt-in covers the rest: name only what still blocks
			}
			return &agrl.ResumeMismatchError{Dir: s.Out, Changes: binding, Model: true}
		}
		if len(binding) > 0 && !s.ResumeWithNewSettings {
			return &agrl.ResumeMismatchError{Dir: s.Out, Changes: binding}
		}
		optIn = len(binding) > 0
		changes = append(binding, free...)
		sort.Slice(changes, func(i, j int) bool { return changes[i].Setting < changes[j].Setting })
	}
	if !resume && prev != nil && prev.Summary != nil && prev.Summary.Status == "completed" {
		return fmt.Errorf("agrl: %s holds a finished run but no checkpoint to resume it from; choose another directory", s.Out)
	}
	backend := s.LM.Spec().Backend
	var err error
	switch {
	case s.Pretrained != nil:
		from := ""
		if resume {
			from = ckdir
		}
		if t.pre, err = loadPretrained(*s.Pretrained, s.Seed, from, t.warn); err != nil {
			if resume {
				return fmt.Errorf("agrl: resuming %s: %w", s.Out, err)
			}
			return err
		}
		t.pre.warm = s.SFT != nil
		t.resumed = resume
	case resume:
		if t.policy, err = loadPolicy(ckdir, backend, t.warn); err != nil {
			return fmt.Errorf("agrl: resuming %s: %w", s.Out, err)
		}
		t.resumed = true
	case s.From != "":
		if t.policy, err = loadPolicy(s.From, backend, t.warn); err != nil {
			return fmt.Errorf("agrl: loading the start policy: %w", err)
		}
	default:
		if t.policy, err = NewPolicy(s.LM); err != nil {
			return err
		}
	}
	if t.pre != nil {
		t.model = t.pre
	} else {
		t.model = t.policy
	}
	if err := t.drawSplits(); err != nil {
		return err
	}
	// The run can start: from here on the directory records it.
	switch {
	case s.Fresh: // only now, so that a start that fails keeps the earlier run
		if err := agrl.ClearRun(s.Out); err != nil {
			return err
		}
	case !resume:
		if prev != nil {
			t.say("%s holds an earlier start that stopped before its first checkpoint: starting afresh", s.Out)
		}
		if err := t.run.Discard(); err != nil {
			return err
		}
	}
	if t.resumed {
		if err := t.restoreProgress(); err != nil {
			return err
		}
	}
	if err := t.run.WriteConfig(t.resolved); err != nil {
		return err
	}
	if len(changes) > 0 {
		t.say("resuming with changed settings (recorded in %s): %s", agrl.RunConfigHistoryFile, agrl.JoinChanges(changes))
		if err := t.run.RecordConfigChange(agrl.ConfigChange{Time: time.Now().UTC(), Step: t.step, Changes: changes, NewSettings: optIn}); err != nil {
			return err
		}
	}
	return t.settingsRevision()
}

// settingsRevision reads which revision of the run's settings this trainer runs under (the
// lines of config_history.jsonl; each evaluation records it) and warns when the evaluation of
// the policy GRPO started from was made under settings that measured something else.
func (t *GRPOTrainer) settingsRevision() error {
	hist, err := agrl.ConfigHistory(t.cfg.Out)
	if err != nil {
		return err
	}
	t.revision = len(hist)
	start := -1
	for _, e := range t.evals {
		if e.Label == agrl.LabelSFT {
			start = max(start, e.Settings)
		}
	}
	// The periodic dev evaluations StopOnPlateau compares (of those a resume kept): those
	// measured as the next ones will be.
	t.devHist = t.devHist[:0]
	for _, e := range t.evals {
		if e.Split == agrl.Dev && e.Label == "" && len(agrl.EvalChangesIn(hist, e.Settings, t.revision)) == 0 {
			t.devHist = append(t.devHist, e.Success)
		}
	}
	if start < 0 {
		return nil
	}
	if changed := agrl.EvalChangesIn(hist, start, t.revision); len(changed) > 0 {
		t.startStale = true
		t.warn(fmt.Sprintf("the policy GRPO started from was evaluated under other settings (%s): the final evaluation will not be compared with it (the before/after table leaves the before out)", agrl.JoinChanges(changed)))
	}
	return nil
}

// Close releases the run directory's lock. Train calls it when it returns; a trainer driven by
// hand (WarmStart, Step) holds the directory until Close or the end of the process.
func (t *GRPOTrainer) Close() error { return t.run.Close() }

// MustBuild is Build for notebooks: it panics on error.
func MustBuild(g agrl.GRPO) *GRPOTrainer {
	t, err := Build(g)
	if err != nil {
		panic(err)
	}
	return t
}

// OnStep replaces the per-step callback (for progress bars and live plots).
func (t *GRPOTrainer) OnStep(fn func(agrl.Metrics)) { t.cfg.OnStep = fn }

// OnPhase sets a callback told each phase of every GRPO step as it starts (nil: none). It
// runs on the training goroutine, during the update with the policy locked: it must return
// quickly and not call the policy.
func (t *GRPOTrainer) OnPhase(fn func(agrl.StepPhase)) { t.onPhase = fn }

// phase tells OnPhase's callback, if any, that step (begun at t.begun) is at what.
func (t *GRPOTrainer) phase(step int, format string, args ...any) {
	if t.onPhase != nil {
		t.onPhase(agrl.StepPhase{Step: step, What: fmt.Sprintf(format, args...), Elapsed: time.Since(t.begun)})
	}
}

// Policy returns the Tiny policy being trained (nil when the run trains a pretrained model:
// see Pretrained and Model).
func (t *GRPOTrainer) Policy() *Policy { return t.policy }

// Pretrained returns the pretrained policy being trained (nil when the run trains a Tiny one).
func (t *GRPOTrainer) Pretrained() *PretrainedPolicy { return t.pre }

// Model returns the policy being trained, Tiny or pretrained.
func (t *GRPOTrainer) Model() Model { return t.model }

// Run returns the run directory writer.
func (t *GRPOTrainer) Run() *agrl.RunWriter { return t.run }

// StepNumber returns the number of GRPO steps taken so far (resumed runs included).
func (t *GRPOTrainer) StepNumber() int { return t.step }

// History returns the metrics of every step taken by this process (and, when resumed, the
// steps read back from metrics.jsonl).
func (t *GRPOTrainer) History() []agrl.Metrics { return t.history }

// Alarms returns the alarms the run's metrics and evaluations so far set off (see
// agrl.CheckAlarms): call it from OnStep to warn while training.
func (t *GRPOTrainer) Alarms() []agrl.Alarm { return agrl.CheckAlarms(t.history, t.evals) }

// logEval appends an evaluation to eval.jsonl and to the trainer's record.
func (t *GRPOTrainer) logEval(e agrl.EvalRecord) error {
	e.Settings = t.revision
	if err := t.run.LogEval(e); err != nil {
		return err
	}
	t.evals = append(t.evals, e)
	return nil
}

// Tasks returns the evaluation tasks of a split (Dev, Test or OOD).
func (t *GRPOTrainer) Tasks(s agrl.Split) []agrl.Task { return t.splits[s] }

func (t *GRPOTrainer) say(format string, args ...any) {
	if t.cfg.Progress != nil {
		t.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// warn reports a problem the run recovered from: through Progress, or on standard error when
// there is no Progress (a warning is never silent).
func (t *GRPOTrainer) warn(msg string) {
	if t.cfg.Progress != nil {
		t.cfg.Progress(msg)
		return
	}
	fmt.Fprintln(os.Stderr, "agrl: "+msg)
}

func (t *GRPOTrainer) drawSplits() error {
	t.splits = map[agrl.Split][]agrl.Task{}
	for _, s := range []agrl.Split{agrl.Dev, agrl.Test, agrl.OOD} {
		tasks, err := t.cfg.Mix.Tasks(t.env, s, t.cfg.EvalTasks)
		if err != nil {
			return err
		}
		t.splits[s] = tasks
	}
	return nil
}

// restoreProgress sets the trainer where the resumed checkpoint left off and rewinds the run
// directory's logs to it (lines logged after the checkpoint will be logged again, identically).
// A checkpoint of the warm start resumes SFT at its step; any other resumes GRPO at the step
// read from the optimizer state.
func (t *GRPOTrainer) restoreProgress() error {
	info := t.model.Checkpoint()
	if why := kernelChange(info.Kernels, t.model.kernels()); why != "" {
		t.warn(fmt.Sprintf("%s: %s: the run goes on, but its sums round differently from here on, so it is not bit for bit the run the first machine would have continued", filepath.Base(info.Dir), why))
	}
	r, err := agrl.OpenRun(t.cfg.Out)
	if err != nil {
		r = &agrl.Run{Dir: t.cfg.Out}
	}
	if r.Summary != nil {
		t.priorWall = r.Summary.WallSeconds
	}
	if info.Stage == StageSFT && t.cfg.SFT != nil {
		t.inSFT, t.sftDone = true, info.SFTStep
		if err := t.run.Rewind(0, func(agrl.EvalRecord) bool { return false }); err != nil {
			return err
		}
		t.say("resumed %s in the warm start at SFT step %d (%s)", t.cfg.Out, t.sftDone, filepath.Base(info.Dir))
		return nil
	}
	t.warmed = true
	if err := t.ensureLearner(); err != nil {
		return err
	}
	if info.Stage == StageGRPO {
		t.step = info.Step // recorded by the checkpoint: right even if Epochs or Minibatches changed
	} else { // a checkpoint of an older build: the optimizer's count under the current settings
		t.step = t.learner.Steps() / (t.cfg.Epochs * t.cfg.Minibatches)
	}
	for _, m := range r.Metrics {
		if m.Step() <= t.step {
			t.history = append(t.history, m)
		}
	}
	// The start's evaluation ("sft" records) counts once it completed (the summary holds it);
	// periodic dev evaluations up to the checkpoint's step were logged before it; final ones
	// are made again.
	startDone := r.Summary != nil && r.Summary.SFT != nil
	if startDone {
		t.sft = r.Summary.SFT
	}
	keep := func(e agrl.EvalRecord) bool {
		switch e.Label {
		case agrl.LabelSFT:
			return startDone
		case "":
			return e.Step <= t.step
		}
		return false
	}
	if err := t.run.Rewind(t.step, keep); err != nil {
		return err
	}
	for _, e := range r.Evals {
		if keep(e) { // (devHist: settingsRevision, once the settings are known)
			t.evals = append(t.evals, e)
		}
	}
	t.say("resumed %s at step %d (%s)", t.cfg.Out, t.step, filepath.Base(info.Dir))
	return nil
}

func (t *GRPOTrainer) ensureLearner() error {
	if t.learner != nil {
		return nil
	}
	loss := grpoLoss(t.cfg.ClipLow, t.cfg.ClipHigh, t.cfg.KL, t.cfg.KLEstimator)
	// A schedule without its own horizon decays over the whole run: every optimizer step of
	// every GRPO step.
	opt := t.cfg.Optimizer.ForSteps(t.cfg.Steps * t.cfg.Epochs * t.cfg.Minibatches)
	l, err := t.model.newLearner("grpo", loss, grpoValues, opt, t.cfg.Temperature)
	if err != nil {
		return err
	}
	t.learner = l
	return nil
}

// ensureReference loads (or, on first use, saves) the frozen reference policy: the policy as
// it was when GRPO started, kept in checkpoints/reference.
func (t *GRPOTrainer) ensureReference() error {
	if t.ref != nil {
		return nil
	}
	ref, err := t.model.reference(filepath.Join(t.run.CheckpointDir(), "reference"))
	if err != nil {
		return fmt.Errorf("agrl: the reference policy: %w", err)
	}
	t.ref = ref
	return nil
}

// rolloutOptions returns the options of training (train=true) or evaluation rollouts.
func (t *GRPOTrainer) rolloutOptions(train bool, seed uint64) agrl.RolloutOptions {
	temp := t.cfg.EvalTemperature
	if train {
		temp = t.cfg.Temperature
	}
	return agrl.RolloutOptions{
		Sampling:  agrl.Sampling{Temperature: temp, Seed: seed, MaxActionTokens: t.cfg.MaxActionTokens},
		Limits:    agrl.Limits{MaxTurns: t.cfg.MaxTurns},
		MaxTokens: t.cfg.MaxTokens,
	}
}

// seedFor derives a seed for one purpose of one step, so that a resumed run draws exactly what
// an uninterrupted one would.
func (t *GRPOTrainer) seedFor(purpose string, step int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s\x00%d", t.cfg.Seed, purpose, step)
	return h.Sum64()
}

// WarmStart runs the configured behaviour-cloning warm start, checkpoints the resulting policy
// (GRPO step 0: the KL reference, and where a run killed later resumes) and evaluates it on
// every split: the "before" (summary key "sft") of the before/after table. A run started From
// a checkpoint has no warm start; its starting policy is evaluated as the "before". A resumed
// run continues an interrupted warm start, and is a no-op once it was done.
func (t *GRPOTrainer) WarmStart() (*agrl.SFTReport, error) { return t.warmStart(context.Background()) }

func (t *GRPOTrainer) warmStart(ctx context.Context) (*agrl.SFTReport, error) {
	evaluates := t.cfg.SFT != nil || t.cfg.From != "" || t.pre != nil
	if t.warmed || t.step > 0 {
		if t.step == 0 && t.sft == nil && evaluates { // stopped during the start's evaluation
			return nil, t.evaluateStart(ctx)
		}
		return nil, nil
	}
	var rep *agrl.SFTReport
	if t.cfg.SFT != nil {
		r, err := t.runSFT(ctx)
		if err != nil {
			return nil, err
		}
		rep = &r
	}
	if err := t.checkpoint(); err != nil {
		return rep, err
	}
	t.warmed = true
	if !evaluates {
		return rep, nil
	}
	return rep, t.evaluateStart(ctx)
}

// runSFT plays the demonstrations and runs the warm start's SFT from t.sftDone, checkpointing
// every SFTCheckpointEvery.
func (t *GRPOTrainer) runSFT(ctx context.Context) (agrl.SFTReport, error) {
	start := time.Now()
	t.inSFT = true
	demos, firstStep, err := t.demoEpisodes(ctx)
	if err != nil {
		return agrl.SFTReport{}, err
	}
	total := t.cfg.SFT.Spec().Steps
	if t.sftDone > 0 {
		t.say("warm start: SFT on %d demonstration episodes, continuing at step %d of %d", len(demos), t.sftDone+1, total)
	} else {
		t.say("warm start: SFT on %d demonstration episodes", len(demos))
	}
	last, wait := time.Now(), SFTCheckpointEvery
	after := func(step int) error {
		t.sftDone, t.unsaved = step, true
		if SFTCheckpointEvery > 0 && time.Since(last) >= wait && step < total {
			start := time.Now()
			if err := t.checkpoint(); err != nil {
				return err
			}
			// At most 5% of the time in checkpoints (a 25M-parameter policy with its AdamW
			// state takes seconds to save on a CPU machine).
			last, wait = time.Now(), max(SFTCheckpointEvery, 20*time.Since(start))
		}
		return nil
	}
	cfg := *t.cfg.SFT
	if fn := t.cfg.OnSFTStep; fn != nil {
		began, resumed, log := time.Now(), t.sftDone, cfg.Spec().Log
		cfg = cfg.Log(func(st agrl.StepStats) {
			if log != nil {
				log(st)
			}
			fn(agrl.SFTProgress{Stats: st, Steps: total, Elapsed: time.Since(began), Resumed: resumed})
		})
	}
	rep, err := sftOn(t.model, sftRun{ctx: ctx, cfg: cfg, episodes: demos, tools: t.cfg.Env.Tools(), firstStep: firstStep, done: t.sftDone, after: after})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return rep, err
		}
		return rep, fmt.Errorf("agrl: warm start: %w", err)
	}
	t.inSFT = false
	if rep.Unwritable > 0 {
		t.say("warm start: %d of %d demonstrations left out: the policy's format cannot write them (the first: %s)", rep.Unwritable, len(demos), rep.UnwritableWhy)
	}
	final := rep.Final()
	t.say("warm start: %d steps, loss %.3f, token accuracy %.3f, %.0f tokens/s, %.0fs",
		len(rep.Steps), final.Loss, final.Metrics["accuracy"], rep.TokensPerSecond, time.Since(start).Seconds())
	return rep, nil
}

// evaluateStart evaluates the policy GRPO starts from on every split and records it in the
// summary as "sft".
func (t *GRPOTrainer) evaluateStart(ctx context.Context) error {
	sum, err := t.evaluateAll(ctx, agrl.LabelSFT, 0)
	if err != nil {
		return err
	}
	t.sft = sum
	return t.writeSummary("warm-started")
}

// demoEpisodes plays the warm start's demonstrations on training tasks, each demo its share,
// and returns with each episode the first SFT step that may draw it (its demo's After).
func (t *GRPOTrainer) demoEpisodes(ctx context.Context) ([]*agrl.Episode, []int, error) {
	mix := t.cfg.Mix
	if t.cfg.DemoMix != nil {
		mix = *t.cfg.DemoMix
	}
	stream, err := mix.Seed(t.seedFor("demos", 0)).Stream(t.env, agrl.Train)
	if err != nil {
		return nil, nil, err
	}
	total := 0.0
	for _, d := range t.cfg.Demos {
		total += d.Weight
	}
	if total <= 0 {
		return nil, nil, errors.New("agrl: warm start: demo weights sum to 0")
	}
	rng := rand.New(rand.NewPCG(t.cfg.Seed, 0x64656d6f)) // "demo"
	lim := agrl.Limits{MaxTurns: t.cfg.MaxTurns}
	eps := make([]*agrl.Episode, 0, t.cfg.DemoEpisodes)
	first := make([]int, 0, t.cfg.DemoEpisodes)
	for range t.cfg.DemoEpisodes {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		task, err := stream.Next()
		if err != nil {
			return nil, nil, err
		}
		u, demo := rng.Float64()*total, t.cfg.Demos[len(t.cfg.Demos)-1]
		for _, d := range t.cfg.Demos {
			if u < d.Weight {
				demo = d
				break
			}
			u -= d.Weight
		}
		ep, err := agrl.Play(t.env, task, demo.Agent, lim)
		if err != nil {
			return nil, nil, fmt.Errorf("agrl: warm start demonstration: %w", err)
		}
		eps = append(eps, ep)
		first = append(first, 1+int(math.Ceil(demo.After*float64(t.cfg.SFT.Spec().Steps))))
	}
	return eps, first, nil
}

// EvaluateSplit plays k episodes of each task of the split with the current policy at the
// evaluation temperature, scores them and summarises them.
func (t *GRPOTrainer) EvaluateSplit(s agrl.Split, k int) (agrl.EvalResult, []*agrl.Episode, error) {
	return t.evaluateSplit(s, k, nil)
}

// evalProgress is what an evaluation of split s after step (label: agrl.LabelSFT, LabelFinal
// or "" for one during training) tells OnPhase as each episode ends, with the time since the
// split began (a pretrained model's evaluation takes minutes on a CPU): nil without OnPhase.
func (t *GRPOTrainer) evalProgress(label string, s agrl.Split, step int) func(done, total int) {
	if t.onPhase == nil {
		return nil
	}
	when := fmt.Sprintf("at step %d", step)
	switch label {
	case agrl.LabelSFT:
		when = "before training"
	case agrl.LabelFinal:
		when = "after training"
	}
	begun := time.Now()
	return func(done, total int) {
		t.onPhase(agrl.StepPhase{Step: step, Evaluation: true, Elapsed: time.Since(begun),
			What: fmt.Sprintf("evaluation %s, %s: %d of %d episodes done", when, s, done, total)})
	}
}

// evaluateSplit is EvaluateSplit telling progress, if not nil, as each episode ends.
func (t *GRPOTrainer) evaluateSplit(s agrl.Split, k int, progress func(done, total int)) (agrl.EvalResult, []*agrl.Episode, error) {
	opt := t.rolloutOptions(false, t.seedFor("eval-"+s.String(), t.step))
	opt.Progress = progress
	return EvaluatePolicy(t.model, t.env, t.rubric, t.splits[s], k, opt)
}

// EvaluatePolicy plays k episodes of every task with the policy, scores them with the rubric and
// summarises them (success, pass@k, mean reward, rates).
func EvaluatePolicy(p Model, env agrl.Env, rubric agrl.Rubric, tasks []agrl.Task, k int, opt agrl.RolloutOptions) (agrl.EvalResult, []*agrl.Episode, error) {
	if k < 1 {
		return agrl.EvalResult{}, nil, fmt.Errorf("agrl: evaluation needs k >= 1, got %d", k)
	}
	if len(tasks) == 0 {
		return agrl.EvalResult{}, nil, errors.New("agrl: evaluation of no tasks")
	}
	if k > math.MaxInt32/len(tasks) {
		return agrl.EvalResult{}, nil, fmt.Errorf("agrl: evaluation of %d tasks × k %d: more episodes than can be held", len(tasks), k)
	}
	batch := make([]agrl.Task, 0, len(tasks)*k)
	for _, task := range tasks {
		for range k {
			batch = append(batch, task)
		}
	}
	eps, _, err := p.Rollout(env, batch, opt)
	if err != nil {
		return agrl.EvalResult{}, nil, err
	}
	for _, ep := range eps {
		if _, err := rubric.Score(ep); err != nil {
			return agrl.EvalResult{}, nil, err
		}
	}
	res, err := agrl.Evaluate(eps)
	return res, eps, err
}

// evaluateAll evaluates on dev, test and OOD (k=1), logs each to eval.jsonl with the label and
// returns the headline numbers.
func (t *GRPOTrainer) evaluateAll(ctx context.Context, label string, step int) (*agrl.SplitSummary, error) {
	sum := &agrl.SplitSummary{}
	for _, s := range []agrl.Split{agrl.Dev, agrl.Test, agrl.OOD} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res, _, err := t.evaluateSplit(s, 1, t.evalProgress(label, s, step))
		if err != nil {
			return nil, fmt.Errorf("agrl: evaluating %s on %s: %w", label, s, err)
		}
		if err := t.logEval(agrl.EvalRecord{Step: step, Split: s, Label: label, EvalResult: res}); err != nil {
			return nil, err
		}
		switch s {
		case agrl.Dev:
			sum.DevSuccess, sum.MeanReward = res.Success, res.MeanReward
		case agrl.Test:
			sum.TestSuccess = res.Success
		case agrl.OOD:
			sum.OODSuccess = res.Success
		}
		t.say("%s %s: success %.3f, reward %.3f, tool calls %.2f per episode", label, s, res.Success, res.MeanReward, res.MeanToolCalls)
	}
	return sum, nil
}

func (t *GRPOTrainer) writeSummary(status string) error {
	s := agrl.Summary{Env: t.env.Name(), Seed: t.cfg.Seed, Steps: t.step,
		Backend: t.model.BackendConfig(), WallSeconds: t.wallSeconds(), SFT: t.sft, Status: status}
	if status != "completed" && status != "warm-started" {
		s.Resume = t.ResumePoint()
	}
	return t.run.WriteSummary(s)
}

// ResumePoint describes the newest checkpoint of the run directory and how to resume from it
// ("" when there is none): what a stopped or failed run tells its user.
func (t *GRPOTrainer) ResumePoint() string {
	c, ok := newestCheckpoint(t.run.CheckpointDir())
	if !ok {
		return ""
	}
	return "run the same command to resume from " + c.String()
}

// TrainResult is what Train returns: the steps' metrics and the summary it wrote.
type TrainResult struct {
	History []agrl.Metrics
	Summary agrl.Summary
}

// Train runs the whole loop: the warm start (if configured), then GRPO steps with periodic
// evaluation, trajectories and checkpoints, then the final evaluation and summary.json.
// Cancelling ctx stops after the current step (of SFT or GRPO) or evaluation split, saves a
// checkpoint and returns the history so far with ctx's error; the same configuration then
// resumes. A NaN or infinite loss or gradient stops training with an error naming the step;
// the last good checkpoint stays on disk. Train releases the run directory (Close) when it
// returns.
func (t *GRPOTrainer) Train(ctx context.Context) (*TrainResult, error) {
	defer t.Close()
	t.started = time.Now()
	sum, err := t.train(ctx)
	res := t.result()
	switch {
	case err == nil:
		res.Summary = *sum
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if t.unsaved {
			if cerr := t.checkpoint(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		if serr := t.writeSummary("cancelled"); serr != nil {
			err = errors.Join(err, serr)
		}
	default:
		// No checkpoint here: after a failed graph call (the watchdog abandons it) the weights
		// may be in any state. The newest periodic checkpoint is the resume point.
		if serr := t.writeSummary("failed: " + err.Error()); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return res, err
}

// train is Train's loop; Train records how it ended.
func (t *GRPOTrainer) train(ctx context.Context) (*agrl.Summary, error) {
	if _, err := t.warmStart(ctx); err != nil {
		return nil, err
	}
	stopped := ""
	for t.step < t.cfg.Steps {
		if t.plateaued() {
			stopped = fmt.Sprintf("dev success had not improved for %d evaluations (StopOnPlateau) at step %d of %d", t.cfg.StopOnPlateau, t.step, t.cfg.Steps)
			t.say("stopping early: %s", stopped)
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := t.Step()
		if err != nil {
			return nil, err
		}
		if t.cfg.OnStep != nil {
			t.cfg.OnStep(m)
		}
		if every(t.cfg.EvalEvery, t.step) && t.step < t.cfg.Steps {
			res, _, err := t.evaluateSplit(agrl.Dev, 1, t.evalProgress("", agrl.Dev, t.step))
			if err != nil {
				return nil, err
			}
			if err := t.logEval(agrl.EvalRecord{Step: t.step, Split: agrl.Dev, EvalResult: res}); err != nil {
				return nil, err
			}
			t.devHist = append(t.devHist, res.Success)
			t.say("step %d dev: success %.3f, reward %.3f", t.step, res.Success, res.MeanReward)
		}
		if every(t.cfg.CheckpointEvery, t.step) && t.step < t.cfg.Steps {
			if err := t.checkpoint(); err != nil {
				return nil, err
			}
		}
	}
	if t.unsaved { // a resumed run that was already at its last step has nothing new to save
		if err := t.checkpoint(); err != nil {
			return nil, err
		}
	}
	final, err := t.evaluateAll(ctx, agrl.LabelFinal, t.step)
	if err != nil {
		return nil, err
	}
	s := agrl.Summary{Env: t.env.Name(), Seed: t.cfg.Seed, Steps: t.step, Backend: t.model.BackendConfig(),
		WallSeconds: t.wallSeconds(), SFT: t.sft, Final: final, Status: "completed", StoppedEarly: stopped}
	if err := t.run.WriteSummary(s); err != nil {
		return nil, err
	}
	return &s, nil
}

// wallSeconds is the training time of this process plus, for a resumed run, the time recorded
// before the stop.
func (t *GRPOTrainer) wallSeconds() float64 {
	w := 0.0
	if !t.started.IsZero() {
		w = time.Since(t.started).Seconds()
	}
	return w + t.priorWall
}

func every(n, step int) bool { return n > 0 && step%n == 0 }

func (t *GRPOTrainer) result() *TrainResult { return &TrainResult{History: t.history} }

// checkpoint saves the policy with the run's progress (the SFT step during the warm start, the
// GRPO step after it).
func (t *GRPOTrainer) checkpoint() error {
	where := fmt.Sprintf("step %d", t.step)
	mark := checkpointMark{Stage: StageGRPO, Step: t.step}
	if t.inSFT {
		where = fmt.Sprintf("warm-start SFT step %d", t.sftDone)
		mark = checkpointMark{Stage: StageSFT, SFTStep: t.sftDone}
	}
	if err := t.model.checkFinite(); err != nil {
		return fmt.Errorf("agrl: checkpoint at %s not saved: %w; the last good checkpoint is in %s", where, err, t.run.CheckpointDir())
	}
	if _, err := t.model.saveMarked(t.run.CheckpointDir(), mark); err != nil {
		return fmt.Errorf("agrl: checkpoint at %s: %w", where, err)
	}
	t.unsaved = false
	t.say("checkpoint at %s", where)
	return nil
}

// Step takes one GRPO step and returns its metrics (also appended to metrics.jsonl). It reads
// top to bottom: rollout → score → advantages → loss → update → log.
//
// A step takes Epochs × Minibatches optimizer steps. Its metrics, by name:
//
//   - Episodes (all of the step's episodes): "reward/mean", "reward/std" (population std),
//     "reward/<component>" (each rubric component's mean value, unweighted), "success",
//     "response_length" (policy tokens per episode), "turns", "truncated" (share cut off by
//     the token budget), "tool_call_rate" (share of episodes with a tool call),
//     "tool_error_rate" (per tool call), "invalid_rate" (per action), "error_then_quit" (share
//     of episodes whose last tool call failed and which then stopped without a correct answer:
//     the shape of a reward hack), "episodes".
//   - Groups: "frac_reward_zero_std" (share of the first rollout's groups whose rewards are
//     all equal), "dynamic/refills", "dynamic/dropped_groups"; with a curriculum, per
//     difficulty D the weight the tasks were drawn with, "curriculum/weight_D", and the groups
//     sampled and those with signal, "curriculum/groups_D" and "curriculum/signal_D"; with
//     screening, the predicted share of groups with signal of the chosen tasks and of all
//     candidates, "screen/predicted_signal" and "screen/pool_signal", the chosen tasks'
//     estimated success "screen/q" and the candidates drawn per task "screen/candidates".
//   - Loss diagnostics, from the first minibatch of the first epoch (the weights that sampled;
//     means over its policy tokens): "kl" (to the reference; 0 with KL(0)), "entropy",
//     "clip/low", "clip/high" (shares of tokens clipped), "ratio/mean", "ratio/dev" (mean
//     |ratio − 1|), "approx_kl" (to the sampling policy), "pg_loss" (the policy-gradient term).
//   - Update: "loss" and "grad_norm" (the global gradient norm before clipping) are means over
//     the step's optimizer steps, "grad_norm_max" their largest norm, "lr" the learning rate of
//     the last one.
//   - Cost: "tokens/sampled" (tokens the policy wrote), "tokens/trained" (unpadded tokens,
//     context included, summed over the optimizer steps), "tokens_per_second" (tokens read
//     while sampling plus tokens trained, per second of the step), "time/step_seconds",
//     "time/rollout_seconds", "time/update_seconds"; "step" is the step number.
func (t *GRPOTrainer) Step() (agrl.Metrics, error) {
	start := time.Now()
	if err := t.ensureLearner(); err != nil {
		return nil, err
	}
	if t.cfg.KL > 0 { // KL(0) needs no reference: no copy of the policy, no forward pass
		if err := t.ensureReference(); err != nil {
			return nil, err
		}
	}
	step := t.step + 1

	// 1. Rollout: G episodes of each task, all in one batch through the multi-turn sampler.
	// 2. Score: the rubric's reward for every episode.
	// 3. Advantages: group-relative; groups whose rewards are all equal carry no signal (with
	//    dynamic sampling they are dropped and replaced by new tasks).
	t.begun = start
	t.phase(step, "rollouts: %d episodes", t.cfg.Group*t.cfg.TasksPerStep)
	eps, rewards, adv, roll, err := t.collect(step)
	if err != nil {
		return nil, fmt.Errorf("agrl: step %d: %w", step, err)
	}
	rollSeconds := time.Since(start).Seconds()

	// 4. Loss inputs: per-token advantages, sampled log-probs, reference log-probs (only with
	//    a KL penalty) and the normalisation weights, for every minibatch.
	update := time.Now()
	var refScores []TokenScores
	if t.cfg.KL > 0 {
		t.phase(step, "reference log-probs: %d episodes", len(eps))
		if refScores, err = t.ref.Score(tokensOf(eps), t.cfg.Temperature); err != nil {
			return nil, fmt.Errorf("agrl: step %d: reference log-probs: %w", step, err)
		}
	}
	// 5. Update: Epochs passes of Minibatches optimizer steps; the first minibatch's ratio is
	//    exactly 1 (the weights are those that sampled; the old log-probs are its own, detached,
	//    so this holds with LoRA dropout too).
	order := make([]int, len(eps))
	for i := range order {
		order[i] = i
	}
	shuffle := rand.New(rand.NewPCG(t.seedFor("shuffle", step), 0))
	agg := map[string]float64{}
	var upd updateStats
	mismatched := 0          // trained ids that are not the sampled ones (must stay 0)
	var rec *agrl.StepRecord // the step record (at the steps whose trajectories are saved)
	if t.recordAll || every(t.cfg.TrajectoriesEvery, step) || step == 1 {
		rec = t.newStepRecord(step, eps, adv, roll)
	}
	at := "" // the optimizer step the update is at, "update k/n", for OnPhase
	if m, ok := t.learner.(microBatcher); ok && t.onPhase != nil {
		m.onMicroBatches(func(done, total int) { t.phase(step, "%s: micro-batch %d of %d done", at, done, total) })
		defer m.onMicroBatches(nil)
	}
	for epoch := 0; epoch < t.cfg.Epochs; epoch++ {
		if epoch > 0 {
			shuffle.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for mb := 0; mb < t.cfg.Minibatches; mb++ {
			idx := order[mb*len(order)/t.cfg.Minibatches : (mb+1)*len(order)/t.cfg.Minibatches]
			batch := t.batch(eps, adv, refScores, idx, epoch == 0 && mb == 0)
			if epoch == 0 {
				mismatched += batchMismatches(batch, eps, idx)
			}
			var pass *agrl.StepPass
			if rec != nil {
				if pass, err = t.recordPass(batch, idx, epoch, mb, epoch == 0 && mb == 0); err != nil {
					return nil, fmt.Errorf("agrl: step %d: step record: %w", step, err)
				}
			}
			at = fmt.Sprintf("update %d/%d", epoch*t.cfg.Minibatches+mb+1, t.cfg.Epochs*t.cfg.Minibatches)
			t.phase(step, "%s", at)
			st, err := t.learner.Step(batch)
			if err != nil {
				return nil, fmt.Errorf("agrl: step %d: update: %w", step, err)
			}
			if pass != nil {
				pass.Loss, pass.GradNorm, pass.Metrics = st.Loss, st.GradNorm, st.Metrics
				rec.Passes = append(rec.Passes, *pass)
			}
			if bad(st.Loss) || bad(st.GradNorm) {
				return nil, fmt.Errorf("agrl: step %d: the loss (%v) or gradient norm (%v) is not finite; training stopped, the last good checkpoint is in %s", step, st.Loss, st.GradNorm, t.run.CheckpointDir())
			}
			if epoch == 0 && mb == 0 {
				for k, v := range st.Metrics {
					agg[k] = v // diagnostics of the first minibatch (ratio exactly 1 there)
				}
			}
			upd.add(st)
		}
	}
	updSeconds := time.Since(update).Seconds()
	t.step, t.unsaved = step, true

	// 6. Log: one line of metrics with stable names.
	m := t.stepMetrics(eps, rewards, roll)
	m[agrl.MetricStep] = float64(step)
	for _, k := range lossMetrics {
		m[k] = agg[k]
	}
	upd.report(m)
	m[agrl.MetricTokenMismatches] = float64(mismatched)
	total := time.Since(start).Seconds()
	m[agrl.MetricStepSeconds], m[agrl.MetricRolloutSeconds], m[agrl.MetricUpdateSeconds] = total, rollSeconds, updSeconds
	m[agrl.MetricTokensSampled] = float64(roll.generated)
	m[agrl.MetricTokensPerSecond] = float64(roll.tokens+upd.tokens) / total
	t.history = append(t.history, m)
	if err := t.run.LogMetrics(m); err != nil {
		return m, err
	}
	if rec != nil {
		if err := t.run.SaveTrajectories(step, pickTrajectories(eps, 4)); err != nil {
			return m, err
		}
		if err := t.run.SaveStepRecord(rec); err != nil {
			return m, err
		}
		if t.recordAll {
			t.lastRecord = rec // ReplayStep's; a training run keeps none in memory
		}
	}
	return m, nil
}

// newStepRecord starts the step record of step (agrl.StepRecord): its settings, episodes with
// their groups, returns and advantages, and the groups dynamic sampling dropped.
func (t *GRPOTrainer) newStepRecord(step int, eps []*agrl.Episode, adv [][]float64, roll rollStats) *agrl.StepRecord {
	rec := &agrl.StepRecord{Step: step, ClipLow: t.cfg.ClipLow, ClipHigh: t.cfg.ClipHigh, KL: t.cfg.KL,
		KLEstimator: t.cfg.KLEstimator, LossNorm: t.cfg.LossNorm, AdvantageNorm: t.cfg.AdvantageNorm,
		Temperature: t.cfg.Temperature, Group: t.cfg.Group, Dropped: roll.droppedGroups, Pieces: map[int32]string{}}
	if t.pre != nil && t.pre.graph.LoRA() != nil {
		rec.LoRADropout = t.pre.graph.LoRA().Dropout
	}
	for i, ep := range eps {
		rec.Episodes = append(rec.Episodes, agrl.StepEpisode{Group: i / t.cfg.Group, Returns: roll.returns[i], Advantages: adv[i], Episode: ep})
		for _, id := range ep.Tokens {
			if _, ok := rec.Pieces[id]; !ok {
				rec.Pieces[id] = t.model.decode([]int32{id})
			}
		}
	}
	return rec
}

// recordPass scores an optimizer batch with the current weights (just before its update) and
// returns the pass's loss inputs for the step record.
func (t *GRPOTrainer) recordPass(b TrainBatch, idx []int, epoch, mb int, fresh bool) (*agrl.StepPass, error) {
	sc, err := t.model.Score(b.Tokens, t.cfg.Temperature)
	if err != nil {
		return nil, err
	}
	p := &agrl.StepPass{Epoch: epoch, Minibatch: mb, Episodes: slices.Clone(idx),
		Mask: b.Values[valMask], Adv: b.Values[valAdv], Old: b.Values[valOldLogp], Ref: b.Values[valRefLogp],
		Weight: b.Values[valWeight], Fresh: fresh}
	for k, s := range sc {
		n := len(b.Tokens[k])
		lp, en := make([]float32, n), make([]float32, n)
		copy(lp[1:], s.LogProbs) // Score's entry j-1 is about token j
		copy(en[1:], s.Entropy)
		p.LogProbs, p.Entropy = append(p.LogProbs, lp), append(p.Entropy, en)
	}
	return p, nil
}

// batchMismatches counts the token ids of an optimizer batch's trained positions (mask 1) that
// differ from the ids the sampler emitted for the episodes at idx (their turns' Sampled; see
// agrl.Episode.TokenMismatches): what the trainer consumes, checked against the sampler's own
// record. Rows whose mask is all 0 (MaskTruncated) train on nothing and are skipped, as are
// episodes without a sampled record.
func batchMismatches(b TrainBatch, eps []*agrl.Episode, idx []int) int {
	n := 0
	for k, i := range idx {
		trained := agrl.Episode{Tokens: b.Tokens[k], Turns: eps[i].Turns}
		any := false
		for _, v := range b.Values[valMask][k] {
			trained.LossMask = append(trained.LossMask, uint8(v))
			any = any || v != 0
		}
		if !any {
			continue
		}
		if d, ok := trained.TokenMismatches(); ok {
			n += d
		}
	}
	return n
}

// updateStats accumulates the optimizer steps of one GRPO step.
type updateStats struct {
	n, tokens                   int
	loss, gradNorm, gradMax, lr float64
}

func (u *updateStats) add(st agrl.StepStats) {
	u.n++
	u.tokens += st.Tokens
	u.loss += st.Loss
	u.gradNorm += st.GradNorm
	u.gradMax = math.Max(u.gradMax, st.GradNorm)
	u.lr = st.LR
}

// report sets MetricLoss and MetricGradNorm (means over the optimizer steps), MetricGradNormMax,
// MetricLR (the last step's) and MetricTokensTrained (their sum).
func (u *updateStats) report(m agrl.Metrics) {
	n := float64(max(u.n, 1))
	m[agrl.MetricLoss], m[agrl.MetricGradNorm], m[agrl.MetricGradNormMax] = u.loss/n, u.gradNorm/n, u.gradMax
	m[agrl.MetricLR], m[agrl.MetricTokensTrained] = u.lr, float64(u.tokens)
}

// checkFinite returns an error when a model weight holds NaN or Inf.
func (p *Policy) checkFinite() error {
	for _, w := range p.arch.weightSpecs() {
		v := p.store.GetVariable(lmScope + "/" + w.name)
		if v == nil {
			continue
		}
		val, err := v.Value()
		if err != nil {
			return err
		}
		for _, x := range tensors.MustCopyFlatData[float32](val) {
			if bad(float64(x)) {
				return fmt.Errorf("weight %s holds %v", w.name, x)
			}
		}
	}
	return nil
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

func tokensOf(eps []*agrl.Episode) [][]int32 {
	out := make([][]int32, len(eps))
	for i, ep := range eps {
		out[i] = ep.Tokens
	}
	return out
}

// rollStats accumulates the sampling work and group statistics of one step.
type rollStats struct {
	groups, zeroStd, refills, dropped int
	tokens, generated                 int
	seconds                           float64
	// With a curriculum: the weights the tasks were drawn with, and per difficulty the groups
	// sampled (every round) and those whose rewards were not all equal.
	weights        map[agrl.Difficulty]float64
	byDiff, signal map[agrl.Difficulty]int
	// With task screening: what it predicted for the first round.
	screen screenStats
	// returns are the kept episodes' returns (aligned with them); droppedGroups the groups
	// dynamic sampling left out (for the step record).
	returns       [][]float64
	droppedGroups []agrl.DroppedGroup
}

// curriculumWeights computes the step's task weights from the curriculum counts logged over the
// last Curriculum steps (a function of the history alone, so a resumed run draws the same).
func (t *GRPOTrainer) curriculumWeights() (map[agrl.Difficulty]float64, error) {
	groups, signal := map[agrl.Difficulty]int{}, map[agrl.Difficulty]int{}
	from := max(0, len(t.history)-t.cfg.Curriculum)
	for _, m := range t.history[from:] {
		for _, d := range []agrl.Difficulty{agrl.Easy, agrl.Medium, agrl.Hard} {
			groups[d] += int(m[agrl.MetricCurriculumGroups(d)])
			signal[d] += int(m[agrl.MetricCurriculumSignal(d)])
		}
	}
	return agrl.CurriculumWeights(t.cfg.Mix.Fractions(), groups, signal)
}

// collect samples and scores the step's groups (refilling all-equal groups when dynamic
// sampling is on) and returns episodes, rewards and advantages aligned with each other.
func (t *GRPOTrainer) collect(step int) ([]*agrl.Episode, []float64, [][]float64, rollStats, error) {
	var st rollStats
	G, want := t.cfg.Group, t.cfg.TasksPerStep
	mix := t.cfg.Mix
	if t.cfg.Curriculum > 0 {
		w, err := t.curriculumWeights()
		if err != nil {
			return nil, nil, nil, st, err
		}
		for d, v := range w {
			mix = mix.Weight(d, v)
		}
		st.weights, st.byDiff, st.signal = w, map[agrl.Difficulty]int{}, map[agrl.Difficulty]int{}
	}
	stream, err := mix.Seed(t.seedFor("tasks", step)).Stream(t.env, agrl.Train)
	if err != nil {
		return nil, nil, nil, st, err
	}
	var eps []*agrl.Episode
	var rewards []float64
	var adv [][]float64
	for round := 0; len(eps) < want*G && round < 4; round++ {
		need := want - len(eps)/G
		if round > 0 {
			st.refills++
		}
		tasks, err := t.drawTasks(stream, need, &st.screen)
		if err != nil {
			return nil, nil, nil, st, err
		}
		batch := make([]agrl.Task, 0, need*G)
		for _, task := range tasks {
			for range G {
				batch = append(batch, task)
			}
		}
		opt := t.rolloutOptions(true, t.seedFor(fmt.Sprintf("rollout-%d", round), step))
		if t.onPhase != nil {
			opt.Progress = func(done, total int) { t.phase(step, "rollouts: %d of %d episodes done", done, total) }
		}
		got, rst, err := t.model.Rollout(t.env, batch, opt)
		if err != nil {
			return nil, nil, nil, st, err
		}
		st.tokens += rst.Tokens
		st.generated += rst.Generated
		st.seconds += rst.Seconds
		r := make([]float64, len(got))
		for i, ep := range got {
			if r[i], err = t.rubric.Score(ep); err != nil {
				return nil, nil, nil, st, err
			}
		}
		// Advantages per episode and turn, from the returns: one per episode (its reward) unless
		// a discount, per-turn rewards or turn-level credit call for each turn's return.
		perTurn := t.cfg.Gamma != 1 || t.cfg.TurnAdvantages || t.rubric.HasTurnTerms()
		rets := make([][]float64, len(got))
		for i, ep := range got {
			rets[i] = []float64{r[i]}
			if perTurn {
				if rets[i], err = t.rubric.Returns(ep, t.cfg.Gamma); err != nil {
					return nil, nil, nil, st, err
				}
			}
		}
		ta, gs, err := agrl.GroupTurnAdvantages(rets, G, t.cfg.AdvantageNorm)
		if err != nil {
			return nil, nil, nil, st, err
		}
		a := make([]float64, len(ta))
		for i := range ta {
			a[i] = ta[i][0]
			if !t.cfg.TurnAdvantages {
				ta[i] = ta[i][:1]
			}
		}
		if round == 0 {
			st.groups, st.zeroStd = gs.Groups, gs.ZeroStd
		}
		for gi := 0; gi < len(got); gi += G {
			allEqual := true
			for _, v := range a[gi : gi+G] {
				allEqual = allEqual && v == 0
			}
			if st.byDiff != nil {
				st.byDiff[got[gi].Task.Difficulty]++
				if !allEqual {
					st.signal[got[gi].Task.Difficulty]++
				}
			}
			if t.cfg.DynamicSampling && allEqual && round < 3 {
				st.dropped++
				st.droppedGroups = append(st.droppedGroups, agrl.DroppedGroup{Round: round, Task: got[gi].Task, Rewards: slices.Clone(r[gi : gi+G])})
				continue
			}
			eps = append(eps, got[gi:gi+G]...)
			rewards = append(rewards, r[gi:gi+G]...)
			adv = append(adv, ta[gi:gi+G]...)
			st.returns = append(st.returns, rets[gi:gi+G]...)
		}
		if !t.cfg.DynamicSampling {
			break
		}
	}
	return eps, rewards, adv, st, nil
}

// batch builds the optimizer batch of the episodes at idx: per-token mask, advantage, old and
// reference log-probs (0 when ref is nil: KL(0) scores no reference), and the normalisation
// weights of the loss.
func (t *GRPOTrainer) batch(eps []*agrl.Episode, adv [][]float64, ref []TokenScores, idx []int, fresh bool) TrainBatch {
	b := TrainBatch{Values: map[string][][]float32{}}
	masks := make([][]float32, len(idx))
	seqTokens := make([]int, len(idx))
	total := 0
	for k, i := range idx {
		ep := eps[i]
		m := make([]float32, len(ep.Tokens))
		if !(t.cfg.MaskTruncated && ep.Termination == agrl.TokenBudget) {
			for j, v := range ep.LossMask {
				m[j] = float32(v)
				seqTokens[k] += int(v)
			}
		}
		masks[k] = m
		total += seqTokens[k]
	}
	budget := t.resolved.MaxTokens
	freshVal := float32(b2f(fresh))
	for k, i := range idx {
		ep := eps[i]
		n := len(ep.Tokens)
		a, old, rf, w, fr := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		// Normalisation, over the whole optimizer batch (never per shard or chunk):
		// token-mean divides by all policy tokens of the batch; seq-mean by each sequence's
		// tokens and the number of sequences (fully masked ones included, as NormalizeLoss);
		// Dr. GRPO by sequences × budget.
		var scale float64
		switch t.cfg.LossNorm {
		case agrl.SeqMean:
			if seqTokens[k] > 0 {
				scale = 1 / (float64(seqTokens[k]) * float64(len(idx)))
			}
		case agrl.ConstNorm:
			scale = 1 / (float64(len(idx)) * float64(budget))
		default:
			if total > 0 {
				scale = 1 / float64(total)
			}
		}
		// An episode's advantage, or with turn-level credit its turn's: the k-th run of policy
		// tokens is turn k (a run past the last turn's advantage takes the last).
		turnOf := make([]int, n)
		if len(adv[i]) > 1 {
			for k, sp := range agrl.TurnSpans(ep.LossMask) {
				for j := sp[0]; j < sp[1]; j++ {
					turnOf[j] = min(k, len(adv[i])-1)
				}
			}
		}
		for j := range n {
			fr[j] = freshVal
			if j > 0 && ref != nil {
				rf[j] = ref[i].LogProbs[j-1] // Score's entry j-1 is about token j
			}
			if masks[k][j] == 0 {
				continue
			}
			a[j] = float32(adv[i][turnOf[j]])
			old[j] = ep.LogProbs[j]
			w[j] = float32(scale)
		}
		b.Tokens = append(b.Tokens, ep.Tokens)
		b.Values[valMask] = append(b.Values[valMask], masks[k])
		b.Values[valAdv] = append(b.Values[valAdv], a)
		b.Values[valOldLogp] = append(b.Values[valOldLogp], old)
		b.Values[valRefLogp] = append(b.Values[valRefLogp], rf)
		b.Values[valWeight] = append(b.Values[valWeight], w)
		b.Values[valFresh] = append(b.Values[valFresh], fr)
	}
	return b
}

// stepMetrics computes the episode-level metrics of a step (reward, success, length, turns,
// truncation, tool use, invalid actions, zero-std groups; see Step for their meanings).
func (t *GRPOTrainer) stepMetrics(eps []*agrl.Episode, rewards []float64, st rollStats) agrl.Metrics {
	m := agrl.Metrics{}
	n := float64(len(eps))
	mean, sq := 0.0, 0.0
	for _, r := range rewards {
		mean += r
	}
	mean /= n
	for _, r := range rewards {
		sq += (r - mean) * (r - mean)
	}
	m[agrl.MetricReward], m[agrl.MetricRewardStd] = mean, math.Sqrt(sq/n)
	comp := map[string]float64{}
	var success, length, turns, truncated, callEps, calls, callErrs, actions, invalid, errQuit, repeated float64
	for _, ep := range eps {
		for _, r := range ep.Rewards {
			comp[r.Name] += r.Value / n
		}
		success += b2f(ep.Correct)
		for _, v := range ep.LossMask {
			length += float64(v)
		}
		turns += float64(len(ep.Turns))
		truncated += b2f(ep.Termination == agrl.TokenBudget)
		callEps += b2f(ep.ToolCalls() > 0)
		calls += float64(ep.ToolCalls())
		callErrs += float64(ep.ToolErrors())
		actions += float64(len(ep.Turns))
		invalid += float64(ep.InvalidActions())
		errQuit += agrl.ErrorThenQuit(ep)
		repeated += agrl.RepeatedToolCalls(ep)
	}
	for k, v := range comp {
		m[agrl.MetricRewardTerm(k)] = v
	}
	m[agrl.MetricSuccess] = success / n
	m[agrl.MetricResponseLength] = length / n
	m[agrl.MetricTurns] = turns / n
	m[agrl.MetricTruncated] = truncated / n
	m[agrl.MetricToolCallRate] = callEps / n
	m[agrl.MetricToolErrorRate] = ratio(callErrs, calls)
	m[agrl.MetricInvalidRate] = ratio(invalid, actions)
	m[agrl.MetricErrorThenQuit] = errQuit / n
	m[agrl.MetricRepeatedToolCalls] = ratio(repeated, calls)
	m[agrl.MetricTopAnswerShare] = agrl.TopAnswerShare(eps)
	m[agrl.MetricFracRewardZeroStd] = ratio(float64(st.zeroStd), float64(st.groups))
	m[agrl.MetricRefills], m[agrl.MetricDroppedGroups] = float64(st.refills), float64(st.dropped)
	m[agrl.MetricEpisodes] = n
	if st.screen.on {
		m[agrl.MetricScreenSignal], m[agrl.MetricScreenPoolSignal], m[agrl.MetricScreenQ] = st.screen.signal, st.screen.pool, st.screen.chosen
		m[agrl.MetricScreenCandidates] = st.screen.candidates
	}
	for d, w := range st.weights {
		m[agrl.MetricCurriculumWeight(d)] = w
		m[agrl.MetricCurriculumGroups(d)] = float64(st.byDiff[d])
		m[agrl.MetricCurriculumSignal(d)] = float64(st.signal[d])
	}
	return m
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// pickTrajectories keeps up to k successes and k failures (the lowest rewards first).
func pickTrajectories(eps []*agrl.Episode, k int) []*agrl.Episode {
	var wins, losses []*agrl.Episode
	for _, ep := range eps {
		if ep.Correct {
			wins = append(wins, ep)
		} else {
			losses = append(losses, ep)
		}
	}
	sort.SliceStable(losses, func(i, j int) bool { return losses[i].Reward < losses[j].Reward })
	return append(wins[:min(k, len(wins))], losses[:min(k, len(losses))]...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TrainSeeds trains g once for each seed, into OUT/seed-S where OUT is g's run directory, one
// after the other, and compares the runs (agrl.CompareSeeds: success before and after GRPO and
// the gain, as mean ± 95% interval over the seeds). A seed's directory that holds a checkpoint
// is resumed, as Build does; a failed run stops the series with its error.
//
//	runs, st, err := learn.TrainSeeds(ctx, calc.Recipe().Out("runs/seeds"), 201, 202, 203)
//	nb.SeedTable(st)
func TrainSeeds(ctx context.Context, g agrl.GRPO, seeds ...uint64) ([]*agrl.Run, agrl.SeedStats, error) {
	if len(seeds) == 0 {
		return nil, agrl.SeedStats{}, errors.New("agrl: TrainSeeds of no seeds")
	}
	root := g.Spec().Out
	if root == "" {
		return nil, agrl.SeedStats{}, errors.New("agrl: TrainSeeds needs the configuration's Out directory")
	}
	var runs []*agrl.Run
	for _, seed := range seeds {
		dir := filepath.Join(root, fmt.Sprintf("seed-%d", seed))
		tr, err := Build(g.Seed(seed).Out(dir))
		if err != nil {
			return runs, agrl.SeedStats{}, fmt.Errorf("seed %d: %w", seed, err)
		}
		if _, err := tr.Train(ctx); err != nil {
			return runs, agrl.SeedStats{}, fmt.Errorf("seed %d: %w", seed, err)
		}
		run, err := agrl.OpenRun(dir)
		if err != nil {
			return runs, agrl.SeedStats{}, err
		}
		runs = append(runs, run)
	}
	st, err := agrl.CompareSeeds(filepath.Base(root), runs)
	return runs, st, err
}
