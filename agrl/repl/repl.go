// Package repl is agrl's interactive session: play an environment yourself — type actions in
// the protocol, read the observations, the termination and the reward breakdown — or let an
// agent (a trained checkpoint) act one action at a time and take over at any turn. It is the
// engine of `agrl play`; a notebook can drive a Session line by line the same way.
//
//	s, _ := repl.New(repl.Options{Env: calc.New(), Rubric: calc.Rubric(), Tasks: draw})
//	fmt.Print(s.Banner())
//	out, _ := s.Exec("<tool>calc(12*(3+4))</tool>")
//	fmt.Print(out)
//
// Lines that start with ':' are commands (:help lists them); any other line is the next action.
// The package is standard library only; the terminal's line editing is in terminal.go.
package repl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"agrl.dev/agrl"
)

// Agent proposes the next action of an episode in progress, sampled at temperature with seed
// (the same arguments give the same action).
type Agent interface {
	Act(ep *agrl.Episode, temperature float64, seed uint64) (string, error)
}

// Explainer is implemented by agents that can show, for the action of turn turn (from 0) of ep,
// each token they wrote with its log-probability and the k likeliest alternatives (:why).
type Explainer interface {
	Explain(ep *agrl.Episode, turn int, temperature float64, k int) ([]TokenChoice, error)
}

// TokenChoice is one token of an action as the policy saw it.
type TokenChoice struct {
	// Text is the token's text; LogProb its log-probability at the sampling temperature.
	Text    string
	LogProb float64
	// Alternatives are the likeliest tokens at that position (the chosen one included when it
	// is among them), likeliest first.
	Alternatives []Alternative
}

// Alternative is a token the policy could have written, with its log-probability.
type Alternative struct {
	Text    string
	LogProb float64
}

// Options configure a Session.
type Options struct {
	// Env and Rubric are the environment played and the rubric that scores finished episodes.
	Env    agrl.Env
	Rubric agrl.Rubric
	// Tasks draws the task numbered n (0, 1, …) of the difficulty d (d 0 means the mix): :new
	// and the first task take the next number, ":task N" asks for number N.
	Tasks func(n int, d agrl.Difficulty) (agrl.Task, error)
	// FromText, when set, makes a task of a typed prompt (":task 12*(3+4)" for calc).
	FromText func(text string) (agrl.Task, error)
	// Agent, when set, acts on :step, :auto and an empty line.
	Agent Agent
	// Temperature is the agent's sampling temperature (:temp changes it); Seed seeds its draws.
	Temperature float64
	Seed        uint64
	// Limits bound each episode (the zero value takes the environment's).
	Limits agrl.Limits
	// Color highlights the output with ANSI colours (for a terminal).
	Color bool
}

// Session is one interactive session: the current episode and how it got there. It is not safe
// for concurrent use.
type Session struct {
	o       Options
	task    agrl.Task
	loop    *agrl.TurnLoop
	texts   []string // the actions of the current episode, in order (for :undo)
	next    int      // the number of the next task :new draws
	diff    agrl.Difficulty
	done    bool
	stepped int // agent actions taken (their seeds)
}

// New starts a session on the first task.
func New(o Options) (*Session, error) {
	var errs []error
	if o.Env == nil {
		errs = append(errs, errors.New("no environment"))
	}
	if o.Tasks == nil {
		errs = append(errs, errors.New("no task source (Options.Tasks)"))
	}
	if err := o.Rubric.Validate(); err != nil {
		errs = append(errs, err)
	}
	if math.IsNaN(o.Temperature) || o.Temperature < 0 {
		errs = append(errs, fmt.Errorf("temperature %v; want >= 0", o.Temperature))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("repl: %w", errors.Join(errs...))
	}
	s := &Session{o: o}
	task, err := o.Tasks(0, 0)
	if err != nil {
		return nil, fmt.Errorf("repl: first task: %w", err)
	}
	s.next = 1
	if err := s.start(task); err != nil {
		return nil, err
	}
	return s, nil
}

