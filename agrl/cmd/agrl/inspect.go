package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/agrl/learn"
)

// cmdInspect opens one recorded GRPO update of a run: the metrics re-derived from its step
// record next to the logged ones, its groups (rewards → advantages, and why), and one episode
// token by token (agrl.InspectStep). It fails when the re-derivation does not match the log.
func cmdInspect(args []string, stdout, stderr io.Writer) error {
	return inspect(args, stdout, stderr, false)
}

// inspect is cmdInspect; filled: the command line already holds the flags -replay took from
// the run's config.json.
func inspect(args []string, stdout, stderr io.Writer, filled bool) error {
	fs := newFlags("inspect", stderr)
	// -replay rebuilds the run's configuration from agrl train's flags (their defaults: the
	// recipe of the run's env, then the run's own values where one flag sets one setting), as
	// resuming does.
	if dir := flagValue(args, "run"); dir != "" && flagValue(args, "env") == "" {
		if run, err := agrl.OpenRun(dir); err == nil && run.Config.Env != "" {
			args = append([]string{"--env", run.Config.Env}, args...)
		}
	}
	var f trainFlags
	f.register(fs, args)
	replay := fs.Bool("replay", false, "re-run the step from the newest checkpoint before it (any step, recorded or not) and check that it reproduces the log; the flags of agrl train that set one setting each (-kl, -sft-steps, -lr…) default to the run's (config.json); give the others it was trained with (-mix, -model…)")
	runDir := fs.String("run", "", "the run directory")
	step := fs.Int("step", 0, "the GRPO step (0: the newest recorded one); steps are recorded with the trajectories (step 1 and every -trajectories-every)")
	ep := fs.Int("episode", -1, "the episode shown token by token (default: the largest advantage of the first group with signal)")
	all := fs.Bool("all", false, "show every token of the episode, not only those in the loss")
	asJSON := fs.Bool("json", false, "print the inspection as JSON (groups, re-derived and logged metrics, the episode's tokens)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var problems []error
	if *runDir == "" {
		problems = append(problems, errors.New("-run is required"))
	}
	if *step < 0 {
		problems = append(problems, fmt.Errorf("-step %d: want a step number >= 1 (0: the newest recorded)", *step))
	}
	if *ep < -1 {
		problems = append(problems, fmt.Errorf("-episode %d: want an episode number >= 0 (or leave it out: the largest advantage of the first group with signal)", *ep))
	}
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
	}
	if *replay {
		if !filled {
			given := map[string]bool{}
			fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
			fill, err := runFlags(f, *runDir, given, stderr)
			if err != nil {
				return err
			}
			if len(fill) > 0 {
				report := stdout
				if *asJSON {
					report = stderr
				}
				fmt.Fprintf(report, "replaying with the run's settings (its %s) where no flag gave them: %s\n", agrl.RunConfigFile, strings.Join(fill, " "))
				return inspect(append(fill, args...), stdout, stderr, true)
			}
		}
		return inspectReplay(f, *runDir, *step, *ep, *all, *asJSON, stdout, stderr)
	}
	if *step == 0 {
		run, err := agrl.OpenRun(*runDir)
		if err != nil {
			return err
		}
		steps, err := run.StepRecordSteps()
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			_, err := run.StepRecord(1) // the error that says why
			return err
		}
		*step = steps[len(steps)-1]
	}
	s, err := agrl.InspectStep(*runDir, *step)
	if err != nil {
		return err
	}
	return showInspection(stdout, s, *ep, *all, *asJSON)
}

// showInspection prints an inspection as text or JSON with episode ep token by token (-1: the
// largest advantage of the first group with signal), and returns Check's verdict.
func showInspection(stdout io.Writer, s *agrl.StepInspection, ep int, all, asJSON bool) error {
	step := s.Record.Step
	if ep < 0 {
		ep = s.TopEpisode()
	}
	if ep >= len(s.Record.Episodes) {
		return usageError{fmt.Errorf("-episode %d: step %d has episodes 0..%d", ep, step, len(s.Record.Episodes)-1)}
	}
	if asJSON {
		_, toks := s.EpisodeTokens(ep)
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Step    int                `json:"step"`
			Logged  map[string]float64 `json:"logged"`
			Derived map[string]float64 `json:"derived"`
			Groups  []agrl.GroupView   `json:"groups"`
			Episode int                `json:"episode"`
			Tokens  []agrl.TokenTerm   `json:"tokens"`
		}{step, pick(s.Logged), s.Derived, s.Groups, ep, toks}); err != nil {
			return err
		}
	} else if err := s.WriteText(stdout, ep, all); err != nil {
		return err
	}
	return s.Check(1e-5)
}

// pick keeps the logged metrics that InspectStep re-derives.
func pick(m agrl.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, k := range agrl.InspectedMetrics {
		out[k] = m[k]
	}
	return out
}

