package agrl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// RunStepsDir holds the run directory's step records, steps/step-NNNNNN.json (see StepRecord):
// written at the steps whose trajectories are saved (step 1 and every TrajectoriesEvery).
const RunStepsDir = "steps"

// StepRecord is everything one GRPO update consumed, as the trainer fed it to the loss: every
// episode of the step with its group, reward breakdown, returns and advantages, the groups
// dynamic sampling dropped, and for each optimizer step (a pass: one minibatch of one epoch) the
// per-token loss inputs — mask, advantage, sampled, reference and current log-probs, loss
// weight — with what the learner reported. InspectStep re-derives the logged metrics from it.
//
// Per-token arrays are aligned with the episode's Tokens: entry j is about token j (entry 0,
// the first prompt token, is never trained on and holds 0).
type StepRecord struct {
	Step int `json:"step"`
	// The loss settings of the update.
	ClipLow       float64       `json:"clip_low"`
	ClipHigh      float64       `json:"clip_high"`
	KL            float64       `json:"kl"`
	KLEstimator   KLEstimator   `json:"kl_estimator"`
	LossNorm      LossNorm      `json:"loss_norm"`
	AdvantageNorm AdvantageNorm `json:"advantage_norm"`
	Temperature   float64       `json:"temperature"`
	Group         int           `json:"group"`
	// LoRADropout is the pretrained policy's lora_dropout when the learner applied it (0
	// otherwise): the learner's forward passes then drew dropout masks, so its log-probs, and
	// the loss built from them, are not the scorer's that the record holds.
	LoRADropout float64 `json:"lora_dropout,omitempty"`
	// Episodes are the episodes trained on, group by group (Group consecutive episodes of one
	// task each).
	Episodes []StepEpisode `json:"episodes"`
	// Dropped are the groups dynamic sampling replaced (all rewards equal), with their rewards.
	Dropped []DroppedGroup `json:"dropped,omitempty"`
	// Passes are the update's optimizer steps in order (Epochs × Minibatches).
	Passes []StepPass `json:"passes"`
	// Pieces is the text of every token id in the record (the policy tokenizer's decoding of
	// the id alone; a byte-level BPE piece may be part of a character).
	Pieces map[int32]string `json:"pieces"`
}

// StepEpisode is one episode of a step record.
type StepEpisode struct {
	// Group is the index of the episode's group (its task) in the step.
	Group int `json:"group"`
	// Returns are the episode's return per turn with turn-level terms or a discount, else one
	// value: its reward.
	Returns []float64 `json:"returns"`
	// Advantages are the group-relative advantages computed from Returns (one, or one per turn
	// with turn-level credit).
	Advantages []float64 `json:"advantages"`
	Episode    *Episode  `json:"episode"`
}

// DroppedGroup is a group dynamic sampling left out: its task and rewards, all equal.
type DroppedGroup struct {
	Round   int       `json:"round"`
	Task    Task      `json:"task"`
	Rewards []float64 `json:"rewards"`
}

// StepPass is one optimizer step of an update: the episodes of its minibatch and, for each, the
// loss inputs token by token (aligned with the episode's Tokens).
type StepPass struct {
	Epoch     int `json:"epoch"`
	Minibatch int `json:"minibatch"`
	// Fresh: the weights are those that sampled (the first pass), so the loss takes the
	// current log-probs as the old ones and every ratio is exactly 1.
	Fresh bool `json:"fresh"`
	// Episodes index StepRecord.Episodes.
	Episodes []int `json:"episodes"`
	// Mask is 1 on the tokens in the loss; Adv each token's advantage; Old the log-probs the
	// sampler recorded; Ref the reference policy's (0 with KL 0); Weight the loss normalisation
	// (mask included); LogProbs and Entropy the current policy's, scored just before this
	// optimizer step at the training temperature.
	Mask     [][]float32 `json:"mask"`
	Adv      [][]float32 `json:"adv"`
	Old      [][]float32 `json:"old_logp"`
	Ref      [][]float32 `json:"ref_logp"`
	Weight   [][]float32 `json:"weight"`
	LogProbs [][]float32 `json:"logp"`
	Entropy  [][]float32 `json:"entropy"`
	// What the learner reported for this optimizer step.
	Loss     float64            `json:"loss"`
	GradNorm float64            `json:"grad_norm"`
	Metrics  map[string]float64 `json:"metrics"`
}