// Episode returns the episode in progress (or just finished).
func (s *Session) Episode() *agrl.Episode { return s.loop.Episode() }

// Done reports whether the current episode has ended.
func (s *Session) Done() bool { return s.done }

// Temperature returns the agent's sampling temperature.
func (s *Session) Temperature() float64 { return s.o.Temperature }

func (s *Session) start(task agrl.Task) error {
	l, err := agrl.StartEpisode(s.o.Env, task, s.o.Limits)
	if err != nil {
		return fmt.Errorf("repl: %w", err)
	}
	s.task, s.loop, s.texts, s.done = task, l, nil, false
	return nil
}

// Prompt is the input prompt: the next turn's number.
func (s *Session) Prompt() string {
	if s.done {
		return "done> "
	}
	return fmt.Sprintf("turn %d> ", len(s.Episode().Turns)+1)
}

// Banner describes the current task: its id, difficulty and the prompt the policy sees.
func (s *Session) Banner() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s task %s (%s)\n", s.o.Env.Name(), s.task.ID, s.task.Difficulty)
	b.WriteString(s.paint(cyan, s.Episode().Prompt) + "\n")
	switch {
	case s.o.Agent != nil:
		b.WriteString("type an action, Enter for the agent's next one, :help for commands\n")
	default:
		b.WriteString("type an action (" + agrl.ToolOpen + "name(args)" + agrl.ToolClose + " or " + agrl.AnswerOpen + "…" + agrl.AnswerClose + "), :help for commands\n")
	}
	return b.String()
}

const help = `commands:
  :help              this list
  :new [difficulty]  a new task (easy, medium, hard, extreme; default: the mix)
  :task N | TEXT     task number N of the stream (of the last :new's difficulty), or a task of your own (calc: an expression)
  :step              the agent writes the next action (also: an empty line)
  :auto              the agent plays to the end of the episode
  :temp T            the agent's sampling temperature (now %g)
  :undo              take back the last action
  :why               the agent's last action token by token: log-probs and alternatives
  :show              the episode so far
  :save FILE         append the episode to FILE (JSON lines, the run directories' trajectory format)
  :quit              leave (also Ctrl-D)
anything else is the next action, e.g. <tool>calc(12*(3+4))</tool> or <answer>84</answer>
`

// Exec runs one line of input and returns what to print; quit is true after :quit.
func (s *Session) Exec(line string) (out string, quit bool) {
	line = strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimSpace(line)
	if !strings.HasPrefix(trimmed, ":") {
		if trimmed == "" {
			if s.o.Agent == nil {
				return "", false
			}
			return s.step(), false
		}
		return s.act(line, false), false
	}
	cmd, arg, _ := strings.Cut(strings.TrimPrefix(trimmed, ":"), " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "help", "h", "?":
		return fmt.Sprintf(help, s.o.Temperature), false
	case "quit", "q", "exit":
		return "", true
	case "new", "n":
		d := agrl.Difficulty(0)
		if arg != "" {
			var err error
			if d, err = agrl.ParseDifficulty(arg); err != nil {
				return s.errorf("%v", err), false
			}
		}
		task, err := s.o.Tasks(s.next, d)
		if err != nil {
			return s.errorf("%v", err), false
		}
		s.next++
		s.diff = d // ":task N" then numbers this difficulty's tasks
		return s.restart(task), false
	case "task", "t":
		return s.taskCmd(arg), false
	case "step", "s":
		return s.step(), false
	case "auto", "a":
		return s.auto(), false
	case "temp":
		t, err := strconv.ParseFloat(arg, 64)
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return s.errorf(":temp wants a temperature >= 0 (0: greedy), got %q", arg), false
		}
		s.o.Temperature = t
		return fmt.Sprintf("temperature %g\n", t), false
	case "undo", "u":
		return s.undo(), false
	case "why", "w":
		return s.why(), false
	case "show":
		return s.show(), false
	case "save":
		return s.save(arg), false
	}
	return s.errorf("unknown command :%s (:help lists them)", cmd), false
}

