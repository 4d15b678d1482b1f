package nb

import (
	"fmt"
	"html"
	"math"
	"strings"

	"agrl.dev/agrl"
)

// InspectStep shows one recorded GRPO update of a run (agrl.InspectStep): the loss metrics
// re-derived from its step record next to the logged ones, its groups (rewards → advantages,
// and why a group got 0) and, token by token, the episode with the largest advantage of the
// first group with signal. InspectEpisode picks the episode.
func InspectStep(run *agrl.Run, step int) error {
	s, err := agrl.InspectStep(run.Dir, step)
	if err != nil {
		return err
	}
	ShowHTML(InspectStepHTML(s, s.TopEpisode()))
	return nil
}

// InspectEpisode is InspectStep showing episode ep of the step.
func InspectEpisode(run *agrl.Run, step, ep int) error {
	s, err := agrl.InspectStep(run.Dir, step)
	if err != nil {
		return err
	}
	if ep < 0 || ep >= len(s.Record.Episodes) {
		return fmt.Errorf("nb: episode %d: step %d has episodes 0..%d", ep, step, len(s.Record.Episodes)-1)
	}
	ShowHTML(InspectStepHTML(s, ep))
	return nil
}

// InspectStepHTML renders an inspection (see InspectStep) with episode ep token by token: the
// episode's text with every token in the loss coloured by its advantage (green up, red down,
// stronger for a larger share of the loss; hover for the numbers), then a table of the tokens in
// the loss — sampled, current and reference log-probs, ratio, clip, KL term, advantage, loss
// term and share.
func InspectStepHTML(s *agrl.StepInspection, ep int) string {
	var b strings.Builder
	r := s.Record
	b.WriteString(`<div class="agrl-inspect" style="font-family:sans-serif;font-size:13px">`)
	kl := "no KL penalty"
	if r.KL > 0 {
		kl = fmt.Sprintf("KL β %g (%s)", r.KL, r.KLEstimator)
	}
	fmt.Fprintf(&b, `<div><b>step %d</b>: %d groups × %d episodes, %d optimizer step(s); clip [1−%g, 1+%g], %s, temperature %g</div>`,
		r.Step, len(s.Groups), r.Group, len(r.Passes), r.ClipLow, r.ClipHigh, html.EscapeString(kl), r.Temperature)
	check := fmt.Sprintf(`<span style="color:#2e7d32">every metric re-derived from the record to within 1e-5 (relative above 1; largest |Δ| %.2g)</span>`, s.MaxDifference())
	if err := s.Check(1e-5); err != nil {
		check = `<b style="color:#c62828">` + html.EscapeString(err.Error()) + `</b>`
	}
	b.WriteString(`<table style="border-collapse:collapse;margin:6px 0"><tr><th align="left">metric</th><th>logged</th><th>re-derived</th><th>|Δ|</th></tr>`)
	for _, k := range agrl.InspectedMetrics {
		fmt.Fprintf(&b, `<tr><td>%s</td><td align="right">%.6g</td><td align="right">%.6g</td><td align="right">%.1e</td></tr>`,
			html.EscapeString(k), s.Logged[k], s.Derived[k], math.Abs(s.Derived[k]-s.Logged[k]))
	}
	fmt.Fprintf(&b, `</table><div>%s</div>`, check)
	if r.Passes[0].Fresh {
		b.WriteString(`<div style="color:#555">The first optimizer step runs on the weights that sampled: its ratios are exactly 1 and nothing clips.</div>`)
	}

	b.WriteString(`<h4 style="margin:10px 0 4px">Groups: rewards → advantages</h4><table style="border-collapse:collapse">`)
	b.WriteString(`<tr><th>group</th><th align="left">task</th><th align="left">rewards → advantages</th><th align="left">why</th></tr>`)
	for _, g := range s.Groups {
		var cells strings.Builder
		for k, i := range g.Episodes {
			a := g.Advantages[k]
			style := "background:#eee"
			switch {
			case a > 0:
				style = "background:#c8e6c9"
			case a < 0:
				style = "background:#ffcdd2"
			}
			if i == ep {
				style += ";outline:2px solid #333"
			}
			fmt.Fprintf(&cells, `<span title="episode %d" style="%s;padding:0 3px;margin:1px;display:inline-block;font-family:monospace">%.2g→%+.2f</span>`, i, style, g.Rewards[k], a)
		}
		terms := ""
		if len(g.Terms) > 0 {
			terms = `<div style="font-size:11px;color:#555">mean terms: ` + html.EscapeString(g.TermsText()) + `</div>`
		}
		fmt.Fprintf(&b, `<tr style="border-top:1px solid #ddd"><td>%d</td><td>%s</td><td>%s%s</td><td style="color:#555">%s</td></tr>`,
			g.Index, html.EscapeString(g.Prompt(48)), cells.String(), terms, html.EscapeString(g.Why))
	}
	b.WriteString(`</table>`)
	for _, d := range r.Dropped {
		fmt.Fprintf(&b, `<div style="color:#555">dropped by dynamic sampling (round %d): %s, rewards %v</div>`, d.Round, html.EscapeString(agrl.GroupView{Task: d.Task}.Prompt(48)), d.Rewards)
	}

	if ep < 0 || ep >= len(r.Episodes) {
		b.WriteString(`</div>`)
		return b.String()
	}
	e := r.Episodes[ep]
	pass, toks := s.EpisodeTokens(ep)
	fmt.Fprintf(&b, `<h4 style="margin:10px 0 4px">Episode %d (group %d): reward %.3g, advantage %s, %s</h4>`,
		ep, e.Group, e.Episode.Reward, html.EscapeString(advText(e.Advantages)), html.EscapeString(string(e.Episode.Termination)))
	if toks == nil {
		b.WriteString(`<div>(in no optimizer step)</div></div>`)
		return b.String()
	}
	k := 0
	for kk, i := range r.Passes[pass].Episodes {
		if i == ep {
			k = kk
		}
	}
	share := s.LossShares(pass)[k]
	top := 0.0
	for _, v := range share {
		top = math.Max(top, v)
	}
	b.WriteString(`<div style="font-family:monospace;white-space:pre-wrap;line-height:1.7;border:1px solid #ddd;padding:6px">`)
	for j, t := range toks {
		text := html.EscapeString(r.Pieces[t.ID])
		if !t.Mask {
			fmt.Fprintf(&b, `<span style="color:#777" title="pos %d id %d (not in the loss)">%s</span>`, t.Pos, t.ID, text)
			continue
		}
		alpha := 0.15
		if top > 0 {
			alpha += 0.75 * share[j] / top
		}
		col := "46,125,50"
		if t.Adv < 0 {
			col = "198,40,40"
		} else if t.Adv == 0 {
			col = "120,120,120"
		}
		border := ""
		if t.ClippedLow || t.ClippedHigh {
			border = ";outline:1px dashed #000"
		}
		fmt.Fprintf(&b, `<span style="background:rgba(%s,%.2f)%s" title="pos %d id %d: sampled %.4f, new %.4f, ref %.4f, ratio %.4f, kl %.3g, adv %+.3f, loss term %.3g (%.1f%%)">%s</span>`,
			col, alpha, border, t.Pos, t.ID, t.Sampled, t.New, t.Ref, t.Ratio, t.KL, t.Adv, t.Loss, 100*share[j], text)
	}
	b.WriteString(`</div>`)
	fmt.Fprintf(&b, `<table style="border-collapse:collapse;font-family:monospace;margin-top:6px"><tr><th>pos</th><th>id</th><th>text</th><th>sampled</th><th>new</th><th>ref</th><th>ratio</th><th>clip</th><th>kl</th><th>adv</th><th>loss term</th><th>share</th></tr>`)
	for j, t := range toks {
		if !t.Mask {
			continue
		}
		clip := ""
		if t.ClippedLow {
			clip = "low"
		} else if t.ClippedHigh {
			clip = "high"
		}
		fmt.Fprintf(&b, `<tr><td>%d</td><td>%d</td><td>%s</td><td>%.4f</td><td>%.4f</td><td>%.4f</td><td>%.4f</td><td>%s</td><td>%.2g</td><td>%+.3f</td><td>%.3g</td><td>%.1f%%</td></tr>`,
			t.Pos, t.ID, html.EscapeString(s.Piece(t.ID)), t.Sampled, t.New, t.Ref, t.Ratio, clip, t.KL, t.Adv, t.Loss, 100*share[j])
	}
	fmt.Fprintf(&b, `</table><div style="color:#555">Shares are of Σ|loss term| over the %d episodes of optimizer step %d.</div></div>`, len(r.Passes[pass].Episodes), pass)
	return b.String()
}

func advText(v []float64) string {
	parts := make([]string, len(v))
	for i, a := range v {
		parts[i] = fmt.Sprintf("%+.3f", a)
	}
	return strings.Join(parts, " ")
}