// SaveStepRecord writes steps/step-NNNNNN.json (atomically).
func (w *RunWriter) SaveStepRecord(r *StepRecord) error {
	if err := os.MkdirAll(filepath.Join(w.dir, RunStepsDir), 0o755); err != nil {
		return fmt.Errorf("agrl: %w", err)
	}
	return writeJSONAtomic(filepath.Join(w.dir, RunStepsDir, fmt.Sprintf("step-%06d.json", r.Step)), r)
}

var stepRecordFile = regexp.MustCompile(`^step-(\d+)\.json$`)

// StepRecordSteps lists the steps that have a step record, in increasing order.
func (r *Run) StepRecordSteps() ([]int, error) {
	return stepFiles(filepath.Join(r.Dir, RunStepsDir), stepRecordFile)
}

// StepRecord reads the step record of step. A step without one is an error that lists the
// recorded steps.
func (r *Run) StepRecord(step int) (*StepRecord, error) {
	path := filepath.Join(r.Dir, RunStepsDir, fmt.Sprintf("step-%06d.json", step))
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		steps, _ := r.StepRecordSteps()
		if len(steps) == 0 {
			return nil, fmt.Errorf("agrl: %s has no step records (steps/): the trainer records the steps whose trajectories it saves; train with TrajectoriesEvery(1) to record every step", r.Dir)
		}
		return nil, fmt.Errorf("agrl: step %d of %s was not recorded; recorded steps: %s (TrajectoriesEvery(1) records every step; learn.ReplayStep re-runs any step from a checkpoint)", step, r.Dir, stepList(steps))
	}
	if err != nil {
		return nil, fmt.Errorf("agrl: %w", err)
	}
	rec := new(StepRecord)
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("agrl: %s: %w", path, err)
	}
	if err := rec.check(); err != nil {
		return nil, fmt.Errorf("agrl: %s: %w", path, err)
	}
	return rec, nil
}

func stepList(steps []int) string {
	s := ""
	for i, n := range steps {
		if i > 0 {
			s += ", "
		}
		if i == 12 && len(steps) > 14 {
			s += fmt.Sprintf("… (%d more), %d", len(steps)-13, steps[len(steps)-1])
			break
		}
		s += strconv.Itoa(n)
	}
	return s
}

// check validates a record read from disk: every pass indexes existing episodes and holds
// arrays of their lengths, so the derivations below never index out of range.
func (r *StepRecord) check() error {
	for i, e := range r.Episodes {
		if e.Episode == nil {
			return fmt.Errorf("episode %d: missing", i)
		}
		if len(e.Advantages) == 0 {
			return fmt.Errorf("episode %d: no advantage", i)
		}
		if len(e.Advantages) > 1 && len(e.Advantages) != len(e.Returns) { // one, or one a turn's return
			return fmt.Errorf("episode %d: %d advantages for %d returns", i, len(e.Advantages), len(e.Returns))
		}
		// A group's episodes are consecutive, the groups numbered from 0 in order.
		switch {
		case i == 0 && e.Group != 0:
			return fmt.Errorf("episode 0: group %d (a step's groups are numbered from 0)", e.Group)
		case i > 0 && e.Group != r.Episodes[i-1].Group && e.Group != r.Episodes[i-1].Group+1:
			return fmt.Errorf("episode %d: group %d after group %d (a step's groups are numbered from 0, each group's episodes together)", i, e.Group, r.Episodes[i-1].Group)
		}
	}
	for p, ps := range r.Passes {
		arrays := [][][]float32{ps.Mask, ps.Adv, ps.Old, ps.Ref, ps.Weight, ps.LogProbs, ps.Entropy}
		for _, a := range arrays {
			if len(a) != len(ps.Episodes) {
				return fmt.Errorf("pass %d: %d episodes but arrays of %d", p, len(ps.Episodes), len(a))
			}
		}
		for k, i := range ps.Episodes {
			if i < 0 || i >= len(r.Episodes) {
				return fmt.Errorf("pass %d: episode index %d out of range", p, i)
			}
			n := len(r.Episodes[i].Episode.Tokens)
			for _, a := range arrays {
				if len(a[k]) != n {
					return fmt.Errorf("pass %d, episode %d: %d values for %d tokens", p, i, len(a[k]), n)
				}
			}
		}
	}
	if len(r.Passes) == 0 {
		return errors.New("no optimizer step recorded")
	}
	return nil
}