func (s *Session) errorf(format string, args ...any) string {
	return s.paint(red, "error: "+fmt.Sprintf(format, args...)) + "\n"
}

func (s *Session) restart(task agrl.Task) string {
	if err := s.start(task); err != nil {
		return s.errorf("%v", err)
	}
	return s.Banner()
}

// maxTaskNumber is the largest N ":task N" takes: the stream draws the N tasks before it too.
const maxTaskNumber = 99999

func (s *Session) taskCmd(arg string) string {
	if arg == "" {
		return s.errorf(":task wants a task number or a task of your own")
	}
	if n, err := strconv.Atoi(arg); err == nil {
		if n < 0 || n > maxTaskNumber {
			return s.errorf(":task %d: want a number 0..%d (the stream draws every task before it)", n, maxTaskNumber)
		}
		task, err := s.o.Tasks(n, s.diff)
		if err != nil {
			return s.errorf("%v", err)
		}
		return s.restart(task)
	}
	if s.o.FromText == nil {
		return s.errorf("%s has no tasks of your own; use :task N or :new", s.o.Env.Name())
	}
	task, err := s.o.FromText(arg)
	if err != nil {
		return s.errorf("%v", err)
	}
	return s.restart(task)
}

// act plays one action text; byAgent marks the agent's actions in the output.
func (s *Session) act(text string, byAgent bool) string {
	if s.done {
		return s.errorf("the episode is over: :new for another task, :undo to take back the last action")
	}
	if s.loop.OutOfTurns() {
		s.done = true
		return s.ending()
	}
	s.texts = append(s.texts, text)
	done := s.loop.Act(text)
	ep := s.Episode()
	t := ep.Turns[len(ep.Turns)-1]
	var b strings.Builder
	if byAgent {
		fmt.Fprintf(&b, "%s %s\n", s.paint(yellow, "agent:"), text)
	}
	switch t.Action.Kind {
	case agrl.Invalid:
		fmt.Fprintf(&b, "%s %s\n", s.paint(red, "invalid:"), t.Action.Invalid)
	case agrl.ToolCall:
		if t.ToolError != "" {
			fmt.Fprintf(&b, "%s %s\n", s.paint(red, "tool error:"), t.Observation)
		} else {
			fmt.Fprintf(&b, "%s %s\n", s.paint(green, "obs:"), t.Observation)
		}
	}
	if done || s.loop.OutOfTurns() {
		s.done = true
		b.WriteString(s.ending())
	}
	return b.String()
}

// ending reports how the episode ended and its reward breakdown.
func (s *Session) ending() string {
	ep := s.Episode()
	scored := *ep
	var b strings.Builder
	verdict := s.paint(red, "wrong")
	if ep.Correct {
		verdict = s.paint(green, "correct")
	}
	switch {
	case ep.Termination == agrl.Answered:
		fmt.Fprintf(&b, "answer %q: %s (gold %q)\n", ep.Answer, verdict, ep.Task.Answer)
	default:
		fmt.Fprintf(&b, "episode over: %s (gold %q)\n", ep.Termination, ep.Task.Answer)
	}
	if _, err := s.o.Rubric.Score(&scored); err != nil {
		b.WriteString(s.errorf("scoring: %v", err))
		return b.String()
	}
	fmt.Fprintf(&b, "reward %.3f =", scored.Reward)
	for i, r := range scored.Rewards {
		if r.Weight == 0 {
			continue
		}
		sep := " +"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s %.3f×%g", sep, r.Name, r.Value, r.Weight)
	}
	b.WriteString("\n")
	var logged []string
	for _, r := range scored.Rewards {
		if r.Weight == 0 {
			logged = append(logged, fmt.Sprintf("%s %g", r.Name, r.Value))
		}
	}
	if len(logged) > 0 {
		fmt.Fprintf(&b, "(logged: %s)\n", strings.Join(logged, ", "))
	}
	b.WriteString(":new for another task, :undo to take back the last action, :save FILE to keep it\n")
	return b.String()
}