// inspectReplay is agrl inspect -replay: learn.ReplayStep on the configuration the train flags
// describe, then the replayed step's inspection and what the replay did not reproduce.
func inspectReplay(f trainFlags, runDir string, step, ep int, all, asJSON bool, stdout, stderr io.Writer) error {
	run, err := agrl.OpenRun(runDir)
	if err != nil {
		return err
	}
	if step == 0 {
		if len(run.Metrics) == 0 {
			return fmt.Errorf("%s logged no GRPO step", runDir)
		}
		step = run.Metrics[len(run.Metrics)-1].Step()
	}
	f.out = runDir
	f.quiet = true
	g, err := f.config(stderr)
	if err != nil {
		return err
	}
	r, err := learn.ReplayStep(g, step)
	var mismatch *agrl.ResumeMismatchError
	if errors.As(err, &mismatch) { // in ReplayStep's copy of the run: name the run itself
		var b strings.Builder
		fmt.Fprintf(&b, "the flags describe other settings than those %s was trained with (the run's → the flags'):", runDir)
		for _, c := range mismatch.Changes {
			b.WriteString("\n  " + c.String())
		}
		if mismatch.Model {
			b.WriteString("\nthe model is the run's: leave out the flags that change it")
		} else {
			b.WriteString("\n-replay re-runs a step as the run took it: leave out these flags, or give the values the run was trained with")
		}
		return usageError{errors.New(b.String())}
	}
	if err != nil {
		return err
	}
	if ep >= len(r.Inspection.Record.Episodes) { // before the report: a bad flag is a usage error
		return usageError{fmt.Errorf("-episode %d: step %d has episodes 0..%d", ep, step, len(r.Inspection.Record.Episodes)-1)}
	}
	report := stdout
	if asJSON {
		report = stderr // stdout holds the JSON alone
	}
	fmt.Fprintf(report, "replayed step %d from the checkpoint of step %d (%d step(s) re-run): ", step, r.From, r.Steps)
	if err := r.Err(); err != nil {
		fmt.Fprintf(report, "%d differences from the run\n", len(r.Differences))
		for _, d := range r.Differences {
			fmt.Fprintln(report, "  "+d)
		}
	} else {
		fmt.Fprintln(report, "every metric as logged, bit for bit (timings aside)")
	}
	return errors.Join(r.Err(), showInspection(stdout, r.Inspection, ep, all, asJSON))
}

// settingFlags are the train flags that set one setting of config.json each, by its dotted
// path (-seed also seeds the model and the warm start, which follow it).
var settingFlags = map[string]string{
	"steps": "steps", "group": "group", "tasks_per_step": "tasks", "warm_start.sft.steps": "sft-steps",
	"warm_start.sft.batch": "sft-batch", "warm_start.episodes": "demos", "warm_start.sft.optimizer.lr": "sft-lr",
	"eval_tasks": "eval-tasks", "eval_every": "eval-every", "max_tokens": "max-tokens",
	"max_action_tokens": "max-action-tokens", "optimizer.lr": "lr", "kl": "kl", "clip_low": "clip",
	"clip_high": "clip-high", "temperature": "temperature", "eval_temperature": "eval-temperature",
	"seed": "seed", "dynamic_sampling": "dynamic", "curriculum": "curriculum", "screen": "screen",
	"stop_on_plateau": "stop-on-plateau", "gamma": "gamma", "turn_advantages": "turn-advantages",
	"trajectories_every": "trajectories-every", "checkpoint_every": "checkpoint-every",
}

// runFlags returns the train flags ("-kl=0") that give the settings of the run in dir (its
// config.json) where the command line did not give the flag (given) and f's settings differ
// from the run's: -replay then rebuilds the run's configuration without every flag it was
// trained with. Settings no single flag sets are left to ReplayStep, which names them.
func runFlags(f trainFlags, dir string, given map[string]bool, stderr io.Writer) ([]string, error) {
	run, err := agrl.OpenRun(dir)
	if err != nil || len(run.ConfigJSON) == 0 {
		return nil, nil // inspectReplay says what is wrong with the directory
	}
	f.quiet = true
	g, err := f.config(stderr)
	if err != nil {
		return nil, err
	}
	binding, _, err := g.ResumeChanges(run.ConfigJSON)
	if err != nil {
		return nil, err
	}
	var out []string
	noWarmStart := false
	for _, c := range binding {
		name, ok := settingFlags[c.Setting]
		if !ok || given[name] {
			continue
		}
		if strings.HasPrefix(c.Setting, "warm_start.") && c.Old == nil {
			noWarmStart = true // the run had none: -sft-steps 0 says so, the rest is moot
			continue
		}
		var v string
		switch x := c.Old.(type) { // the run's value
		case nil: // left out of config.json at its zero value (γ at 1)
			v = "0"
			if c.Setting == "gamma" {
				v = "1"
			} else if _, isBool := c.New.(bool); isBool {
				v = "false"
			}
		case float64:
			v = strconv.FormatFloat(x, 'f', -1, 64) // whole numbers without an exponent
			if c.Setting == "seed" {
				v = strconv.FormatUint(run.Config.Seed, 10) // past 2^53 a float64 rounds it
			}
		case bool:
			v = strconv.FormatBool(x)
		default:
			continue
		}
		out = append(out, "-"+name+"="+v)
		if name == "clip" && !given["clip-high"] { // -clip alone sets both sides
			out = append(out, "-clip-high="+strconv.FormatFloat(run.Config.ClipHigh, 'f', -1, 64))
		}
	}
	if noWarmStart && !given["sft-steps"] {
		out = append(out, "-sft-steps=0")
	}
	out = slices.Compact(slices.Sorted(slices.Values(out)))
	return out, nil
}

// flagValue returns the value of flag name in a command line ("-name v", "--name=v"…; the
// last one given, as the flag package takes it), or "".
func flagValue(args []string, name string) string {
	v := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") { // a flag's value, or a stray argument
			continue
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if val, ok := strings.CutPrefix(a, name+"="); ok {
			v = val
		} else if a == name && i+1 < len(args) {
			v = args[i+1]
			i++
		}
	}
	return v
}
