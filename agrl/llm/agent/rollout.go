package agent

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"agrl.dev/agrl"
)

// Episode token layout. One token stream per episode, in the model's own chat format:
//
//	encode(Render(system, user+tools) + GenerationPrompt)     prompt           mask 0
//	action₁ … <|im_end|>                                      sampled ids      mask 1
//	encode(AppendObservation(observation₁))                   tool turn + gen. mask 0
//	action₂ …                                                 sampled ids      mask 1
//	…
//	actionₙ                                                    the last action: no observation
//
// The prompt is encoded once; each action is the exact ids sampled (its end-of-turn token
// included), and each observation is encoded on its own and appended. The transcript is never
// re-rendered or re-encoded, so the ids trained on are the ids sampled, even where encoding
// the decoded text would give other ids. An action cut off before its end-of-turn token (by
// Sampling.MaxActionTokens) is invalid; the format's end-of-turn token is then appended, with
// mask 0, before its observation, so that the context stays well formed.

// Rollout plays one episode per task with the policy: it samples each action until one of the
// stop tokens, the per-action cap (Sampling.MaxActionTokens) or the episode's token budget,
// reads it with the format's ParseTurn, steps the environment through agrl's turn loop (the
// per-turn logic of agrl.Play and of the learner's rollouts) and appends the observation as
// tokens, until the episode ends: an answer, the turn limit, too many invalid actions in a
// row, or the token budget (opt.MaxTokens: 0, or more than the context, means the context).
//
// Episodes carry their turns and termination as agrl's rollouts record them, so agrl rubrics
// score them: Turn.Text is the decoded action (its end-of-turn marker included) and
// Turn.Action what ParseTurn read from it; an invalid action gets the observation "invalid
// action: " + the reason, shown to the model as a tool result. Tokens, LossMask (1 on sampled
// ids only) and LogProbs (the log-probability of each sampled id at the sampling temperature,
// 0 elsewhere) are aligned. Episode i samples from stream (Seed, i): the episodes do not
// depend on how many run at once. Tasks with the same prompt share its forward pass (the KV
// cache is cloned; on the host the clones share the prompt's keys and values), which is what
// G samples of one task cost. The episodes being played
// advance together: each round, the next step of every one (a sampled id, or an observation)
// goes through the model as one batch (the policy's Decoder; on the host llm.Model.NextBatchFlat:
// one pass over the weights for all of them, each getting the bits it would get alone), and
// so do the distinct prompts.
//
// It returns an error when an environment refuses a task, a prompt does not fit the budget,
// or the model fails; everything the model does wrong is recorded on the episodes.
func (p *Policy) Rollout(env agrl.Env, tasks []agrl.Task, opt agrl.RolloutOptions) ([]*agrl.Episode, agrl.RolloutStats, error) {
	start := time.Now()
	var st agrl.RolloutStats
	if env == nil {
		return nil, st, errors.New("agent: Rollout needs an env")
	}
	if err := opt.Sampling.Validate(); err != nil {
		return nil, st, err
	}
	if len(tasks) == 0 {
		return nil, st, nil
	}
	budget := opt.MaxTokens
	if budget <= 0 || budget > p.Context() {
		budget = p.Context()
	}
	tools := env.Tools()
	r := &run{p: p, tools: tools, opt: opt, budget: budget, prefills: map[string]*prefill{}}
	r.closing = p.tok.Encode(p.format.StopStrings()[0])
	for i, task := range tasks {
		l, err := agrl.StartEpisode(env, task, opt.Limits)
		if err != nil {
			return nil, st, err
		}
		ep := l.Episode()
		prompt, err := p.Prompt(tools, ep.Prompt)
		if err != nil {
			return nil, st, fmt.Errorf("agent: task %s: %w", task.ID, err)
		}
		if len(prompt)+1 > budget {
			return nil, st, fmt.Errorf("agent: Rollout: %w", &agrl.PromptTooLongError{Task: task.ID, Tokens: len(prompt), Budget: budget, Need: len(prompt) + 1, Context: p.Context()})
		}
		ep.Tokens = prompt
		ep.LossMask = make([]uint8, len(prompt))
		ep.LogProbs = make([]float32, len(prompt))
		key := string(int32Bytes(prompt))
		pf := r.prefills[key]
		if pf == nil {
			pf = &prefill{ids: prompt}
			r.prefills[key] = pf
			r.order = append(r.order, pf)
		}
		r.eps = append(r.eps, &episode{i: i, loop: l, prompt: pf})
	}

	// Each distinct prompt is run once; its episodes continue clones of its cache.
	for _, pf := range r.order {
		pf.s = p.newStream()
	}
	defer func() {
		for _, pf := range r.order {
			pf.s.Release()
		}
	}()
	if ds, batched := r.order[0].s.(decStream); batched {
		r.batch = &batcher{d: ds.d}
		defer r.batch.done() // after every worker has stopped (parallel waits for them)
		if err := r.prefillBatched(); err != nil {
			return nil, st, err
		}
	} else if err := r.parallel(len(r.order), func(j int) error {
		pf := r.order[j]
		var err error
		pf.logits, err = r.next(pf.s, pf.ids, j)
		return err
	}); err != nil {
		return nil, st, err
	}
	ended := opt.EpisodeEnded(len(r.eps))
	if err := r.parallel(len(r.eps), func(j int) error {
		if err := r.play(r.eps[j]); err != nil {
			return err
		}
		ended()
		return nil
	}); err != nil {
		return nil, st, err
	}

	eps := make([]*agrl.Episode, len(r.eps))
	for i, e := range r.eps {
		eps[i] = e.loop.Episode()
	}
	st.Episodes, st.Steps, st.Tokens = len(eps), int(r.steps.Load()), int(r.fed.Load())
	st.Generated, st.Seconds = int(r.generated.Load()), time.Since(start).Seconds()
	return eps, st, nil
}

