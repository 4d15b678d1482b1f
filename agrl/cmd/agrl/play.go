package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"agrl.dev/agrl"
	"agrl.dev/agrl/learn"
	"agrl.dev/agrl/llm/agent"
	"agrl.dev/agrl/repl"
	"agrl.dev/envs"
)

// stdin is what `agrl play` reads (tests replace it with a pipe or a pseudo-terminal).
var stdin io.Reader = os.Stdin

// cmdPlay is the REPL: play an environment yourself, or step a trained checkpoint through it.
func cmdPlay(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("play", stderr)
	envName := fs.String("env", "", "environment: "+strings.Join(envs.Names(), ", ")+" (default: the run's, else calc)")
	diff := fs.String("difficulty", "mix", "easy, medium, hard, extreme, or mix")
	splitName := fs.String("split", "dev", "the split tasks are drawn from: train, dev or test")
	seed := fs.Uint64("seed", 1, "seed of the task stream and of the agent's sampling")
	runDir := fs.String("run", "", "a run directory: its newest checkpoint acts (Enter or :step for its next action)")
	temp := fs.Float64("temperature", math.NaN(), "the agent's sampling temperature (default: the run's eval temperature)")
	plain := fs.Bool("plain", false, "plain line input even on a terminal (no line editing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var problems []error
	split, err := agrl.ParseSplit(*splitName)
	if err != nil {
		problems = append(problems, err)
	}
	var only agrl.Difficulty
	if *diff != "mix" {
		if only, err = agrl.ParseDifficulty(*diff); err != nil {
			problems = append(problems, err)
		}
	}
	if !math.IsNaN(*temp) && (math.IsInf(*temp, 0) || *temp < 0) {
		problems = append(problems, fmt.Errorf("-temperature %v: want >= 0", *temp))
	}
	var run *agrl.Run
	if *runDir != "" {
		if run, err = agrl.OpenRun(*runDir); err != nil {
			problems = append(problems, err)
		} else if run.Config.Env == "" {
			problems = append(problems, fmt.Errorf("%s: config.json does not describe a GRPO run", *runDir))
		} else if *envName != "" && *envName != run.Config.Env {
			problems = append(problems, fmt.Errorf("-env %s: the run %s trained on %s", *envName, *runDir, run.Config.Env))
		} else {
			*envName = run.Config.Env
		}
	}
	if *envName == "" {
		*envName = "calc"
	}
	entry, err := envs.Get(*envName)
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return usageError{errors.Join(problems...)}
	}
	env := entry.New()
	o := repl.Options{Env: env, Rubric: entry.Rubric(), FromText: entry.TaskFromText, Seed: *seed,
		Tasks: func(n int, d agrl.Difficulty) (agrl.Task, error) {
			if d == 0 {
				d = only
			}
			mix, sp := agrl.NewMix(*seed), split
			switch {
			case d == agrl.Extreme:
				sp = agrl.OOD
			case d != 0:
				mix = mix.Only(d)
			}
			tasks, err := mix.Tasks(env, sp, n+1)
			if err != nil {
				return agrl.Task{}, err
			}
			return tasks[n], nil
		}}
	if run != nil {
		a, ck, err := loadPlayAgent(*runDir, run.Config, env.Tools())
		if err != nil {
			return err
		}
		o.Agent, o.Temperature = a, run.Config.EvalTemperature
		o.Limits = agrl.Limits{MaxTurns: run.Config.MaxTurns}
		if !math.IsNaN(*temp) {
			o.Temperature = *temp
		}
		fmt.Fprintf(stdout, "agent: %s at %s, temperature %g\n", *runDir, ck, o.Temperature)
	}
	edit := false
	out, outIsFile := stdout.(*os.File)
	if f, ok := stdin.(*os.File); ok && !*plain && repl.IsTerminal(f.Fd()) && outIsFile && repl.IsTerminal(out.Fd()) {
		restore, err := repl.MakeRaw(f.Fd())
		if err == nil {
			defer restore()
			// The editor reads Ctrl-C as a key; a signal from outside (SIGTERM, SIGHUP) must
			// not leave the terminal raw.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
			defer func() { signal.Stop(sigs); close(sigs) }()
			go func() {
				if sig, ok := <-sigs; ok {
					_ = restore()
					fmt.Fprintf(stderr, "\nagrl play: %v\n", sig)
					os.Exit(128 + int(sig.(syscall.Signal)))
				}
			}()
			edit = true
		}
		o.Color = true
	}
	s, err := repl.New(o)
	if err != nil {
		return err
	}
	return repl.Run(s, stdin, stdout, edit)
}

// playAgent is a Tiny checkpoint as the REPL's agent.
type playAgent struct {
	p         *learn.Policy
	maxAction int
}

