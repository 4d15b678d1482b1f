// Command agrl is the command-line front end of agrl.
//
//	agrl envs                                   list the built-in environments
//	agrl sample --env calc --difficulty hard -n 3 [--seed S] [--split dev] [--agent expert|random] [--json]
//	                                            print tasks and an episode of the expert (or the random
//	                                            baseline) with its reward breakdown
//
// Every command prints its flags with -h.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"agrl.dev/agrl"
	"agrl.dev/envs"
)

func main() {
	setMemoryLimit()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `agrl trains small language-model agents on tool-calling tasks with GRPO.

Usage:
  agrl envs                 list the built-in environments
  agrl sample [flags]       print tasks with an expert (or random) episode and its rewards
  agrl train [flags]        warm start (SFT) then GRPO; writes a run directory and report.html
  agrl eval -run DIR        evaluate a run's newest checkpoint on a split (pass@k with -k)
  agrl sweep -grid G        train a grid of settings from one shared warm start; compare them
  agrl model random|export  write a random model directory of a real shape; export a pretrained run
  agrl play [-run DIR]      play an environment yourself, or step a run's checkpoint through it
  agrl inspect -run DIR     open a recorded GRPO update: groups, advantages, every token's loss terms

Run "agrl COMMAND -h" for a command's flags.
`

// run executes one command line and returns the process exit code: 0 on success, 1 when the
// command failed, 2 for bad usage (every problem of the command line and of the configuration
// it describes, reported at once), 128+signal when a signal stopped it (130 for SIGINT).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "envs":
		err = cmdEnvs(args[1:], stdout, stderr)
	case "sample":
		err = cmdSample(args[1:], stdout, stderr)
	case "train":
		err = cmdTrain(args[1:], stdout, stderr)
	case "eval":
		err = cmdEval(args[1:], stdout, stderr)
	case "sweep":
		err = cmdSweep(args[1:], stdout, stderr)
	case "model":
		err = cmdModel(args[1:], stdout, stderr)
	case "play":
		err = cmdPlay(args[1:], stdout, stderr)
	case "inspect":
		err = cmdInspect(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "agrl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	var ie interrupted
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "agrl %s: %v\n", args[0], err)
		return 2
	case errors.As(err, &ie):
		fmt.Fprintf(stderr, "agrl %s: %v\n", args[0], err)
		return ie.sig.code()
	default:
		fmt.Fprintf(stderr, "agrl %s: %v\n", args[0], err)
		return 1
	}
}

// usageError marks errors in the command line itself (exit code 2).
type usageError struct{ error }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("agrl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

func cmdEnvs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("envs", stderr)
	asJSON := fs.Bool("json", false, "print JSON (name, doc, tools, max_turns)")
	if err := parse(fs, args); err != nil {
		return err
	}
	type info struct {
		Name     string      `json:"name"`
		Doc      string      `json:"doc"`
		Tools    []agrl.Tool `json:"tools"`
		MaxTurns int         `json:"max_turns"`
	}
	var all []info
	for _, e := range envs.All() {
		env := e.New()
		all = append(all, info{e.Name, e.Doc, env.Tools(), env.MaxTurns()})
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOOLS\tMAX TURNS\tDESCRIPTION")
	for _, e := range all {
		var tools []string
		for _, t := range e.Tools {
			tools = append(tools, t.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", e.Name, strings.Join(tools, ","), e.MaxTurns, e.Doc)
	}
	return tw.Flush()
}

func cmdSample(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sample", stderr)
	envName := fs.String("env", "calc", "environment: "+strings.Join(envs.Names(), ", "))
	diff := fs.String("difficulty", "mix", "easy, medium, hard, extreme, or mix (the default 20/50/30 mix)")
	splitName := fs.String("split", "dev", "train, dev or test (extreme tasks are always the ood split)")
	n := fs.Int("n", 3, "number of tasks")
	seed := fs.Uint64("seed", 1, "seed of the task mix and of the random agent")
	agentName := fs.String("agent", "expert", "who plays the episodes: expert or random")
	asJSON := fs.Bool("json", false, "print one JSON episode per line")
	if err := parse(fs, args); err != nil {
		return err
	}

	var problems []error
	entry, err := envs.Get(*envName)
	if err != nil {
		problems = append(problems, err)
	}
	split, err := agrl.ParseSplit(*splitName)
	if err != nil {
		problems = append(problems, err)
	}
	mix := agrl.NewMix(*seed)
	if *diff != "mix" {
		d, err := agrl.ParseDifficulty(*diff)
		switch {
		case err != nil:
			problems = append(problems, err)
		case d == agrl.Extreme:
			split = agrl.OOD
		default:
			mix = mix.Only(d)
		}
	}
	if *n < 1 || *n > 10000 {
		problems = append(problems, fmt.Errorf("-n %d: want 1..10000", *n))
	}
	if *agentName != "expert" && *agentName != "random" {
		problems = append(problems, fmt.Errorf("-agent %q: want expert or random", *agentName))
	}
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
	}

	env := entry.New()
	agent := entry.Expert()
	if *agentName == "random" {
		agent = agrl.RandomAgent(*seed, env)
	}
	rubric := entry.Rubric()
	tasks, err := mix.Tasks(env, split, *n)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for i, task := range tasks {
		ep, err := agrl.Play(env, task, agent, agrl.Limits{})
		if err != nil {
			return err
		}
		if _, err := rubric.Score(ep); err != nil {
			return err
		}
		if *asJSON {
			if err := enc.Encode(ep); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printEpisode(stdout, ep, split, *agentName)
	}
	return nil
}

func printEpisode(w io.Writer, ep *agrl.Episode, split agrl.Split, agent string) {
	t := ep.Task
	fmt.Fprintf(w, "== %s (%s, %s)\n", t.ID, t.Difficulty, split)
	fmt.Fprintf(w, "prompt: %s\ngold:   %s\n", indent(ep.Prompt), t.Answer)
	verdict := "wrong"
	if ep.Correct {
		verdict = "correct"
	}
	fmt.Fprintf(w, "-- %s episode: %s, %s, reward %.3f\n", agent, ep.Termination, verdict, ep.Reward)
	for i, turn := range ep.Turns {
		fmt.Fprintf(w, "%3d %s\n", i+1, indent(turn.Text))
		if turn.Observation != "" {
			mark := ""
			if turn.ToolError != "" {
				mark = "  [tool error]"
			}
			fmt.Fprintf(w, "    %s%s\n", indent(agrl.Observation(turn.Observation)), mark)
		}
	}
	var terms []string
	for _, r := range ep.Rewards {
		terms = append(terms, fmt.Sprintf("%s %.3g×%.3g", r.Name, r.Value, r.Weight))
	}
	fmt.Fprintf(w, "rewards: %s\n", strings.Join(terms, "  "))
}

// indent keeps multi-line text aligned under its label.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n        ") }