// run is the state of one Rollout call.
type run struct {
	p       *Policy
	tools   []agrl.Tool
	opt     agrl.RolloutOptions
	budget  int
	closing []int32 // the end-of-turn token(s), appended after an action cut off without one

	prefills map[string]*prefill
	order    []*prefill
	eps      []*episode

	steps, fed, generated atomic.Int64
	failed                atomic.Bool
	// batch runs the episodes' steps together (nil for streams that are not the model's KV
	// caches, which each run on their own).
	batch *batcher
}

// prefill is one distinct prompt, run once.
type prefill struct {
	ids    []int32
	s      stream
	logits []float32
}

// episode is one task's episode in progress.
type episode struct {
	i      int
	loop   *agrl.TurnLoop
	prompt *prefill
}

// parallel runs f(0) … f(n-1) on the policy's workers and returns the first error; after an
// error, jobs not yet started are skipped. With a batcher, each worker is one of the
// goroutines whose steps it batches, from its start until it has no jobs left.
func (r *run) parallel(n int, f func(int) error) error {
	jobs := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	workers := r.p.numWorkers(n, r.batch != nil)
	if r.batch != nil {
		r.batch.join(workers)
	}
	for range workers {
		wg.Go(func() {
			if r.batch != nil {
				defer r.batch.leave()
			}
			for j := range jobs {
				if r.failed.Load() {
					continue
				}
				if errs[j] = f(j); errs[j] != nil {
					r.failed.Store(true)
				}
			}
		})
	}
	for j := range n {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	return errors.Join(errs...)
}

// next feeds ids to s, the stream of episode (or prompt) i, counting the work: through the
// batcher when there is one.
func (r *run) next(s stream, ids []int32, i int) ([]float32, error) {
	var logits []float32
	var err error
	if ds, ok := s.(decStream); ok && r.batch != nil {
		logits, err = r.batch.next(i, ds.s, ids)
	} else {
		logits, err = s.Next(ids)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	r.steps.Add(1)
	r.fed.Add(int64(len(ids)))
	return logits, nil
}

// play runs one episode to its end.
func (r *run) play(e *episode) error {
	p, l := r.p, e.loop
	ep := l.Episode()
	s := e.prompt.s.Clone()
	defer s.Release()
	logits := e.prompt.logits
	sm := newSampler(r.opt.Sampling, p.model.Config().VocabSize, e.i)
	capTokens := r.opt.Sampling.MaxActionTokens
	for !l.OutOfTurns() {
		// Sample one action. Its last id is not fed yet: it goes in with the observation.
		room := r.budget - len(ep.Tokens)
		limit := room
		if capTokens > 0 {
			limit = min(limit, capTokens)
		}
		first := len(ep.Tokens)
		stopped := false
		for {
			id, lp, err := sm.draw(logits)
			if err != nil {
				return fmt.Errorf("agent: task %s, position %d: %w", ep.Task.ID, len(ep.Tokens), err)
			}
			ep.Tokens = append(ep.Tokens, id)
			ep.LossMask = append(ep.LossMask, 1)
			ep.LogProbs = append(ep.LogProbs, lp)
			r.generated.Add(1)
			if slices.Contains(p.stops, id) {
				stopped = true
				break
			}
			if len(ep.Tokens)-first >= limit {
				break
			}
			if logits, err = r.next(s, []int32{id}, e.i); err != nil {
				return err
			}
		}
		action := ep.Tokens[first:]
		text := p.tok.Decode(action)
		var a agrl.Action
		switch {
		case stopped:
			a = p.format.ParseTurn(text, r.tools)
		case len(action) >= room:
			a = invalidf("the action filled the episode's token budget (%d) before its end-of-turn token", r.budget)
		default:
			a = invalidf("the action reached the cap of %d tokens before its end-of-turn token", capTokens)
		}
		done := act(l, text, a)
		ep.Turns[len(ep.Turns)-1].Sampled = slices.Clone(action)
		if done {
			return nil
		}
		if len(action) >= room {
			ep.Termination = agrl.TokenBudget
			return nil
		}
		// The observation: the end of the turn if the model did not write it, then the tool
		// turn and the next generation prompt, appended as tokens.
		var obs []int32
		if !stopped {
			obs = append(obs, r.closing...)
		}
		obs = p.tok.AppendEncode(obs, p.format.AppendObservation(ep.Turns[len(ep.Turns)-1].Observation))
		if len(obs)+1 > r.budget-len(ep.Tokens) { // the observation and one more token must fit
			ep.Termination = agrl.TokenBudget
			return nil
		}
		if l.OutOfTurns() {
			return nil
		}
		feed := append([]int32{action[len(action)-1]}, obs...)
		ep.Tokens = append(ep.Tokens, obs...)
		ep.LossMask = append(ep.LossMask, make([]uint8, len(obs))...)
		ep.LogProbs = append(ep.LogProbs, make([]float32, len(obs))...)
		var err error
		if logits, err = r.next(s, feed, e.i); err != nil {
			return err
		}
	}
	return nil
}

// prefillRows is the most prompt tokens one batched prefill pass takes: several prompts share
// a pass over the weights while their activations stay a few tens of megabytes.
const prefillRows = 2048

// prefillBatched runs the distinct prompts through the model, several per pass.
func (r *run) prefillBatched() error {
	for lo := 0; lo < len(r.order); {
		hi, rows := lo, 0
		for hi < len(r.order) && (hi == lo || rows+len(r.order[hi].ids) <= prefillRows) {
			rows += len(r.order[hi].ids)
			hi++
		}
		seqs, ids := make([]Seq, hi-lo), make([][]int32, hi-lo)
		for j, pf := range r.order[lo:hi] {
			seqs[j], ids[j] = pf.s.(decStream).s, pf.ids
		}
		logits, err := r.batch.d.NextBatch(seqs, ids)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		r.batch.prefilled = append(r.batch.prefilled, logits)
		for j, pf := range r.order[lo:hi] {
			pf.logits = logits[j]
		}
		r.steps.Add(int64(hi - lo))
		r.fed.Add(int64(rows))
		lo = hi
	}
	return nil
}

// batcher runs the steps of the episodes being played as one batch: each playing goroutine
// hands in its next step and waits; once every one of them has a step in (or has stopped
// playing), the steps run together, in episode order, as one Decoder.NextBatch — by the
// goroutine whose arrival (or leaving) completed the batch. Each sequence's logits are those
// it would get alone, so batching changes the speed of a rollout, never its episodes.
//
// A batch runs only once every playing goroutine has handed in its next step (or left), so
// none reads the logits of the batch before any more: with a decoder that recycles its logits'
// memory (the host's), each batch gives the previous one's back for itself to use.
type batcher struct {
	d       Decoder
	mu      sync.Mutex
	active  int     // goroutines playing, each with at most one step pending
	pending []*step // the steps handed in since the last batch
	// spent is the last batch's logits, to recycle when the next batch runs (only run touches
	// it, and batches run one after another) or when the rollout ends (done).
	spent [][]float32
	// prefilled holds the prompts' logits (prefillBatched's calls), recycled when the rollout
	// ends: every episode of a prompt starts from its logits.
	prefilled [][][]float32
}

// step is one episode's step waiting in a batch.
type step struct {
	order  int
	s      Seq
	ids    []int32
	logits []float32
	err    error
	done   chan struct{}
}

// join counts n more playing goroutines.
func (b *batcher) join(n int) {
	b.mu.Lock()
	b.active += n
	b.mu.Unlock()
}

// leave is called by a goroutine that plays no more; the others' steps may then be complete.
func (b *batcher) leave() {
	b.mu.Lock()
	b.active--
	ready := b.take()
	b.mu.Unlock()
	b.run(ready)
}

// next runs ids through the model on sequence s as part of the next batch and returns the
// logits of the token that follows.
func (b *batcher) next(order int, s Seq, ids []int32) ([]float32, error) {
	st := &step{order: order, s: s, ids: ids, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, st)
	ready := b.take()
	b.mu.Unlock()
	b.run(ready)
	<-st.done
	return st.logits, st.err
}

// take returns the pending steps once every playing goroutine has one in (b.mu held).
func (b *batcher) take() []*step {
	if len(b.pending) == 0 || len(b.pending) < b.active {
		return nil
	}
	ready := b.pending
	b.pending = nil
	return ready
}

// run runs a batch of steps and hands each its result.
func (b *batcher) run(steps []*step) {
	if len(steps) == 0 {
		return
	}
	slices.SortFunc(steps, func(x, y *step) int { return x.order - y.order })
	seqs, ids := make([]Seq, len(steps)), make([][]int32, len(steps))
	for i, st := range steps {
		seqs[i], ids[i] = st.s, st.ids
	}
	if rc, ok := b.d.(recycler); ok && b.spent != nil {
		rc.recycle(b.spent)
	}
	logits, err := b.d.NextBatch(seqs, ids)
	b.spent = logits
	for i, st := range steps {
		if err == nil {
			st.logits = logits[i]
		}
		st.err = err
		close(st.done)
	}
}

// done recycles the logits still held once no episode plays any more.
func (b *batcher) done() {
	if rc, ok := b.d.(recycler); ok {
		for _, l := range append(b.prefilled, b.spent) {
			if l != nil {
				rc.recycle(l)
			}
		}
	}
	b.spent, b.prefilled = nil, nil
}

// act records one action on the turn loop: the loop steps the environment, counts invalid
// actions in a row and ends the episode as agrl.Play would. The loop reads agrl's protocol
// text, so a valid native action is written in that protocol (its reasoning left out: the
// environment does not read it) and must read back as the same action; an invalid one is
// given as empty text, which the loop rejects. The turn then gets the native text, the action
// as ParseTurn read it and, when invalid, the native reason.
func act(l *agrl.TurnLoop, text string, a agrl.Action) (done bool) {
	proto := ""
	if a.Kind != agrl.Invalid {
		step := a
		step.Think = ""
		proto = step.String()
		if got := agrl.ParseAction(proto); got != step {
			why := got.Invalid
			if why == "" {
				why = "it reads as " + got.String()
			}
			what := "answer"
			if a.Kind == agrl.ToolCall {
				what = "tool call"
			}
			a = invalidf("the %s cannot be passed to the environment: %s", what, why)
			proto = ""
		}
	}
	done = l.Act(proto)
	ep := l.Episode()
	t := &ep.Turns[len(ep.Turns)-1]
	t.Text, t.Action = text, a
	if a.Kind == agrl.Invalid {
		t.Observation = agrl.TruncateObservation("invalid action: "+a.Invalid, agrl.MaxObservationBytes)
	}
	return done
}

func invalidf(format string, args ...any) agrl.Action {
	return agrl.Action{Kind: agrl.Invalid, Invalid: fmt.Sprintf(format, args...)}
}

// int32Bytes is ids as bytes, a map key.
func int32Bytes(ids []int32) []byte {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return b
}
