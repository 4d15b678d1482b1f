package agrl

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
)

// Split names a disjoint part of an environment's task space.
type Split int

const (
	// Train tasks feed SFT and GRPO.
	Train Split = iota + 1
	// Dev tasks are for choosing checkpoints and hyper-parameters.
	Dev
	// Test tasks are held out for the final numbers.
	Test
	// OOD tasks are of difficulty Extreme: harder than anything a Mix trains on.
	OOD
)

// Splits lists every split.
var Splits = []Split{Train, Dev, Test, OOD}

// String returns "train", "dev", "test" or "ood".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Dev:
		return "dev"
	case Test:
		return "test"
	case OOD:
		return "ood"
	}
	return fmt.Sprintf("split(%d)", int(s))
}

// ParseSplit reads a split name as written by String.
func ParseSplit(s string) (Split, error) {
	for _, sp := range Splits {
		if sp.String() == s {
			return sp, nil
		}
	}
	return 0, fmt.Errorf("agrl: unknown split %q (want train, dev, test or ood)", s)
}

// MarshalText writes the split's name ("" for the zero Split, no split).
func (s Split) MarshalText() ([]byte, error) {
	if s == 0 {
		return nil, nil
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a split's name ("" is the zero Split).
func (s *Split) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = 0
		return nil
	}
	v, err := ParseSplit(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// SplitOf assigns a prompt of an in-distribution difficulty to exactly one of Train (80%),
// Dev (10%) and Test (10%) by a hash of the prompt text. Because the split is a function of the
// prompt, no prompt can ever appear in two splits, whatever the seed or the number of tasks
// drawn. Extreme prompts belong to OOD, but only those that hash into the test bucket: a
// prompt text that an environment can pose at several difficulties (a file-search question
// over trees of different sizes, say) can then never be both an OOD and a train or dev prompt.
// Other Extreme prompts belong to no split (SplitOf returns 0) and are never drawn.
func SplitOf(prompt string, d Difficulty) Split {
	h := fnv.New64a()
	h.Write([]byte("agrl-split\x00"))
	h.Write([]byte(prompt))
	bucket := Train
	switch h.Sum64() % 10 {
	case 8:
		bucket = Dev
	case 9:
		bucket = Test
	}
	if d == Extreme {
		if bucket == Test {
			return OOD
		}
		return 0
	}
	return bucket
}

// Mix fixes the difficulty proportions of the tasks drawn from an environment and the seed
// they are drawn with. The default is 20% easy, 50% medium, 30% hard. Mix is a value: every
// setter returns a copy, so variants never alias.
//
//	mix := agrl.NewMix(42).Easy(0.2).Medium(0.5).Hard(0.3)
//	dev, err := mix.Tasks(env, agrl.Dev, 100)
type Mix struct {
	seed    uint64
	weights [3]float64 // easy, medium, hard
	bad     []Difficulty
}

// NewMix returns the default mix (20/50/30) with the given seed.
func NewMix(seed uint64) Mix { return Mix{seed: seed, weights: [3]float64{0.2, 0.5, 0.3}} }

// Easy sets the weight of easy tasks. Weights need not sum to 1; they are normalised.
func (m Mix) Easy(w float64) Mix { m.weights[0] = w; return m }

// Medium sets the weight of medium tasks.
func (m Mix) Medium(w float64) Mix { m.weights[1] = w; return m }

// Hard sets the weight of hard tasks.
func (m Mix) Hard(w float64) Mix { m.weights[2] = w; return m }

// Weight sets the weight of difficulty d (Easy, Medium or Hard; Extreme tasks are never
// trained on, and asking for them is reported by Validate).
func (m Mix) Weight(d Difficulty, w float64) Mix {
	if d < Easy || d > Hard {
		m.bad = append(append([]Difficulty(nil), m.bad...), d)
		return m
	}
	m.weights[d-1] = w
	return m
}

// Only returns the mix with all weight on difficulty d.
func (m Mix) Only(d Difficulty) Mix {
	return m.Easy(0).Medium(0).Hard(0).Weight(d, 1)
}

// Seed sets the seed.
func (m Mix) Seed(seed uint64) Mix { m.seed = seed; return m }

// Fractions returns the normalised weights of easy, medium and hard tasks.
func (m Mix) Fractions() map[Difficulty]float64 {
	sum := m.weights[0] + m.weights[1] + m.weights[2]
	out := map[Difficulty]float64{}
	for i, d := range []Difficulty{Easy, Medium, Hard} {
		out[d] = m.weights[i] / sum
	}
	return out
}

// Validate reports every problem of the mix at once, or nil.
func (m Mix) Validate() error {
	var errs []error
	for _, d := range m.bad {
		errs = append(errs, fmt.Errorf("cannot weight %s tasks: a mix holds easy, medium and hard (extreme tasks form the OOD split)", d))
	}
	sum := 0.0
	for i, w := range m.weights {
		name := Difficulty(i + 1).String()
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			errs = append(errs, fmt.Errorf("%s weight is %v; want a finite number >= 0", name, w))
			continue
		}
		sum += w
	}
	if len(errs) == 0 && sum <= 0 {
		errs = append(errs, errors.New("all difficulty weights are zero"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("agrl: invalid mix: %w", errors.Join(errs...))
	}
	return nil
}

// maxDraws bounds how many candidates are drawn for one task before giving up: an environment
// whose task space is too small for the request must fail with an error, not loop.
const maxDraws = 2000

// Tasks draws n distinct tasks of split from env, deterministically for the mix's seed. Each
// difficulty gets its share of n exactly (largest remainder), in a seeded shuffled order; the
// OOD split holds only Extreme tasks. Tasks are distinct by prompt within the result, and no
// prompt of one split can appear in another (see SplitOf).
func (m Mix) Tasks(env Env, split Split, n int) ([]Task, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if env == nil {
		return nil, errors.New("agrl: Tasks needs an env")
	}
	if n < 0 {
		return nil, fmt.Errorf("agrl: Tasks: negative count %d", n)
	}
	var plan []Difficulty
	if split == OOD {
		for range n {
			plan = append(plan, Extreme)
		}
	} else {
		plan = m.quota(n)
	}
	rng := m.rng(env.Name(), split, 0)
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	seen := make(map[string]bool, n)
	out := make([]Task, 0, n)
	for i, d := range plan {
		t, err := draw(env, rng, split, d, seen)
		if err != nil {
			return nil, fmt.Errorf("agrl: %s %s task %d of %d: %w", env.Name(), split, i+1, n, err)
		}
		seen[t.Prompt] = true
		out = append(out, t)
	}
	return out, nil
}

// quota splits n among easy/medium/hard by the largest-remainder method.
func (m Mix) quota(n int) []Difficulty {
	frac := m.Fractions()
	diffs := []Difficulty{Easy, Medium, Hard}
	counts := make([]int, 3)
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	left := n
	for i, d := range diffs {
		exact := frac[d] * float64(n)
		counts[i] = int(math.Floor(exact))
		left -= counts[i]
		rems = append(rems, rem{i, exact - float64(counts[i])})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; k < left; k++ {
		counts[rems[k%3].i]++
	}
	var plan []Difficulty
	for i, d := range diffs {
		for range counts[i] {
			plan = append(plan, d)
		}
	}
	return plan
}

func (m Mix) rng(env string, split Split, stream uint64) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d", env, split, stream)
	return rand.New(rand.NewPCG(m.seed, h.Sum64()))
}

// draw generates candidates until one belongs to split and is not in seen.
func draw(env Env, rng *rand.Rand, split Split, d Difficulty, seen map[string]bool) (Task, error) {
	for range maxDraws {
		t, err := env.Generate(rng, d)
		if err != nil {
			return Task{}, err
		}
		if t.Env == "" {
			t.Env = env.Name()
		}
		if t.ID == "" {
			t.ID = TaskID(t.Env, t.Prompt)
		}
		if t.Difficulty == 0 {
			t.Difficulty = d
		}
		if err := t.Validate(); err != nil {
			return Task{}, err
		}
		if SplitOf(t.Prompt, d) == split && !seen[t.Prompt] {
			return t, nil
		}
	}
	return Task{}, fmt.Errorf("no new %s task for this split after %d draws: the task space is too small", d, maxDraws)
}

// Stream returns an endless, seeded source of training tasks: each task's difficulty is drawn
// at random with the mix's weights. Tasks may repeat (a training stream samples with
// replacement) but always belong to split.
func (m Mix) Stream(env Env, split Split) (*TaskStream, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if env == nil {
		return nil, errors.New("agrl: Stream needs an env")
	}
	return &TaskStream{env: env, split: split, mix: m, rng: m.rng(env.Name(), split, 1)}, nil
}

// TaskStream draws training tasks one at a time. It is not safe for concurrent use.
type TaskStream struct {
	env   Env
	split Split
	mix   Mix
	rng   *rand.Rand
	drawn int
}

// Next returns the next task.
func (s *TaskStream) Next() (Task, error) {
	d := Extreme
	if s.split != OOD {
		frac := s.mix.Fractions()
		u := s.rng.Float64()
		d = Hard
		if u < frac[Easy] {
			d = Easy
		} else if u < frac[Easy]+frac[Medium] {
			d = Medium
		}
	}
	t, err := draw(s.env, s.rng, s.split, d, nil)
	if err != nil {
		return Task{}, fmt.Errorf("agrl: %s %s stream task %d: %w", s.env.Name(), s.split, s.drawn+1, err)
	}
	s.drawn++
	return t, nil
}