// TokenTerm is one token of one pass as the loss saw it.
type TokenTerm struct {
	Pos int   `json:"pos"`
	ID  int32 `json:"id"`
	// Mask: in the loss. Adv: its advantage. Sampled, Old, New, Ref: the log-probs recorded by
	// the sampler, used as the old policy (Sampled, or New on a fresh pass), of the current
	// policy, and of the reference.
	Mask        bool    `json:"mask"`
	Adv         float64 `json:"adv"`
	Sampled     float64 `json:"sampled"`
	Old         float64 `json:"old"`
	New         float64 `json:"new"`
	Ref         float64 `json:"ref"`
	Ratio       float64 `json:"ratio"`
	ClippedLow  bool    `json:"clipped_low"`
	ClippedHigh bool    `json:"clipped_high"`
	// KL is the token's KL estimate to the reference (0 with KL 0); Objective the clipped
	// surrogate min(ρA, clip(ρ)A); Loss its weighted contribution (−objective + β·KL)·weight,
	// whose sum over the batch is the pass's loss.
	KL        float64 `json:"kl"`
	Objective float64 `json:"objective"`
	Weight    float64 `json:"weight"`
	Loss      float64 `json:"loss"`
	Entropy   float64 `json:"entropy"`
}

// PassTerms are one pass's tokens (per episode of the pass) and the loss and metrics they add
// up to, computed in float64 by the formulas of the trainer's loss.
type PassTerms struct {
	Tokens  [][]TokenTerm
	Loss    float64
	Metrics map[string]float64
}

// Terms recomputes pass p's loss token by token: ratio = exp(new − old) (1 on a fresh pass),
// the clipped surrogate, the KL estimate with Δ = clamp(ref − new, ±KLDeltaClamp), the weighted
// token loss, and the means the trainer logs (MetricKL, MetricEntropy, MetricClipLow,
// MetricClipHigh, MetricRatioMean, MetricRatioDev, MetricApproxKL, MetricPGLoss) over the
// pass's masked tokens.
func (r *StepRecord) Terms(p int) PassTerms {
	ps := r.Passes[p]
	out := PassTerms{Metrics: map[string]float64{}}
	var n, kl, ent, clipLo, clipHi, rmean, rdev, akl, pg float64
	for k, i := range ps.Episodes {
		ep := r.Episodes[i].Episode
		row := make([]TokenTerm, len(ep.Tokens))
		for j, id := range ep.Tokens {
			m := float64(ps.Mask[k][j])
			t := TokenTerm{Pos: j, ID: id, Mask: m != 0, Adv: float64(ps.Adv[k][j]), Sampled: float64(ps.Old[k][j]),
				New: float64(ps.LogProbs[k][j]), Ref: float64(ps.Ref[k][j]), Weight: float64(ps.Weight[k][j]), Entropy: float64(ps.Entropy[k][j])}
			t.Old = t.Sampled
			if ps.Fresh {
				t.Old = t.New
			}
			logRatio := (t.New - t.Old) * m
			t.Ratio = math.Exp(logRatio)
			clipped := math.Max(1-r.ClipLow, math.Min(1+r.ClipHigh, t.Ratio))
			t.Objective = math.Min(t.Ratio*t.Adv, clipped*t.Adv)
			if r.KL > 0 {
				d := math.Max(-KLDeltaClamp, math.Min(KLDeltaClamp, (t.Ref-t.New)*m))
				if r.KLEstimator == K1 {
					t.KL = -d
				} else {
					t.KL = math.Exp(d) - d - 1
				}
			}
			t.ClippedLow = t.Ratio < 1-r.ClipLow && t.Adv < 0
			t.ClippedHigh = t.Ratio > 1+r.ClipHigh && t.Adv > 0
			t.Loss = (-t.Objective + r.KL*t.KL) * t.Weight
			out.Loss += t.Loss
			n += m
			kl += t.KL * m
			ent += t.Entropy * m
			clipLo += b2f(t.ClippedLow) * m
			clipHi += b2f(t.ClippedHigh) * m
			rmean += t.Ratio * m
			rdev += math.Abs(t.Ratio-1) * m
			akl += (t.Ratio - 1 - logRatio) * m
			pg += -t.Objective * m
			row[j] = t
		}
		out.Tokens = append(out.Tokens, row)
	}
	n = math.Max(n, 1)
	out.Metrics[MetricKL], out.Metrics[MetricEntropy] = kl/n, ent/n
	out.Metrics[MetricClipLow], out.Metrics[MetricClipHigh] = clipLo/n, clipHi/n
	out.Metrics[MetricRatioMean], out.Metrics[MetricRatioDev] = rmean/n, rdev/n
	out.Metrics[MetricApproxKL], out.Metrics[MetricPGLoss] = akl/n, pg/n
	return out
}

