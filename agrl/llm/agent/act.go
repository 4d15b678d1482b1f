package agent

import (
	"errors"
	"fmt"
	"slices"

	"agrl.dev/agrl"
	"agrl.dev/agrl/chat"
)

// Act samples the model's next action for an episode in progress played at the text level (an
// agrl.Agent's contract, as in agrl play), one action per call: it renders the conversation so
// far in the model's chat format and encodes it (ConversationIDs), and samples one assistant
// turn with s (at most maxTokens tokens; 0: the context's room). A turn
// that parses (chat.Format.ParseTurn) is returned as agrl's protocol text, so that a turn loop
// reads the same action; one that does not is returned as written, which the loop rejects as
// an invalid action. It also returns the sampled ids and their log-probs.
//
// The context is re-encoded from text at every call: Act is for playing and inspecting, not
// for training, whose rollouts (Rollout) keep the sampled ids token-in, token-out.
func (p *Policy) Act(tools []agrl.Tool, ep *agrl.Episode, s agrl.Sampling, maxTokens int) (string, []int32, []float32, error) {
	if err := s.Validate(); err != nil {
		return "", nil, nil, err
	}
	ids, err := p.ConversationIDs(tools, ep)
	if err != nil {
		return "", nil, nil, err
	}
	room := p.Context() - len(ids)
	if room < 1 {
		return "", nil, nil, fmt.Errorf("agent: the conversation takes %d tokens; the context is %d", len(ids), p.Context())
	}
	if maxTokens > 0 {
		room = min(room, maxTokens)
	}
	st := p.newStream()
	defer st.Release()
	logits, err := st.Next(ids)
	if err != nil {
		return "", nil, nil, fmt.Errorf("agent: %w", err)
	}
	sm := newSampler(s, p.model.Config().VocabSize, 0)
	var out []int32
	var lps []float32
	for len(out) < room {
		id, lp, err := sm.draw(logits)
		if err != nil {
			return "", nil, nil, fmt.Errorf("agent: %w", err)
		}
		if slices.Contains(p.stops, id) {
			break
		}
		out, lps = append(out, id), append(lps, lp)
		if logits, err = st.Next([]int32{id}); err != nil {
			return "", nil, nil, fmt.Errorf("agent: %w", err)
		}
	}
	native := p.tok.Decode(out)
	a := p.format.ParseTurn(native, tools)
	if a.Kind == agrl.Invalid {
		return native, out, lps, nil
	}
	a.Think = ""
	proto := a.String()
	if agrl.ParseAction(proto) != a {
		return native, out, lps, nil
	}
	return proto, out, lps, nil
}

// ConversationIDs renders episode ep so far in the model's chat format — the system prompt, the
// task prompt, each turn as an assistant message (a valid action in its native form, an invalid
// one as the text written) and its observation as a tool message — with the generation prompt,
// and encodes it: the context Act samples the next turn from.
func (p *Policy) ConversationIDs(tools []agrl.Tool, ep *agrl.Episode) ([]int32, error) {
	var msgs []chat.Message
	if p.system != "" {
		msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: p.system})
	}
	msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: ep.Prompt})
	for _, t := range ep.Turns {
		m, err := chat.AssistantMessage(t.Action, tools)
		if err != nil { // an invalid action (or one with no native form): the text as written
			m = chat.Message{Role: chat.RoleAssistant, Content: t.Text}
		}
		msgs = append(msgs, m, chat.Message{Role: chat.RoleTool, Content: t.Observation})
	}
	text, err := p.format.Render(msgs, tools, true)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return p.tok.Encode(text), nil
}

// TopToken is one token of an action as the model scored it: its log-probability at the
// scoring temperature and the k likeliest tokens at its position (likeliest first).
type TopToken struct {
	ID      int32
	LogProb float64
	Top     []Alternative
}

// Alternative is a token the model could have written there, with its log-probability.
type Alternative struct {
	ID      int32
	LogProb float64
}

// TopTokens scores ids as written after context (both token ids) at temperature t (0 means 1,
// as greedy sampling records), with the k likeliest alternatives at each position: what an
// action's log-probs were when it was sampled from that context (Act returns both).
func (p *Policy) TopTokens(context, ids []int32, t float64, k int) ([]TopToken, error) {
	if len(context) == 0 || len(ids) == 0 {
		return nil, fmt.Errorf("agent: TopTokens needs a context and ids (%d and %d)", len(context), len(ids))
	}
	// One position at a time through the KV cache: only the logits of the action's positions
	// are computed and held (a vocabulary row each), never the whole context's.
	c := p.model.NewCache()
	logits, err := p.model.Next(c, context)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	invT := invTemperature(t)
	out := make([]TopToken, len(ids))
	lp := make([]float64, p.model.Config().VocabSize)
	for i, id := range ids {
		if i > 0 {
			if logits, err = p.model.Next(c, ids[i-1:i]); err != nil {
				return nil, fmt.Errorf("agent: %w", err)
			}
		}
		if err := logSoftmax(lp, logits, invT); err != nil {
			return nil, fmt.Errorf("agent: position %d: %w", len(context)+i, err)
		}
		out[i] = TopToken{ID: id, LogProb: lp[id]}
		for _, j := range topK(lp, k) {
			out[i].Top = append(out[i].Top, Alternative{ID: int32(j), LogProb: lp[j]})
		}
	}
	return out, nil
}

// topK returns the indexes of the k largest values of v, largest first (the first index among
// equals), in one pass.
func topK(v []float64, k int) []int {
	k = min(k, len(v))
	if k <= 0 {
		return nil
	}
	best := make([]int, 0, k)
	for j, x := range v {
		if len(best) == k && x <= v[best[k-1]] {
			continue
		}
		pos := len(best)
		for pos > 0 && x > v[best[pos-1]] {
			pos--
		}
		if len(best) < k {
			best = append(best, 0)
		}
		copy(best[pos+1:], best[pos:len(best)-1])
		best[pos] = j
	}
	return best
}

// Demonstration encodes a played episode (an expert's, say) as the token ids a rollout of this
// policy would hold had it sampled the episode's actions: the prompt's ids (Prompt), then for
// each turn the action as the model writes it natively (the format's FormatAction, ending
// with its end-of-turn token), mask 1, and for each turn but the last the observation appended
// as the sampler appends it (AppendObservation), mask 0. Only action tokens are trained on in
// SFT. An invalid action, or one with no native form, is an error naming the turn.
func (p *Policy) Demonstration(tools []agrl.Tool, ep *agrl.Episode) (ids []int32, mask []uint8, err error) {
	if ep == nil {
		return nil, nil, errors.New("agent: Demonstration: nil episode")
	}
	if ids, err = p.Prompt(tools, ep.Prompt); err != nil {
		return nil, nil, err
	}
	mask = make([]uint8, len(ids))
	for i, t := range ep.Turns {
		if t.Action.Kind == agrl.Invalid {
			return nil, nil, fmt.Errorf("agent: Demonstration: turn %d is an invalid action (%s)", i+1, t.Action.Invalid)
		}
		text, err := p.format.FormatAction(t.Action, tools)
		if err != nil {
			return nil, nil, fmt.Errorf("agent: Demonstration: turn %d: %w", i+1, err)
		}
		n := len(ids)
		ids = p.tok.AppendEncode(ids, text)
		for range len(ids) - n {
			mask = append(mask, 1)
		}
		if i == len(ep.Turns)-1 {
			break
		}
		n = len(ids)
		ids = p.tok.AppendEncode(ids, p.format.AppendObservation(t.Observation))
		mask = append(mask, make([]uint8, len(ids)-n)...)
	}
	return ids, mask, nil
}
