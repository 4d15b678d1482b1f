package nb

import (
	"errors"
	"fmt"
	"html"
	"strings"
	"unicode"

	"agrl.dev/agrl"
)

// Filter selects episodes for the trajectory viewer. Successes, Failures and All are filters;
// Ended, OfDifficulty and And build more.
type Filter func(ep *agrl.Episode) bool

// All keeps every episode.
func All(*agrl.Episode) bool { return true }

// Successes keeps the episodes answered correctly.
func Successes(ep *agrl.Episode) bool { return ep.Correct }

// Failures keeps the episodes not answered correctly (wrong answers, giving up, cut-offs).
func Failures(ep *agrl.Episode) bool { return !ep.Correct }

// Ended keeps the episodes that ended for reason t.
func Ended(t agrl.Termination) Filter {
	return func(ep *agrl.Episode) bool { return ep.Termination == t }
}

// OfDifficulty keeps the episodes of tasks of difficulty d.
func OfDifficulty(d agrl.Difficulty) Filter {
	return func(ep *agrl.Episode) bool { return ep.Task.Difficulty == d }
}

// And keeps the episodes that every filter keeps.
func And(filters ...Filter) Filter {
	return func(ep *agrl.Episode) bool {
		for _, f := range filters {
			if f != nil && !f(ep) {
				return false
			}
		}
		return true
	}
}

// Select returns the first n episodes that f keeps, in order (n <= 0: all of them; a nil
// filter keeps everything). Nil episodes are skipped.
func Select(eps []*agrl.Episode, f Filter, n int) []*agrl.Episode {
	var out []*agrl.Episode
	for _, ep := range eps {
		if ep == nil || (f != nil && !f(ep)) {
			continue
		}
		if n > 0 && len(out) == n {
			break
		}
		out = append(out, ep)
	}
	return out
}

// Latest reads the episodes saved at the run's last trajectory step.
func Latest(run *agrl.Run) ([]*agrl.Episode, error) {
	if run == nil {
		return nil, errors.New("nb: Latest of a nil run")
	}
	steps, err := run.TrajectorySteps()
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("nb: run %q saved no trajectories yet", run.Name)
	}
	return run.Trajectories(steps[len(steps)-1])
}

// Trajectories displays the first n episodes that f keeps (n <= 0: all), each with its turns,
// observations (marked as masked out of the loss), tool errors, reward breakdown and
// termination reason.
//
//	nb.Trajectories(eps, nb.Failures, 3)
func Trajectories(eps []*agrl.Episode, f Filter, n int) { ShowHTML(TrajectoriesHTML(eps, f, n)) }

// TrajectoriesHTML renders what Trajectories displays.
func TrajectoriesHTML(eps []*agrl.Episode, f Filter, n int) string {
	sel := Select(eps, f, n)
	total := len(Select(eps, f, 0))
	var b strings.Builder
	b.WriteString(`<div class="agrl-trajectories">`)
	if len(sel) == 0 {
		fmt.Fprintf(&b, `<p style="%s">no episode matches (out of %d)</p>`, styleNote, len(eps))
	} else {
		fmt.Fprintf(&b, `<p style="%s">%d of %d matching episodes (%d in all)</p>`, styleNote, len(sel), total, len(eps))
	}
	for _, ep := range sel {
		writeEpisodeHTML(&b, ep)
	}
	b.WriteString(`</div>`)
	return b.String()
}

// Episode displays one episode.
func Episode(ep *agrl.Episode) { ShowHTML(EpisodeHTML(ep)) }

// EpisodeHTML renders one episode as an HTML fragment with inline styles (no scripts, no
// style sheet), so it survives notebook conversion and can be pasted into reports.
func EpisodeHTML(ep *agrl.Episode) string {
	var b strings.Builder
	writeEpisodeHTML(&b, ep)
	return b.String()
}

// maxAuditRows caps the tokens listed by the trajectory viewer's folded audit (a pretrained
// model's episodes run to thousands of tokens).
const maxAuditRows = 1024

// Inline styles: notebook front ends and nbconvert keep style attributes, and text inside
// <pre> and <code> is left alone by the math renderer (episodes may contain "$").
const (
	styleEpisode  = "border:1px solid #ccc;border-radius:6px;padding:8px 10px;margin:8px 0;font-family:sans-serif;font-size:13px;max-width:60em"
	styleNote     = "color:#555;font-size:12px;margin:2px 0"
	stylePre      = "margin:2px 0 4px 0;padding:4px 6px;white-space:pre-wrap;word-break:break-word;font-size:12px;background:#fff"
	styleThink    = "margin:2px 0;padding:2px 6px;white-space:pre-wrap;font-style:italic;color:#555;font-size:12px;background:#fff"
	styleObs      = "margin:2px 0 6px 1.5em;padding:2px 6px;background:#f1f1f1;border-left:3px dashed #9e9e9e;color:#333"
	styleObsLabel = "font-size:11px;color:#757575"
	styleToolErr  = "margin:2px 0 4px 1.5em;padding:2px 6px;background:#fdecea;color:#b00020;font-size:12px"
	styleTurn     = "margin:6px 0 2px 0;font-size:12px;color:#1a237e"
	styleTable    = "border-collapse:collapse;font-size:12px;margin:4px 0"
	styleCell     = "border:1px solid #ddd;padding:2px 8px;text-align:right"
	styleCellL    = "border:1px solid #ddd;padding:2px 8px;text-align:left"
)

