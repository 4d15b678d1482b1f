package agrl

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// EpisodeTokens returns episode i's tokens in the first pass that trained on it, with that
// pass's index (-1 and nil when no pass holds it).
func (s *StepInspection) EpisodeTokens(i int) (int, []TokenTerm) {
	for p, ps := range s.Record.Passes {
		for k, e := range ps.Episodes {
			if e == i {
				return p, s.Passes[p].Tokens[k]
			}
		}
	}
	return -1, nil
}

// TopEpisode picks the episode worth reading first: in the first group with signal, the one
// whose advantage is largest in size (0 when no group has signal).
func (s *StepInspection) TopEpisode() int {
	for _, g := range s.Groups {
		if !g.Signal {
			continue
		}
		best, size := g.Episodes[0], -1.0
		for k, i := range g.Episodes {
			if a := math.Abs(g.Advantages[k]); a > size {
				best, size = i, a
			}
		}
		return best
	}
	return 0
}

// Piece is token id's text as the record holds it, quoted so that spaces and control bytes show.
func (s *StepInspection) Piece(id int32) string {
	p, ok := s.Record.Pieces[id]
	if !ok {
		return fmt.Sprintf("<%d>", id)
	}
	q := fmt.Sprintf("%q", p)
	return q[1 : len(q)-1]
}

// LossShares are each token's share of the pass's loss terms: |loss term| over the sum of
// |loss term| across the pass's tokens (so the shares of a pass add up to 1).
func (s *StepInspection) LossShares(pass int) [][]float64 {
	total := 0.0
	for _, row := range s.Passes[pass].Tokens {
		for _, t := range row {
			total += math.Abs(t.Loss)
		}
	}
	out := make([][]float64, len(s.Passes[pass].Tokens))
	for k, row := range s.Passes[pass].Tokens {
		out[k] = make([]float64, len(row))
		for j, t := range row {
			if total > 0 {
				out[k][j] = math.Abs(t.Loss) / total
			}
		}
	}
	return out
}

// WriteText writes the inspection as text (what `agrl inspect` prints): the settings, the
// re-derived metrics next to the logged ones, every group (rewards → advantages, and why), and
// episode ep token by token (its policy tokens, or every token with all).
func (s *StepInspection) WriteText(w io.Writer, ep int, all bool) error {
	r := s.Record
	kl := "no KL penalty"
	if r.KL > 0 {
		kl = fmt.Sprintf("KL β %g (%s)", r.KL, r.KLEstimator)
	}
	fmt.Fprintf(w, "step %d: %d groups × %d episodes, %d optimizer step(s); clip [1−%g, 1+%g], %s, temperature %g\n",
		r.Step, len(s.Groups), r.Group, len(r.Passes), r.ClipLow, r.ClipHigh, kl, r.Temperature)
	if r.Passes[0].Fresh {
		fmt.Fprintln(w, "the first optimizer step runs on the weights that sampled: its ratios are exactly 1 and nothing clips (the logged clip/* and ratio/* are those)")
	}
	fmt.Fprintf(w, "\n%-12s %14s %14s %10s\n", "metric", "logged", "re-derived", "|Δ|")
	for _, k := range InspectedMetrics {
		fmt.Fprintf(w, "%-12s %14.7g %14.7g %10.2g\n", k, s.Logged[k], s.Derived[k], math.Abs(s.Derived[k]-s.Logged[k]))
	}
	if err := s.Check(1e-5); err != nil {
		fmt.Fprintf(w, "MISMATCH: %v\n", err)
	} else {
		fmt.Fprintf(w, "every metric re-derived from the record to within 1e-5 (relative above 1; largest |Δ| %.2g)\n", s.MaxDifference())
	}
	fmt.Fprintln(w, "\ngroups: rewards → advantages")
	for _, g := range s.Groups {
		fmt.Fprintf(w, "  group %d, task %s: %s\n", g.Index, g.Task.ID, g.Prompt(60))
		fmt.Fprintf(w, "    rewards    %s\n    advantages %s\n", nums(g.Rewards, "%.3g"), nums(g.Advantages, "%+.2f"))
		if len(g.Terms) > 0 {
			fmt.Fprintf(w, "    mean terms %s\n", termsText(g.Terms))
		}
		fmt.Fprintf(w, "    %s\n", g.Why)
	}
	for _, d := range r.Dropped {
		fmt.Fprintf(w, "  dropped (dynamic sampling, round %d), task %s: rewards %s\n", d.Round, d.Task.ID, nums(d.Rewards, "%.3g"))
	}
	if ep < 0 || ep >= len(r.Episodes) {
		return fmt.Errorf("agrl: episode %d: the step has episodes 0..%d", ep, len(r.Episodes)-1)
	}
	e := r.Episodes[ep]
	pass, toks := s.EpisodeTokens(ep)
	fmt.Fprintf(w, "\nepisode %d (group %d): reward %.3g", ep, e.Group, e.Episode.Reward)
	for _, t := range e.Episode.Rewards {
		fmt.Fprintf(w, " [%s %.3g×%.3g]", t.Name, t.Value, t.Weight)
	}
	fmt.Fprintf(w, ", advantage %s, %s\n", nums(e.Advantages, "%+.3f"), e.Episode.Termination)
	if toks == nil {
		fmt.Fprintln(w, "  (in no optimizer step)")
		return nil
	}
	share := s.LossShares(pass)
	k := 0
	for kk, i := range r.Passes[pass].Episodes {
		if i == ep {
			k = kk
		}
	}
	fmt.Fprintf(w, "pass %d; shares are of Σ|loss term| over the pass's %d episodes\n", pass, len(r.Passes[pass].Episodes))
	fmt.Fprintf(w, "%5s %6s  %-10s %4s %9s %9s %9s %7s %5s %9s %7s %10s %6s\n", "pos", "id", "text", "mask", "sampled", "new", "ref", "ratio", "clip", "kl", "adv", "loss term", "share")
	for j, t := range toks {
		if !t.Mask && !all {
			continue
		}
		clip := ""
		switch {
		case t.ClippedLow:
			clip = "low"
		case t.ClippedHigh:
			clip = "high"
		}
		if !t.Mask {
			fmt.Fprintf(w, "%5d %6d  %-10s %4s\n", t.Pos, t.ID, s.Piece(t.ID), "·")
			continue
		}
		fmt.Fprintf(w, "%5d %6d  %-10s %4s %9.4f %9.4f %9.4f %7.4f %5s %9.2g %+7.3f %10.3g %5.1f%%\n", t.Pos, t.ID, s.Piece(t.ID), "1",
			t.Sampled, t.New, t.Ref, t.Ratio, clip, t.KL, t.Adv, t.Loss, 100*share[k][j])
	}
	return nil
}

func nums(v []float64, f string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(parts, " ")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// termsText writes reward components as "name value×weight" pairs.
func termsText(terms []RewardTerm) string {
	parts := make([]string, len(terms))
	for i, t := range terms {
		parts[i] = fmt.Sprintf("%s %.3g×%.3g", t.Name, t.Value, t.Weight)
	}
	return strings.Join(parts, ", ")
}

// TermsText is the group's mean reward components as text ("format 1×0.2, tool 0.88×0.3, …").
func (g GroupView) TermsText() string { return termsText(g.Terms) }
