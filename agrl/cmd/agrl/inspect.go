package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"agrl.dev/agrl"
)

// cmdInspect opens one recorded GRPO update of a run: the metrics re-derived from its step
// record next to the logged ones, its groups (rewards → advantages, and why), and one episode
// token by token (agrl.InspectStep). It fails when the re-derivation does not match the log.
func cmdInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
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
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
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
	if *ep < 0 {
		*ep = s.TopEpisode()
	}
	if *ep >= len(s.Record.Episodes) {
		return usageError{fmt.Errorf("-episode %d: step %d has episodes 0..%d", *ep, *step, len(s.Record.Episodes)-1)}
	}
	if *asJSON {
		_, toks := s.EpisodeTokens(*ep)
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Step    int                `json:"step"`
			Logged  map[string]float64 `json:"logged"`
			Derived map[string]float64 `json:"derived"`
			Groups  []agrl.GroupView   `json:"groups"`
			Episode int                `json:"episode"`
			Tokens  []agrl.TokenTerm   `json:"tokens"`
		}{*step, pick(s.Logged), s.Derived, s.Groups, *ep, toks}); err != nil {
			return err
		}
	} else if err := s.WriteText(stdout, *ep, *all); err != nil {
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