// esc escapes text for HTML, control characters included (see clean).
func esc(s string) string { return html.EscapeString(clean(s)) }

func writeEpisodeHTML(b *strings.Builder, ep *agrl.Episode) {
	if ep == nil {
		fmt.Fprintf(b, `<p style="%s">(nil episode)</p>`, styleNote)
		return
	}
	fmt.Fprintf(b, `<div class="agrl-episode" style="%s">`, styleEpisode)
	// Header: outcome, task, termination, reward.
	outcome, color := "✗ not solved", "#b00020"
	if ep.Correct {
		outcome, color = "✓ solved", "#1b5e20"
	}
	fmt.Fprintf(b, `<div><b style="color:%s">%s</b> · <code>%s</code> · %s · ended: <b class="agrl-termination">%s</b> · reward <b>%.3f</b></div>`,
		color, outcome, esc(ep.Task.ID), esc(ep.Task.Difficulty.String()), esc(string(ep.Termination)), ep.Reward)
	fmt.Fprintf(b, `<div style="%s">answer <code>%s</code> · gold <code>%s</code> · %d turns, %d tool calls, %d tool errors, %d invalid actions</div>`,
		styleNote, esc(quoteEmpty(ep.Answer)), esc(ep.Task.Answer), len(ep.Turns), ep.ToolCalls(), ep.ToolErrors(), ep.InvalidActions())
	if ep.Error != "" {
		fmt.Fprintf(b, `<div style="%s">environment error: %s</div>`, styleToolErr, esc(ep.Error))
	}
	// The prompt is input, like observations: in the context, never in the loss.
	fmt.Fprintf(b, `<div class="agrl-prompt" data-loss-mask="0" style="%s"><div style="%s">prompt · input, masked out of the loss</div><pre style="%s">%s</pre></div>`,
		styleObs, styleObsLabel, stylePre, esc(ep.Prompt))
	for i, t := range ep.Turns {
		fmt.Fprintf(b, `<div class="agrl-turn" style="%s"><b>turn %d</b> · policy action (trained on)</div>`, styleTurn, i+1)
		writeActionHTML(b, t)
		if t.ToolError != "" {
			fmt.Fprintf(b, `<div class="agrl-tool-error" style="%s">tool error: %s</div>`, styleToolErr, esc(t.ToolError))
		}
		if t.Observation != "" || t.Action.Kind != agrl.AnswerAction {
			fmt.Fprintf(b, `<div class="agrl-obs" data-loss-mask="0" style="%s"><div style="%s">observation · masked out of the loss</div><pre style="%s">%s</pre></div>`,
				styleObs, styleObsLabel, stylePre, esc(t.Observation))
		}
	}
	writeRewardsHTML(b, ep)
	if n := len(ep.Tokens); n > 0 {
		trained := 0
		for _, m := range ep.LossMask {
			trained += int(m)
		}
		fmt.Fprintf(b, `<div style="%s">tokens: %d in context, %d trained on (loss mask 1), %d masked (prompt and observations)</div>`,
			styleNote, n, trained, n-trained)
		// The mask and token audit, folded: every token's id and role, and the sampled-vs-trained
		// id mismatch count (TokenAudit adds each token's text, given the tokenizer).
		fmt.Fprintf(b, `<details style="%s"><summary>token audit</summary>%s</details>`, styleNote, tokenAuditHTML(ep, nil, maxAuditRows))
	}
	b.WriteString(`</div>`)
}

func writeActionHTML(b *strings.Builder, t agrl.Turn) {
	a := t.Action
	if a.Think != "" {
		fmt.Fprintf(b, `<pre class="agrl-think" style="%s">think: %s</pre>`, styleThink, esc(a.Think))
	}
	switch a.Kind {
	case agrl.ToolCall:
		fmt.Fprintf(b, `<pre class="agrl-call" style="%s">tool call: <b>%s</b>(%s)</pre>`, stylePre, esc(a.Tool), esc(a.Args))
	case agrl.AnswerAction:
		if a.GivesUp() {
			fmt.Fprintf(b, `<pre class="agrl-answer" style="%s">answer: (empty: gives up)</pre>`, stylePre)
		} else {
			fmt.Fprintf(b, `<pre class="agrl-answer" style="%s">answer: <b>%s</b></pre>`, stylePre, esc(a.Answer))
		}
	default:
		fmt.Fprintf(b, `<pre class="agrl-invalid" style="%s;color:#b00020">invalid action (%s):
%s</pre>`, stylePre, esc(a.Invalid), esc(quoteEmpty(t.Text)))
	}
}

