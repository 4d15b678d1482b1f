package nb

import (
	"fmt"
	"html"
	"strings"

	"agrl.dev/agrl"
)

// Token roles in an episode's token stream (TokenRoles).
const (
	RolePrompt      = "prompt"      // the first observation, before the policy's first token
	RolePolicy      = "policy"      // sampled by the policy: trained on (LossMask 1)
	RoleObservation = "observation" // appended after an action: the env's reply, tags, headers
)

// TokenRoles labels each token of an episode's stream: prompt, policy or observation.
func TokenRoles(ep *agrl.Episode) []string {
	roles := make([]string, len(ep.Tokens))
	seen := false
	for i := range ep.Tokens {
		switch {
		case i < len(ep.LossMask) && ep.LossMask[i] == 1:
			roles[i], seen = RolePolicy, true
		case seen:
			roles[i] = RoleObservation
		default:
			roles[i] = RolePrompt
		}
	}
	return roles
}

// TokenAudit shows TokenAuditHTML in the notebook.
func TokenAudit(ep *agrl.Episode, decode func([]int32) string) { ShowHTML(TokenAuditHTML(ep, decode)) }

// TokenAuditHTML renders an episode token by token — position, id, text (decode turns ids into
// text: the policy's tokenizer's Decode; nil leaves the text out, as EpisodeHTML's folded audit
// does), role and, for policy tokens, the log-probability
// recorded at sampling — under a line that counts each role and the sampled-vs-trained id
// mismatches (agrl.Episode.TokenMismatches: 0, or the episode trains on tokens never sampled).
// Policy tokens are highlighted: they are the only ones in the loss.
func TokenAuditHTML(ep *agrl.Episode, decode func([]int32) string) string {
	return tokenAuditHTML(ep, decode, len(ep.Tokens))
}

// tokenAuditHTML is TokenAuditHTML showing at most maxRows tokens (the counts cover them all).
func tokenAuditHTML(ep *agrl.Episode, decode func([]int32) string, maxRows int) string {
	var b strings.Builder
	roles := TokenRoles(ep)
	count := map[string]int{}
	for _, r := range roles {
		count[r]++
	}
	mismatch := "no sampled record (a text-level episode)"
	if n, ok := ep.TokenMismatches(); ok {
		mismatch = fmt.Sprintf("%d sampled-vs-trained id mismatches", n)
		if n > 0 {
			mismatch = `<b style="color:#c62828">` + mismatch + `</b>`
		}
	}
	fmt.Fprintf(&b, `<div class="agrl-tokens" style="font-family:sans-serif;font-size:12px"><div>%d tokens: %d %s, %d %s, %d %s; %s</div>`,
		len(ep.Tokens), count[RolePrompt], RolePrompt, count[RolePolicy], RolePolicy, count[RoleObservation], RoleObservation, mismatch)
	b.WriteString(`<table style="border-collapse:collapse;font-family:monospace"><tr><th>pos</th><th>id</th><th>text</th><th>role</th><th>log-prob</th></tr>`)
	for i, id := range ep.Tokens {
		if i == maxRows {
			fmt.Fprintf(&b, `<tr><td colspan="5">… %d more tokens (nb.TokenAudit shows them all)</td></tr>`, len(ep.Tokens)-maxRows)
			break
		}
		style := ""
		lp := ""
		if roles[i] == RolePolicy {
			style = ` style="background:#e8f5e9"`
			if i < len(ep.LogProbs) {
				lp = fmt.Sprintf("%.3f", ep.LogProbs[i])
			}
		}
		text := ""
		if decode != nil {
			text = strings.NewReplacer("\n", `\n`, "\t", `\t`, " ", "␣").Replace(decode([]int32{id}))
		}
		fmt.Fprintf(&b, `<tr%s><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td></tr>`, style, i, id, html.EscapeString(text), roles[i], lp)
	}
	b.WriteString(`</table></div>`)
	return b.String()
}