// GroupView is one group of a step: its task, the rewards of its episodes, the advantages they
// got, and in words why.
type GroupView struct {
	Index    int
	Task     Task
	Episodes []int // indexes StepRecord.Episodes
	Rewards  []float64
	// Returns are the episodes' first-turn returns, which the advantages come from: the
	// rewards, unless a discount, per-turn reward terms or turn-level credit make them differ.
	Returns   []float64
	Mean, Std float64 // of the rewards (population std)
	// Terms are the rubric's components, each with its mean value over the group's episodes
	// (unweighted, as the episodes record them) and its weight.
	Terms      []RewardTerm
	Advantages []float64
	// Signal: the advantages are not all 0, so the group moves the policy-gradient term.
	Signal bool
	Why    string
}

// Prompt is the group's task prompt on one line, cut to n characters (runes) with "…".
func (g GroupView) Prompt(n int) string { return oneLine(g.Task.Prompt, n) }

// StepInspection is one GRPO update opened up: its record, the metrics logged for it, its
// groups, every pass's tokens re-derived, and the difference between what was re-derived and
// what was logged.
type StepInspection struct {
	Record *StepRecord
	Logged Metrics
	Groups []GroupView
	Passes []PassTerms
	// Derived are the logged loss metrics recomputed from the record: those of the first pass
	// (the trainer logs the first optimizer step's) and MetricLoss, the mean of the passes'
	// losses.
	Derived map[string]float64
}

// InspectedMetrics are the logged metrics InspectStep re-derives from a step record.
var InspectedMetrics = []string{MetricKL, MetricEntropy, MetricClipLow, MetricClipHigh, MetricRatioMean,
	MetricRatioDev, MetricApproxKL, MetricPGLoss, MetricLoss}

// InspectStep opens step's record in the run directory dir and re-derives its loss metrics (see
// StepInspection). A step without a record is an error listing the recorded ones.
func InspectStep(dir string, step int) (*StepInspection, error) {
	run, err := OpenRun(dir)
	if err != nil {
		return nil, err
	}
	rec, err := run.StepRecord(step)
	if err != nil {
		return nil, err
	}
	var logged Metrics
	for _, m := range run.Metrics {
		if m.Step() == step {
			logged = m
		}
	}
	if logged == nil {
		return nil, fmt.Errorf("agrl: %s has a record of step %d but no metrics line for it", dir, step)
	}
	return InspectRecord(rec, logged)
}

// InspectRecord inspects a step record against the metrics logged for its step (see
// InspectStep; learn.ReplayStep makes records of any step).
func InspectRecord(rec *StepRecord, logged Metrics) (*StepInspection, error) {
	if rec == nil {
		return nil, errors.New("agrl: no step record")
	}
	if err := rec.check(); err != nil {
		return nil, fmt.Errorf("agrl: step %d's record: %w", rec.Step, err)
	}
	s := &StepInspection{Record: rec, Logged: logged, Derived: map[string]float64{}}
	for p := range rec.Passes {
		s.Passes = append(s.Passes, rec.Terms(p))
	}
	for k, v := range s.Passes[0].Metrics {
		s.Derived[k] = v
	}
	loss := 0.0
	for _, p := range s.Passes {
		loss += p.Loss
	}
	s.Derived[MetricLoss] = loss / float64(len(s.Passes))
	s.Groups = rec.groups()
	return s, nil
}