func writeRewardsHTML(b *strings.Builder, ep *agrl.Episode) {
	if len(ep.Rewards) == 0 {
		fmt.Fprintf(b, `<div style="%s">not scored</div>`, styleNote)
		return
	}
	fmt.Fprintf(b, `<table class="agrl-rewards" style="%s"><tr><th style="%s">reward component</th><th style="%s">value</th><th style="%s">weight</th><th style="%s">value × weight</th></tr>`,
		styleTable, styleCellL, styleCell, styleCell, styleCell)
	for _, r := range ep.Rewards {
		note := ""
		if r.Weight == 0 {
			note = ` <span style="color:#757575">(logged only)</span>`
		}
		fmt.Fprintf(b, `<tr><td style="%s">%s%s</td><td style="%s">%s</td><td style="%s">%s</td><td style="%s">%+.3f</td></tr>`,
			styleCellL, esc(r.Name), note, styleCell, num(r.Value), styleCell, num(r.Weight), styleCell, contribution(r))
	}
	fmt.Fprintf(b, `<tr><td style="%s"><b>total</b></td><td style="%s"></td><td style="%s"></td><td style="%s"><b>%+.3f</b></td></tr></table>`,
		styleCellL, styleCell, styleCell, styleCell, ep.Reward)
}

// num formats a number compactly: integers without decimals, others with up to 3.
func num(v float64) string {
	if v == float64(int64(v)) && v < 1e15 && v > -1e15 {
		return fmt.Sprintf("%d", int64(v))
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// BeforeAfter displays episodes of the same tasks side by side: before (e.g. the SFT policy)
// on the left, after (e.g. the GRPO policy) on the right. Episodes are paired by task ID (the
// k-th episode of a task before with its k-th episode after); unpaired ones are counted.
// Pass slices of the episodes to limit what is shown.
func BeforeAfter(before, after []*agrl.Episode) { ShowHTML(BeforeAfterHTML(before, after)) }

// Pair is an episode of a task before and after training.
type Pair struct{ Before, After *agrl.Episode }

// PairByTask pairs the k-th episode of each task in before with its k-th episode in after, in
// the order of before, and counts the episodes left without a partner on each side.
func PairByTask(before, after []*agrl.Episode) (pairs []Pair, unpairedBefore, unpairedAfter int) {
	queue := map[string][]*agrl.Episode{}
	for _, ep := range after {
		if ep != nil {
			queue[ep.Task.ID] = append(queue[ep.Task.ID], ep)
		}
	}
	for _, ep := range before {
		if ep == nil {
			continue
		}
		q := queue[ep.Task.ID]
		if len(q) == 0 {
			unpairedBefore++
			continue
		}
		pairs = append(pairs, Pair{ep, q[0]})
		queue[ep.Task.ID] = q[1:]
	}
	for _, q := range queue {
		unpairedAfter += len(q)
	}
	return pairs, unpairedBefore, unpairedAfter
}

// BeforeAfterHTML renders what BeforeAfter displays: a summary line (pairs, fixed, broken,
// mean reward before and after), then one row per pair.
func BeforeAfterHTML(before, after []*agrl.Episode) string {
	pairs, ub, ua := PairByTask(before, after)
	var b strings.Builder
	b.WriteString(`<div class="agrl-before-after">`)
	if len(pairs) == 0 {
		fmt.Fprintf(&b, `<p style="%s">no task appears on both sides (%d before, %d after)</p></div>`, styleNote, len(before), len(after))
		return b.String()
	}
	fixed, broken := 0, 0
	rb, ra := 0.0, 0.0
	for _, p := range pairs {
		switch {
		case p.After.Correct && !p.Before.Correct:
			fixed++
		case p.Before.Correct && !p.After.Correct:
			broken++
		}
		rb += p.Before.Reward
		ra += p.After.Reward
	}
	n := float64(len(pairs))
	fmt.Fprintf(&b, `<p style="%s">%d pairs: %d fixed, %d broken, %d unchanged; mean reward %.3f → %.3f; unpaired: %d before, %d after</p>`,
		styleNote, len(pairs), fixed, broken, len(pairs)-fixed-broken, rb/n, ra/n, ub, ua)
	fmt.Fprintf(&b, `<table style="border-collapse:collapse;width:100%%"><tr><th style="%s">before</th><th style="%s">after</th></tr>`, styleCellL, styleCellL)
	for _, p := range pairs {
		change := "unchanged"
		switch {
		case p.After.Correct && !p.Before.Correct:
			change = "fixed"
		case p.Before.Correct && !p.After.Correct:
			change = "broken"
		}
		fmt.Fprintf(&b, `<tr><td colspan="2" style="%s;background:#e8eaf6"><code>%s</code> · %s · reward %.3f → %.3f (%+.3f)</td></tr>`,
			styleCellL, esc(p.Before.Task.ID), change, p.Before.Reward, p.After.Reward, p.After.Reward-p.Before.Reward)
		fmt.Fprintf(&b, `<tr><td style="vertical-align:top;width:50%%;padding:0 4px">%s</td><td style="vertical-align:top;width:50%%;padding:0 4px">%s</td></tr>`,
			EpisodeHTML(p.Before), EpisodeHTML(p.After))
	}
	b.WriteString(`</table></div>`)
	return b.String()
}

// EpisodeText renders one episode as plain text for terminals. Control characters in the
// episode's text are shown escaped (\x1b…), so a policy cannot drive the terminal.
func EpisodeText(ep *agrl.Episode) string {
	if ep == nil {
		return "(nil episode)\n"
	}
	var b strings.Builder
	outcome := "NOT SOLVED"
	if ep.Correct {
		outcome = "SOLVED"
	}
	fmt.Fprintf(&b, "== %s  %s  %s  ended: %s  reward %.3f\n", outcome, clean(ep.Task.ID), ep.Task.Difficulty, clean(string(ep.Termination)), ep.Reward)
	fmt.Fprintf(&b, "   answer %q  gold %q  (%d turns, %d tool calls, %d tool errors, %d invalid)\n",
		clean(ep.Answer), clean(ep.Task.Answer), len(ep.Turns), ep.ToolCalls(), ep.ToolErrors(), ep.InvalidActions())
	if ep.Error != "" {
		fmt.Fprintf(&b, "   environment error: %s\n", clean(ep.Error))
	}
	b.WriteString("   prompt [masked out of the loss]\n")
	indent(&b, "   | ", ep.Prompt)
	for i, t := range ep.Turns {
		fmt.Fprintf(&b, "-- turn %d [policy, trained on]\n", i+1)
		a := t.Action
		if a.Think != "" {
			indent(&b, "   think: ", a.Think)
		}
		switch a.Kind {
		case agrl.ToolCall:
			indent(&b, "   tool call: ", a.Tool+"("+a.Args+")")
		case agrl.AnswerAction:
			if a.GivesUp() {
				b.WriteString("   answer: (empty: gives up)\n")
			} else {
				indent(&b, "   answer: ", a.Answer)
			}
		default:
			indent(&b, "   invalid action ("+a.Invalid+"): ", quoteEmpty(t.Text))
		}
		if t.ToolError != "" {
			indent(&b, "   tool error: ", t.ToolError)
		}
		if t.Observation != "" || a.Kind != agrl.AnswerAction {
			b.WriteString("   observation [masked out of the loss]\n")
			indent(&b, "   | ", t.Observation)
		}
	}
	if len(ep.Rewards) > 0 {
		b.WriteString("   rewards:")
		for _, r := range ep.Rewards {
			fmt.Fprintf(&b, " %s %s×%s=%+.3f", clean(r.Name), num(r.Value), num(r.Weight), contribution(r))
		}
		fmt.Fprintf(&b, "  total %+.3f\n", ep.Reward)
	}
	return b.String()
}

// TrajectoriesText renders the first n episodes that f keeps as plain text.
func TrajectoriesText(eps []*agrl.Episode, f Filter, n int) string {
	sel := Select(eps, f, n)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d matching episodes (%d in all)\n", len(sel), len(Select(eps, f, 0)), len(eps))
	for _, ep := range sel {
		b.WriteString(EpisodeText(ep))
	}
	return b.String()
}

// indent writes text line by line, the first line after first and the others aligned under it.
func indent(b *strings.Builder, first, text string) {
	pad := strings.Repeat(" ", len([]rune(first)))
	if strings.HasSuffix(first, "| ") {
		pad = first
	}
	for i, line := range strings.Split(clean(text), "\n") {
		if i == 0 {
			b.WriteString(first)
		} else {
			b.WriteString(pad)
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
}

// clean escapes control characters other than newline and tab (and invalid UTF-8).
func clean(s string) string {
	ok := true
	for _, r := range s {
		if r == unicode.ReplacementChar || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == unicode.ReplacementChar && len(s[i:]) > 0 && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) && r != '\n' && r != '\t':
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// contribution is a component's share of the reward, without a negative zero ("-0.000").
func contribution(r agrl.RewardTerm) float64 { return r.Value*r.Weight + 0 }
