package agrl

import (
	"errors"
	"fmt"
	"time"
)

// Agent writes the next action of an episode in progress. Experts, random baselines and
// (through the rollout code) language-model policies are agents.
type Agent interface {
	// Act returns the next action text, given the prompt and the turns so far. An error stops
	// the episode and is returned by Play: it means the agent itself is broken, not that it
	// chose badly.
	Act(ep *Episode) (string, error)
}

// AgentFunc adapts a function to the Agent interface.
type AgentFunc func(ep *Episode) (string, error)

// Act calls f.
func (f AgentFunc) Act(ep *Episode) (string, error) { return f(ep) }

// Limits bound an episode. The zero value takes every default.
type Limits struct {
	// MaxTurns caps the actions of an episode; 0 takes the environment's MaxTurns.
	MaxTurns int
	// MaxInvalid ends the episode after this many consecutive invalid actions; 0 means 3.
	MaxInvalid int
	// MaxBytes is the episode's text budget (action and observation bytes together), the
	// text-level stand-in for a token budget; 0 means 8192.
	MaxBytes int
	// StepTimeout bounds one environment step; 0 means 5 s. A step that runs longer ends the
	// episode as EnvError (the environment is broken; its goroutine is abandoned).
	StepTimeout time.Duration
}

func (l Limits) withDefaults(env Env) Limits {
	if l.MaxTurns <= 0 {
		l.MaxTurns = env.MaxTurns()
	}
	if l.MaxTurns <= 0 {
		l.MaxTurns = 1
	}
	if l.MaxInvalid <= 0 {
		l.MaxInvalid = 3
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 8192
	}
	if l.StepTimeout <= 0 {
		l.StepTimeout = 5 * time.Second
	}
	return l
}

// Play runs one episode of task in env with agent, at the text level. It returns an error only
// when env refuses the task or the agent fails; everything the policy does wrong (invalid
// actions, tool errors, running out of turns) is recorded on the episode instead. A panicking
// or hanging environment ends the episode with Termination EnvError.
//
// The episode is not scored: pass it to a Rubric's Score.
func Play(env Env, task Task, agent Agent, lim Limits) (*Episode, error) {
	if env == nil || agent == nil {
		return nil, errors.New("agrl: Play needs an env and an agent")
	}
	l, err := StartEpisode(env, task, lim)
	if err != nil {
		return nil, err
	}
	ep := l.ep
	used := len(ep.Prompt)
	for {
		if l.OutOfTurns() {
			return ep, nil
		}
		text, err := agent.Act(ep)
		if err != nil {
			return ep, fmt.Errorf("agrl: agent failed at turn %d of %s: %w", len(ep.Turns)+1, task.ID, err)
		}
		if l.Act(text) {
			return ep, nil
		}
		used += len(text) + len(ep.Turns[len(ep.Turns)-1].Observation)
		if used > l.lim.MaxBytes {
			ep.Termination = TokenBudget
			return ep, nil
		}
	}
}

// TurnLoop carries one episode through its turns: the per-turn logic that Play (text agents)
// and the learner's rollouts (token-level policies) share. The caller enforces its own budget
// (bytes for Play, tokens for rollouts) after each Act.
type TurnLoop struct {
	sess       Session
	lim        Limits
	ep         *Episode
	invalidRun int
}

// StartEpisode resets env on task and returns the loop, with lim's defaults filled in.
func StartEpisode(env Env, task Task, lim Limits) (*TurnLoop, error) {
	lim = lim.withDefaults(env)
	sess, prompt, err := env.Reset(task)
	if err != nil {
		return nil, fmt.Errorf("agrl: %s refused task %s: %w", env.Name(), task.ID, err)
	}
	return &TurnLoop{sess: sess, lim: lim, ep: &Episode{Task: task, Prompt: prompt}}, nil
}

