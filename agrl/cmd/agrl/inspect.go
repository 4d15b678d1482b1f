package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/agrl/learn"
)

// cmdInspect opens one recorded GRPO update of a run: the metrics re-derived from its step
// record next to the logged ones, its groups (rewards → advantages, and why), and one episode
// token by token (agrl.InspectStep). It fails when the re-derivation does not match the log.
func cmdInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	// -replay rebuilds the run's configuration from agrl train's flags (their defaults: the
	// recipe of the run's env), as resuming does.
	if dir := flagValue(args, "run"); dir != "" && flagValue(args, "env") == "" {
		if run, err := agrl.OpenRun(dir); err == nil && run.Config.Env != "" {
			args = append([]string{"--env", run.Config.Env}, args...)
		}
	}
	var f trainFlags
	f.register(fs, args)
	replay := fs.Bool("replay", false, "re-run the step from the newest checkpoint before it (any step, recorded or not) and check that it reproduces the log; give the flags of agrl train that the run was trained with (those listed here besides -run, -step, -episode, -all, -json)")
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
	if errors.As(err, &mismatch) {
		return usageError{fmt.Errorf("%w\n(-replay needs the flags the run was trained with)", err)}
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