func (s *Session) step() string {
	out, _ := s.agentStep()
	return out
}

// agentStep lets the agent act; ok is false when it could not (no agent, the episode over, the
// agent failed).
func (s *Session) agentStep() (out string, ok bool) {
	if s.o.Agent == nil {
		return s.errorf("no agent: start with --run DIR to have a checkpoint act"), false
	}
	if s.done {
		return s.errorf("the episode is over: :new for another task"), false
	}
	text, err := s.o.Agent.Act(s.Episode(), s.o.Temperature, s.o.Seed+uint64(s.stepped))
	s.stepped++
	if err != nil {
		return s.errorf("agent: %v", err), false
	}
	return s.act(text, true), true
}

func (s *Session) auto() string {
	var b strings.Builder
	for !s.done {
		out, ok := s.agentStep()
		b.WriteString(out)
		if !ok {
			break
		}
	}
	return b.String()
}

// undo replays the episode without its last action on a fresh session of the same task.
func (s *Session) undo() string {
	if len(s.texts) == 0 {
		return s.errorf("nothing to undo")
	}
	texts := s.texts[:len(s.texts)-1]
	if err := s.start(s.task); err != nil {
		return s.errorf("%v", err)
	}
	for _, t := range texts {
		s.texts = append(s.texts, t)
		s.loop.Act(t)
	}
	return fmt.Sprintf("took back turn %d\n", len(texts)+1)
}

func (s *Session) why() string {
	ex, ok := s.o.Agent.(Explainer)
	if !ok {
		return s.errorf("no agent that explains its actions (start with --run DIR)")
	}
	ep := s.Episode()
	if len(ep.Turns) == 0 {
		return s.errorf("no action yet")
	}
	turn := len(ep.Turns) - 1
	toks, err := ex.Explain(ep, turn, s.o.Temperature, 3)
	if err != nil {
		return s.errorf("%v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "turn %d as the agent reads it, token by token (log-prob; the likeliest alternatives):\n", turn+1)
	for _, tc := range toks {
		text := fmt.Sprintf("%-10q %7.3f", tc.Text, tc.LogProb)
		if tc.LogProb < math.Log(0.1) { // a token drawn with probability below 10%
			text = s.paint(red, text)
		}
		var alts []string
		for _, a := range tc.Alternatives {
			alts = append(alts, fmt.Sprintf("%q %.3f", a.Text, a.LogProb))
		}
		if len(alts) > 0 {
			text += "   " + strings.Join(alts, ", ")
		}
		fmt.Fprintf(&b, "  %s\n", text)
	}
	return b.String()
}

func (s *Session) show() string {
	return s.Episode().Transcript() + "\n"
}

func (s *Session) save(path string) string {
	if path == "" {
		return s.errorf(":save wants a file name")
	}
	ep := *s.Episode()
	if _, err := s.o.Rubric.Score(&ep); err != nil {
		return s.errorf("scoring: %v", err)
	}
	if err := AppendEpisode(path, &ep); err != nil {
		return s.errorf("%v", err)
	}
	return fmt.Sprintf("saved the episode (%d turns) to %s\n", len(ep.Turns), path)
}

// AppendEpisode appends ep to a JSON-lines file, one episode per line: the format of a run
// directory's trajectories (agrl.ReadEpisodes reads it back).
func AppendEpisode(path string, ep *agrl.Episode) error {
	line, err := json.Marshal(ep)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ANSI colours.
const (
	red    = "31"
	green  = "32"
	yellow = "33"
	cyan   = "36"
)

func (s *Session) paint(color, text string) string {
	if !s.o.Color {
		return text
	}
	return "\033[" + color + "m" + text + "\033[0m"
}