// loadPlayAgent loads the newest checkpoint of the run in dir as the REPL's agent: a Tiny
// policy, or a pretrained model with the run's LoRA adapters (in its chat format; no :why).
func loadPlayAgent(dir string, cfg agrl.GRPOConfig, tools []agrl.Tool) (repl.Agent, learn.CheckpointInfo, error) {
	ckdir := filepath.Join(dir, agrl.RunCheckpointsDir)
	if cfg.Pretrained != nil {
		m, err := learn.LoadModel(ckdir, "")
		if err != nil {
			return nil, learn.CheckpointInfo{}, err
		}
		pre, ok := m.(*learn.PretrainedPolicy)
		if !ok {
			return nil, learn.CheckpointInfo{}, fmt.Errorf("%s: config.json names a pretrained model but the checkpoint is a Tiny policy", dir)
		}
		pol, err := pre.Agent()
		if err != nil {
			return nil, learn.CheckpointInfo{}, err
		}
		return &pretrainedPlayAgent{p: pol, tools: tools, maxAction: cfg.MaxActionTokens}, pre.Checkpoint(), nil
	}
	p, err := learn.LoadPolicy(ckdir, "")
	if err != nil {
		return nil, learn.CheckpointInfo{}, err
	}
	return &playAgent{p: p, maxAction: cfg.MaxActionTokens}, p.Checkpoint(), nil
}

// pretrainedPlayAgent is a pretrained run's model, with its adapters, as the REPL's agent: it
// renders the episode in the model's chat format and writes its next turn (agent.Policy.Act).
// It remembers the ids of the turns it wrote, for :why.
type pretrainedPlayAgent struct {
	p         *agent.Policy
	tools     []agrl.Tool
	maxAction int
	wrote     map[int]wroteTurn // by turn index
}

// wroteTurn is one action the agent sampled: its context and ids, and the text it returned.
type wroteTurn struct {
	context, ids []int32
	text         string
}

// Act samples the model's next action.
func (a *pretrainedPlayAgent) Act(ep *agrl.Episode, temperature float64, seed uint64) (string, error) {
	ctx, err := a.p.ConversationIDs(a.tools, ep)
	if err != nil {
		return "", err
	}
	text, ids, _, err := a.p.Act(a.tools, ep, agrl.Sampling{Temperature: temperature, Seed: seed + uint64(len(ep.Turns))}, a.maxAction)
	if err == nil {
		if a.wrote == nil {
			a.wrote = map[int]wroteTurn{}
		}
		a.wrote[len(ep.Turns)] = wroteTurn{context: ctx, ids: ids, text: text}
	}
	return text, err
}

// Explain scores the ids the agent sampled for turn turn, in the context it sampled them in,
// with the k likeliest alternatives at each position (log-probs at temperature; 0 means 1).
// A turn the agent did not write (typed, or sampled before an :undo) has no ids to explain.
func (a *pretrainedPlayAgent) Explain(ep *agrl.Episode, turn int, temperature float64, k int) ([]repl.TokenChoice, error) {
	w, ok := a.wrote[turn]
	ok = ok && turn < len(ep.Turns) && ep.Turns[turn].Text == w.text
	if ok {
		before := *ep
		before.Turns = ep.Turns[:turn]
		ctx, err := a.p.ConversationIDs(a.tools, &before)
		ok = err == nil && slices.Equal(ctx, w.context) // the same episode up to that turn
	}
	if !ok {
		return nil, errors.New("the agent did not write this action (a pretrained agent explains the turns it sampled)")
	}
	if len(w.ids) == 0 {
		return nil, errors.New("the action has no tokens")
	}
	tops, err := a.p.TopTokens(w.context, w.ids, temperature, k)
	if err != nil {
		return nil, err
	}
	tok := a.p.Tokenizer()
	out := make([]repl.TokenChoice, len(tops))
	for i, t := range tops {
		out[i] = repl.TokenChoice{Text: tok.Decode([]int32{t.ID}), LogProb: t.LogProb}
		for _, alt := range t.Top {
			out[i].Alternatives = append(out[i].Alternatives, repl.Alternative{Text: tok.Decode([]int32{alt.ID}), LogProb: alt.LogProb})
		}
	}
	return out, nil
}

// Act samples the checkpoint's next action.
func (a *playAgent) Act(ep *agrl.Episode, temperature float64, seed uint64) (string, error) {
	return a.p.PolicyAgent(agrl.Sampling{Temperature: temperature, Seed: seed}, a.maxAction).Act(ep)
}

// Explain scores the action of turn turn token by token (its tokens as the Tiny tokenizer
// encodes the episode: the ids the policy reads).
func (a *playAgent) Explain(ep *agrl.Episode, turn int, temperature float64, k int) ([]repl.TokenChoice, error) {
	cut := *ep
	cut.Turns = ep.Turns[:turn+1]
	tokens, mask := agrl.EncodeEpisode(a.p.Tokenizer(), &cut)
	from := len(tokens)
	for from > 0 && mask[from-1] == 1 {
		from--
	}
	if from == len(tokens) {
		return nil, errors.New("the action has no tokens")
	}
	tops, err := a.p.TopTokens(tokens, from, temperature, k)
	if err != nil {
		return nil, err
	}
	tok := a.p.Tokenizer()
	out := make([]repl.TokenChoice, len(tops))
	for i, t := range tops {
		out[i] = repl.TokenChoice{Text: tok.Decode([]int32{t.ID}), LogProb: float64(t.LogProb)}
		for _, alt := range t.Top {
			out[i].Alternatives = append(out[i].Alternatives, repl.Alternative{Text: tok.Decode([]int32{alt.ID}), LogProb: float64(alt.LogProb)})
		}
	}
	return out, nil
}