// ReplayEpisode starts ep's task afresh in env and replays its first n actions, checking that
// the environment replies as it did: the loop is then where ep was after turn n−1 (a fork of
// it). An environment that replies otherwise (it is not deterministic in the actions), or an
// action among them that ends the episode, is an error.
func ReplayEpisode(env Env, ep *Episode, n int, lim Limits) (*TurnLoop, error) {
	if n < 0 || n > len(ep.Turns) {
		return nil, fmt.Errorf("agrl: replaying %d actions of an episode of %d turns", n, len(ep.Turns))
	}
	l, err := StartEpisode(env, ep.Task, lim)
	if err != nil {
		return nil, err
	}
	if l.ep.Prompt != ep.Prompt {
		return nil, fmt.Errorf("agrl: replaying task %s: %s's prompt differs from the episode's", ep.Task.ID, env.Name())
	}
	for k := range n {
		done := l.Act(ep.Turns[k].Text)
		if got, want := l.ep.Turns[k].Observation, ep.Turns[k].Observation; got != want {
			return nil, fmt.Errorf("agrl: replaying task %s: turn %d's observation is %q, the episode recorded %q (the environment does not replay the same)", ep.Task.ID, k, got, want)
		}
		if done {
			return nil, fmt.Errorf("agrl: replaying task %s: turn %d ended the episode (%s); there is nothing after it", ep.Task.ID, k, l.ep.Termination)
		}
	}
	return l, nil
}

// SetObservation replaces the observation of the last turn (a counterfactual: what the
// policy reads next), with no tool error.
func (l *TurnLoop) SetObservation(obs string) {
	if len(l.ep.Turns) == 0 {
		return
	}
	t := &l.ep.Turns[len(l.ep.Turns)-1]
	t.Observation, t.ToolError = TruncateObservation(obs, MaxObservationBytes), ""
}

// Episode returns the episode being played.
func (l *TurnLoop) Episode() *Episode { return l.ep }

// OutOfTurns ends the episode with MaxTurnsReached when it has used every turn.
func (l *TurnLoop) OutOfTurns() bool {
	if len(l.ep.Turns) >= l.lim.MaxTurns {
		l.ep.Termination = MaxTurnsReached
		return true
	}
	return false
}

// Act records one action of the policy and the environment's reply (an invalid action gets a
// penalising observation and never reaches the environment). It returns true when the episode
// ended: an answer, the environment ending it or failing, or too many invalid actions in a row.
func (l *TurnLoop) Act(text string) (done bool) {
	ep := l.ep
	turn := Turn{Text: text, Action: ParseAction(text)}
	var res StepResult
	if turn.Action.Kind == Invalid {
		l.invalidRun++
		res.Observation = "invalid action: " + turn.Action.Invalid
	} else {
		l.invalidRun = 0
		var err error
		res, err = safeStep(l.sess, turn.Action, l.lim.StepTimeout)
		if err != nil {
			ep.Turns = append(ep.Turns, turn)
			ep.Termination, ep.Error = EnvError, err.Error()
			return true
		}
	}
	turn.Observation = TruncateObservation(res.Observation, MaxObservationBytes)
	turn.ToolError = res.ToolError
	if turn.Action.Kind == ToolCall && res.ToolError == "" && res.Observation == "" {
		turn.Observation = "(no output)"
	}
	turn.Info = res.Info
	ep.Turns = append(ep.Turns, turn)

	switch {
	case turn.Action.Kind == AnswerAction:
		ep.Answer, ep.Correct = turn.Action.Answer, res.Correct
		ep.Termination = Answered
		if turn.Action.GivesUp() {
			ep.Termination, ep.Correct = GaveUp, false
		}
		return true
	case res.Done:
		ep.Termination = EnvEnded
		return true
	case l.invalidRun >= l.lim.MaxInvalid:
		ep.Termination = TooManyInvalid
		return true
	}
	return false
}

// safeStep runs one Step with a timeout, turning a panic or a hang into an error.
func safeStep(sess Session, a Action, timeout time.Duration) (StepResult, error) {
	type out struct {
		res StepResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- out{err: fmt.Errorf("environment panicked on %s: %v", a, r)}
			}
		}()
		ch <- out{res: sess.Step(a)}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-timer.C:
		return StepResult{}, fmt.Errorf("environment step timed out after %v on %s", timeout, a)
	}
}
