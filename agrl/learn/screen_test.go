package learn

import (
	"cmp"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func TestGroupSignal(t *testing.T) {
	for _, c := range []struct {
		q    float64
		g    int
		want float64
	}{
		{0.5, 2, 0.5},                        // 1 − 1/4 − 1/4
		{0.5, 8, 1 - 2.0/256},                // 1 − 2·2⁻⁸
		{0.9, 8, 1 - 0.43046721 - 1e-8},      // 0.9⁸ = 0.43046721
		{0.25, 3, 1 - 1.0/64 - 27.0/64},      // 36/64
		{1, 8, 0}, {0, 8, 0}, {1e-300, 8, 0}, // solved and hopeless tasks carry no signal
	} {
		if got := GroupSignal(c.q, c.g); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("GroupSignal(%v, %d) = %v, want %v", c.q, c.g, got, c.want)
		}
	}
}

// TestGRPOScreen: a screened step rolls out the candidates whose groups are most likely to
// disagree (by the policy's likelihood of the expert's episode), in stream order; the
// estimate is the product of the expert's action-token probabilities; the prediction is
// logged; a resumed run screens exactly as an uninterrupted one.
func TestGRPOScreen(t *testing.T) {
	cfg := func(dir string) agrl.GRPO {
		return warm(tinyGRPO(t)).Screen(4, addExpert, addGuesser, addExpert).Steps(4).Out(dir)
	}
	tr, err := Build(cfg(filepath.Join(t.TempDir(), "draw")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WarmStart(); err != nil {
		t.Fatal(err)
	}
	stream := func() *agrl.TaskStream {
		s, err := agrl.NewMix(5).Only(agrl.Medium).Stream(addEnv{}, agrl.Train)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var sst screenStats
	got, err := tr.drawTasks(stream(), 3, &sst)
	if err != nil {
		t.Fatal(err)
	}
	// The 12 candidates, their estimates computed here from Score, and the 3 best.
	s := stream()
	cands := make([]agrl.Task, 12)
	for i := range cands {
		if cands[i], err = s.Next(); err != nil {
			t.Fatal(err)
		}
	}
	// q: the sum over the distinct successful episodes of the agents (the expert listed twice
	// counts once; the guesser's episode counts only where its guess is right).
	q := make([]float64, len(cands))
	guessed := 0
	for i, task := range cands {
		var seen [][]int32
		for _, agent := range []agrl.Agent{addExpert, addGuesser, addExpert} {
			ep, err := agrl.Play(addEnv{}, task, agent, agrl.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			toks, mask := agrl.EncodeEpisode(tr.policy.Tokenizer(), ep)
			if !ep.Correct || slices.ContainsFunc(seen, func(o []int32) bool { return slices.Equal(o, toks) }) {
				continue
			}
			seen = append(seen, toks)
			sc, err := tr.policy.Score([][]int32{toks}, tr.cfg.Temperature)
			if err != nil {
				t.Fatal(err)
			}
			p := 1.0
			for j := 1; j < len(toks); j++ {
				if mask[j] == 1 {
					p *= math.Exp(float64(sc[0].LogProbs[j-1]))
				}
			}
			q[i] += p
		}
		if len(seen) == 2 {
			guessed++
		}
	}
	if guessed == 0 {
		t.Fatal("no candidate where the guesser is right: the sum over agents is not exercised")
	}
	order := []int{}
	for i := range cands {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(GroupSignal(q[b], 8), GroupSignal(q[a], 8)) })
	best := order[:3]
	slices.Sort(best)
	var pred, pool float64
	for k, i := range best {
		if got[k].ID != cands[i].ID {
			t.Errorf("task %d: screened %s, want candidate %d %s (q %v)", k, got[k].ID, i, cands[i].ID, q)
		}
		pred += GroupSignal(q[i], 8) / 3
	}
	for i := range cands {
		pool += GroupSignal(q[i], 8) / 12
	}
	if !sst.on || math.Abs(sst.signal-pred) > 1e-5 || math.Abs(sst.pool-pool) > 1e-5 || sst.signal < sst.pool {
		t.Errorf("screen stats %+v, want predicted signal %v, pool %v", sst, pred, pool)
	}
	if slices.Min(q) == slices.Max(q) {
		t.Fatalf("every candidate's estimate is %v: the choice is not tested", q[0])
	}

	if sst.candidates != 4 {
		t.Errorf("pool 4 drew %v candidates per task", sst.candidates)
	}

	// A pool larger than ScreenChunk draws a chunk at a time while the best predict less than
	// ScreenEnough; the choice is over everything drawn.
	wide, err := Build(warm(tinyGRPO(t)).Screen(2*ScreenChunk, addExpert, addGuesser).Out(filepath.Join(t.TempDir(), "wide")))
	if err != nil {
		t.Fatal(err)
	}
	wide.policy = tr.policy
	var wst screenStats
	if _, err := wide.drawTasks(stream(), 3, &wst); err != nil {
		t.Fatal(err)
	}
	all := make([]agrl.Task, 3*2*ScreenChunk)
	s = stream()
	for i := range all {
		if all[i], err = s.Next(); err != nil {
			t.Fatal(err)
		}
	}
	qa, err := wide.expertSuccess(all)
	if err != nil {
		t.Fatal(err)
	}
	top3 := func(q []float64) float64 {
		sig := []float64{}
		for _, v := range q {
			sig = append(sig, GroupSignal(v, 8))
		}
		slices.Sort(sig)
		return (sig[len(sig)-1] + sig[len(sig)-2] + sig[len(sig)-3]) / 3
	}
	wantN, wantSig := float64(2*ScreenChunk), top3(qa)
	if first := top3(qa[:3*ScreenChunk]); first >= ScreenEnough {
		wantN, wantSig = ScreenChunk, first
	}
	if wst.candidates != wantN || math.Abs(wst.signal-wantSig) > 1e-12 {
		t.Errorf("pool %d: drew %v per task (want %v), predicted signal %v (want %v)", 2*ScreenChunk, wst.candidates, wantN, wst.signal, wantSig)
	}

	want := train(t, cfg(filepath.Join(t.TempDir(), "full")))
	for _, m := range want.History {
		if m[agrl.MetricScreenSignal] < m[agrl.MetricScreenPoolSignal] || m[agrl.MetricScreenQ] < 0 || m[agrl.MetricScreenQ] > 1 {
			t.Errorf("step %v: screen metrics %v %v %v", m.Step(), m[agrl.MetricScreenSignal], m[agrl.MetricScreenPoolSignal], m[agrl.MetricScreenQ])
		}
	}
	dir := filepath.Join(t.TempDir(), "resumed")
	trainUntil(t, cfg(dir), 2)
	res := train(t, cfg(dir))
	for i := 2; i < 4; i++ {
		for _, k := range []string{agrl.MetricScreenSignal, agrl.MetricScreenQ, agrl.MetricLoss, agrl.MetricFracRewardZeroStd} {
			if res.History[i][k] != want.History[i][k] {
				t.Errorf("step %d %s: resumed %v, uninterrupted %v", i+1, k, res.History[i][k], want.History[i][k])
			}
		}
	}
}

func TestGRPOScreenValidate(t *testing.T) {
	for _, g := range []agrl.GRPO{tinyGRPO(t).Screen(1, addExpert), tinyGRPO(t).Screen(-2, addExpert), tinyGRPO(t).Screen(4), tinyGRPO(t).Screen(4, addExpert, nil)} {
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), "screening") {
			t.Errorf("%d candidates: %v", g.Spec().Screen, err)
		}
	}
	if err := tinyGRPO(t).Screen(0).Validate(); err != nil {
		t.Errorf("screening off: %v", err)
	}
}