// Check compares the re-derived metrics with the logged ones and with the learner's own report
// of each pass; a difference above tol is an error naming each metric. tol is absolute for
// values up to 1 in size and relative above (the learner sums in float32: a KL of 10⁵ after a
// blow-up carries float32's 1e-7 relative rounding, not an absolute 1e-5).
//
// A step whose learner applied LoRA dropout (StepRecord.LoRADropout) does not re-derive: Check
// says so instead of comparing.
func (s *StepInspection) Check(tol float64) error {
	if d := s.Record.LoRADropout; d > 0 {
		return fmt.Errorf("agrl: step %d cannot re-derive to its log: its learner applied LoRA dropout %v, so the loss came from log-probs under random masks, not from the scorer's log-probs the record holds (train with Dropout(0) to audit updates exactly)", s.Record.Step, d)
	}
	var errs []error
	off := func(got, want float64) bool { return !(math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))) }
	for _, k := range InspectedMetrics {
		got, want := s.Derived[k], s.Logged[k]
		if off(got, want) {
			errs = append(errs, fmt.Errorf("%s: re-derived %.9g, logged %.9g (|Δ| %.3g > %g)", k, got, want, math.Abs(got-want), tol))
		}
	}
	for p, pt := range s.Passes {
		ps := s.Record.Passes[p]
		if off(pt.Loss, ps.Loss) {
			errs = append(errs, fmt.Errorf("pass %d loss: re-derived %.9g, learner %.9g", p, pt.Loss, ps.Loss))
		}
		for k, want := range ps.Metrics {
			if got, ok := pt.Metrics[k]; ok && off(got, want) {
				errs = append(errs, fmt.Errorf("pass %d %s: re-derived %.9g, learner %.9g", p, k, got, want))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: step %d does not re-derive to its log: %w", s.Record.Step, errors.Join(errs...))
	}
	return nil
}

// MaxDifference is the largest |re-derived − logged| over InspectedMetrics.
func (s *StepInspection) MaxDifference() float64 {
	d := 0.0
	for _, k := range InspectedMetrics {
		d = math.Max(d, math.Abs(s.Derived[k]-s.Logged[k]))
	}
	return d
}

// groups reconstructs the step's groups from the record, with the reason each got the
// advantages it did.
func (r *StepRecord) groups() []GroupView {
	var out []GroupView
	for i, e := range r.Episodes {
		if len(out) == 0 || out[len(out)-1].Index != e.Group {
			out = append(out, GroupView{Index: e.Group, Task: e.Episode.Task})
		}
		g := &out[len(out)-1]
		g.Episodes = append(g.Episodes, i)
		g.Rewards = append(g.Rewards, e.Episode.Reward)
		ret := e.Episode.Reward
		if len(e.Returns) > 0 {
			ret = e.Returns[0]
		}
		g.Returns = append(g.Returns, ret)
		g.Advantages = append(g.Advantages, e.Advantages[0])
		for _, a := range e.Advantages {
			g.Signal = g.Signal || a != 0
		}
	}
	for gi := range out {
		g := &out[gi]
		for _, i := range g.Episodes {
			for _, t := range r.Episodes[i].Episode.Rewards {
				k := slices.IndexFunc(g.Terms, func(x RewardTerm) bool { return x.Name == t.Name })
				if k < 0 {
					g.Terms = append(g.Terms, RewardTerm{Name: t.Name, Weight: t.Weight})
					k = len(g.Terms) - 1
				}
				g.Terms[k].Value += t.Value / float64(len(g.Episodes))
			}
		}
		for _, v := range g.Rewards {
			g.Mean += v
		}
		g.Mean /= float64(len(g.Rewards))
		for _, v := range g.Rewards {
			g.Std += (v - g.Mean) * (v - g.Mean)
		}
		g.Std = math.Sqrt(g.Std / float64(len(g.Rewards)))
		lo, hi := minMax(g.Advantages)
		// The advantages come from the returns: the rewards, unless a discount, per-turn terms
		// or turn-level credit made them differ (then the first turn's return is explained).
		vals, what, turnNote := g.Rewards, "reward", ""
		if !slices.Equal(g.Returns, g.Rewards) || r.turnLevel() {
			vals, what = g.Returns, "return"
			turnNote = " (first-turn returns; later turns' advantages come from their own returns)"
		}
		mean := 0.0
		for _, v := range vals {
			mean += v / float64(len(vals))
		}
		switch {
		case !g.Signal:
			g.Why = fmt.Sprintf("all %d %ss are %.3g: the group's std is 0, so every advantage is 0 and its episodes add nothing to the policy-gradient term (only the KL penalty, if any, acts on them)", len(vals), what, vals[0])
		case r.AdvantageNorm == NormNone:
			g.Why = fmt.Sprintf("%ss %.3g..%.3g around a mean of %.3g%s: advantages %s − mean, %+.3g..%+.3g", what, minOf(vals), maxOf(vals), mean, turnNote, what, lo, hi)
		default:
			g.Why = fmt.Sprintf("%ss %.3g..%.3g around a mean of %.3g%s: advantages (%s − mean) / std, %+.3g..%+.3g; episodes above the mean are pushed up, those below pushed down", what, minOf(vals), maxOf(vals), mean, turnNote, what, lo, hi)
		}
	}
	return out
}

func minMax(v []float64) (float64, float64) { return minOf(v), maxOf(v) }

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// turnLevel reports whether the step's episodes have per-turn advantages.
func (r *StepRecord) turnLevel() bool {
	for _, e := range r.Episodes {
		if len(e.Advantages) > 1 {
			return true
		}
	}
	return false
}
