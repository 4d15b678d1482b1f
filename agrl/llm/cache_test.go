package llm

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agrl.dev/agrl/hf"
)

func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

func maxDiff32(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		if d := math.Abs(float64(a[i] - b[i])); !(d <= worst) {
			worst = d
		}
	}
	return worst
}

// Greedy decoding through the cache writes the same tokens as argmax decoding by full
// recomputation, and every position's logits agree to 1e-5, for every family.
func TestCacheMatchesRecompute(t *testing.T) {
	const tol, steps = 1e-5, 12
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m, err := Load(filepath.Join("testdata", v.name))
			if err != nil {
				t.Fatal(err)
			}
			prompt := []int32{1, 17, 42, 5, int32(m.Config().VocabSize - 1)}

			// With the cache: the prompt in one Step, then one token per Next.
			c := m.NewCache()
			rows, err := m.Step(c, prompt)
			if err != nil {
				t.Fatal(err)
			}
			cached := append([][]float32(nil), rows...)
			tok := argmax(rows[len(rows)-1])
			cachedIDs := []int32{tok}
			for range steps - 1 {
				row, err := m.Next(c, []int32{tok})
				if err != nil {
					t.Fatal(err)
				}
				cached = append(cached, row)
				tok = argmax(row)
				cachedIDs = append(cachedIDs, tok)
			}
			if c.Len() != len(prompt)+steps-1 {
				t.Errorf("cache holds %d positions, want %d", c.Len(), len(prompt)+steps-1)
			}

			// Without: the whole sequence again for every new token.
			seq := append([]int32(nil), prompt...)
			var fullIDs []int32
			var full [][]float32
			for range steps {
				rows, err := m.Logits(seq)
				if err != nil {
					t.Fatal(err)
				}
				full = rows
				tok := argmax(rows[len(rows)-1])
				fullIDs = append(fullIDs, tok)
				seq = append(seq, tok)
			}
			if !equalIDs(cachedIDs, fullIDs) {
				t.Fatalf("greedy tokens with the cache %v, by recomputation %v", cachedIDs, fullIDs)
			}
			worst := 0.0
			for i := range cached {
				worst = max(worst, maxDiff32(cached[i], full[i]))
			}
			t.Logf("tokens %v; max |Δlogit| cache vs recompute %.2g", cachedIDs, worst)
			if !(worst <= tol) {
				t.Errorf("cached logits differ from recomputed ones by %g > %g", worst, tol)
			}
			if distinct(cachedIDs) < 2 {
				t.Logf("note: greedy decoding repeats one token")
			}
		})
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func distinct(ids []int32) int {
	seen := map[int32]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	return len(seen)
}

// A cloned cache continues independently of the original, each as if the prefix were rerun.
func TestCacheClone(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := []int32{3, 1, 4, 1, 5}
	c := m.NewCache()
	if _, err := m.Step(c, prefix); err != nil {
		t.Fatal(err)
	}
	d := c.Clone()
	a, err := m.Next(c, []int32{9, 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Next(d, []int32{6})
	if err != nil {
		t.Fatal(err)
	}
	wantA, _ := m.Logits(append(append([]int32(nil), prefix...), 9, 2))
	wantB, _ := m.Logits(append(append([]int32(nil), prefix...), 6))
	if da, db := maxDiff32(a, wantA[len(wantA)-1]), maxDiff32(b, wantB[len(wantB)-1]); da > 1e-5 || db > 1e-5 {
		t.Errorf("clone: |Δ| %g and %g from recomputation", da, db)
	}
	if c.Len() != 7 || d.Len() != 6 {
		t.Errorf("lengths %d and %d, want 7 and 6", c.Len(), d.Len())
	}
	// The clone shares the prefix's positions and holds only its own.
	if d.pre != len(prefix) || d.room >= len(prefix)+1+16 || &d.pk[0][0] != &c.k[0][0] {
		t.Errorf("the clone holds %d shared positions (want %d) and room for %d of its own", d.pre, len(prefix), d.room)
	}
	// A clone of the clone shares the same prefix and copies the one position after it.
	e := d.Clone()
	if e.pre != d.pre || &e.pk[0][0] != &d.pk[0][0] || e.Len() != 6 {
		t.Errorf("a clone of a clone holds %d shared positions of %d", e.pre, e.Len())
	}
	got, err := m.Next(e, []int32{8})
	if err != nil {
		t.Fatal(err)
	}
	wantE, _ := m.Logits(append(append([]int32(nil), prefix...), 6, 8))
	if de := maxDiff32(got, wantE[len(wantE)-1]); de > 1e-5 {
		t.Errorf("clone of a clone: |Δ| %g from recomputation", de)
	}
}

// A cache's buffers move as it grows (and a clone, which shares the positions it was cloned
// with, starts with no room of its own): the moves and the sharing change no bit. Sequences fed in the same pieces give the same logits whether their
// cache grew step by step, was cloned on the way, or had room for everything from the start;
// every family (one key-value head and several, head_dim 8 and 16), pieces of one token and of
// more than the room left, up to max_position_embeddings.
func TestCacheGrowth(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m, err := Load(filepath.Join("testdata", v.name))
			if err != nil {
				t.Fatal(err)
			}
			V, total := m.Config().VocabSize, min(m.Config().MaxPositionEmbeddings, 300)
			pieces := [][]int32{}
			for n, i := 0, 0; n < total; i++ {
				size := min(total-n, []int{1, 1, 7, 1, 40, 1, 1, 3}[i%8])
				piece := make([]int32, size)
				for j := range piece {
					piece[j] = int32((n+j)*37+11) % int32(V)
				}
				pieces, n = append(pieces, piece), n+size
			}
			roomy := m.NewCache()
			roomy.reserve(total)
			room := roomy.room
			growing := m.NewCache()
			var clones []*Cache
			for i, p := range pieces {
				want, err := m.Step(roomy, p)
				if err != nil {
					t.Fatal(err)
				}
				if i%5 == 2 { // a clone takes over from here on
					clones = append(clones, growing)
					growing = growing.Clone()
				}
				got, err := m.Step(growing, p)
				if err != nil {
					t.Fatal(err)
				}
				for r := range want {
					if !slices.Equal(got[r], want[r]) {
						t.Fatalf("piece %d (positions to %d, room %d), row %d: logits differ", i, growing.Len(), growing.room, r)
					}
				}
			}
			if roomy.room != room || room < total || growing.Len() != total {
				t.Errorf("room %d then %d for %d positions; the grown cache holds %d", room, roomy.room, total, growing.Len())
			}
			// The caches left behind still continue from where they were cloned.
			c := clones[len(clones)/2]
			n := c.Len()
			want, err := m.Logits(slices.Concat(slices.Concat(pieces...)[:n], []int32{5}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Next(c, []int32{5})
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff32(got, want[n]); d > 1e-5 {
				t.Errorf("an earlier cache continued: |Δ| %g from recomputation", d)
			}
		})
	}
}

// Bad input is an error that names the problem, and leaves the cache as it was.
func TestStepErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := Tiny(hf.Llama)
	cfg.MaxPositionEmbeddings = 8
	if err := WriteRandom(dir, cfg, 7, 1); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewCache()
	if _, err := m.Step(c, []int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *Cache
		ids  []int32
		want string
	}{
		{"empty", c, nil, "no tokens"},
		{"negative", c, []int32{4, -1}, "token -1 (position 4) is outside the vocabulary [0, 256)"},
		{"past vocab", c, []int32{256}, "token 256 (position 3)"},
		{"too long", c, []int32{1, 2, 3, 4, 5, 6}, "6 tokens after 3 exceed max_position_embeddings 8"},
		{"nil cache", nil, []int32{1}, "nil cache"},
		{"other model", other.NewCache(), []int32{1}, "another model"},
		{"zero cache", &Cache{}, []int32{1}, "not made by NewCache"},
	} {
		_, err := m.Step(tc.c, tc.ids)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if _, err2 := m.Next(tc.c, tc.ids); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("%s: Next's error %v differs from Step's", tc.name, err2)
		}
	}
	if c.Len() != 3 {
		t.Errorf("after the errors the cache holds %d positions, want 3", c.Len())
	}
	for _, ids := range [][]int32{nil, make([]int32, 9), {300}} {
		if _, err := m.Logits(ids); err == nil {
			t.Errorf("Logits(%v): no error", ids)
		}
	}
	// Exactly max_position_embeddings is fine.
	if _, err := m.Step(c, []int32{1, 2, 3, 4, 5}); err != nil {
		t.Errorf("filling the context: %v", err)
	}
}

// NextBatch gives each sequence, bit for bit, the logits Next gives it alone — sequences at
// different positions, some fed several ids (an observation) and some one (a decoding step),
// with and without adapters — and leaves each cache as Next leaves it; bad batches change no
// cache.
func TestNextBatch(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			base := loadVariant(t, v.name)
			for _, withLoRA := range []bool{false, true} {
				m := base
				if withLoRA {
					a, err := base.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: LoRAModules()}, 3)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range a.Params() {
						for i := range p.Data {
							p.Data[i] += 0.05 * float32(math.Sin(float64(i)))
						}
					}
					if m, err = base.WithAdapters(a); err != nil {
						t.Fatal(err)
					}
				}
				V := int32(m.Config().VocabSize)
				seq := func(n, salt int) []int32 {
					s := make([]int32, n)
					for i := range s {
						s[i] = int32((i*37+salt*11+5)%int(V-1)) + 1
					}
					return s
				}
				prefixes := [][]int32{seq(7, 1), seq(3, 2), seq(12, 3), seq(1, 4)}
				feeds := [][]int32{{5}, seq(4, 5), {9}, seq(2, 6)}
				batch, alone := make([]*Cache, len(prefixes)), make([]*Cache, len(prefixes))
				for i, p := range prefixes {
					batch[i], alone[i] = m.NewCache(), m.NewCache()
					if _, err := m.Step(batch[i], p); err != nil {
						t.Fatal(err)
					}
					if _, err := m.Step(alone[i], p); err != nil {
						t.Fatal(err)
					}
				}
				for round := range 3 {
					got, err := m.NextBatch(batch, feeds)
					if err != nil {
						t.Fatal(err)
					}
					for i := range feeds {
						want, err := m.Next(alone[i], feeds[i])
						if err != nil {
							t.Fatal(err)
						}
						if !sameBits([][]float32{got[i]}, [][]float32{want}) {
							t.Fatalf("lora %v round %d sequence %d: NextBatch differs from Next (max %g)", withLoRA, round, i, maxDiff32(got[i], want))
						}
						if batch[i].Len() != alone[i].Len() {
							t.Fatalf("sequence %d: cache length %d, Next's %d", i, batch[i].Len(), alone[i].Len())
						}
						feeds[i] = []int32{argmax(want)}
					}
				}
				lens := func() []int {
					var n []int
					for _, c := range batch {
						n = append(n, c.Len())
					}
					return n
				}
				before := lens()
				for _, bad := range []struct {
					caches []*Cache
					ids    [][]int32
					want   string
				}{
					{batch[:2], [][]int32{{1}}, "caches for"},
					{[]*Cache{batch[0], batch[1], batch[0]}, [][]int32{{1}, {1}, {1}}, "also sequence 0"},
					{batch[:2], [][]int32{{1}, {V}}, "sequence 1: llm: token"},
					{[]*Cache{batch[0], base.NewCache()}, [][]int32{{1}, {1}}, "another model"},
				} {
					if withLoRA && bad.want == "another model" {
						bad.caches[1] = base.NewCache()
					} else if bad.want == "another model" {
						continue
					}
					if _, err := m.NextBatch(bad.caches, bad.ids); err == nil || !strings.Contains(err.Error(), bad.want) {
						t.Errorf("bad batch: %v, want %q", err, bad.want)
					}
				}
				if !slices.Equal(lens(), before) {
					t.Errorf("a refused batch changed the caches: %v → %v", before, lens())
				}
			}
		})
	}
}

// StepBatch gives each sequence, bit for bit, the logits of every position that Step gives
// it alone (sequences at different positions, fed different numbers of ids), grows each
// cache as Step does, and refuses a batch with a shared cache or mismatched lists.
func TestStepBatch(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m := loadVariant(t, v.name)
			V := int32(m.Config().VocabSize)
			seq := func(n, salt int) []int32 {
				s := make([]int32, n)
				for i := range s {
					s[i] = int32((i*31+salt*7+3)%int(V-1)) + 1
				}
				return s
			}
			prefixes := [][]int32{seq(5, 1), nil, seq(9, 3)}
			feeds := [][]int32{seq(6, 4), seq(11, 5), {7}}
			batch, alone := make([]*Cache, len(prefixes)), make([]*Cache, len(prefixes))
			for i, p := range prefixes {
				batch[i], alone[i] = m.NewCache(), m.NewCache()
				if len(p) == 0 {
					continue
				}
				if _, err := m.Step(batch[i], p); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Step(alone[i], p); err != nil {
					t.Fatal(err)
				}
			}
			got, err := m.StepBatch(batch, feeds)
			if err != nil {
				t.Fatal(err)
			}
			for i := range feeds {
				want, err := m.Step(alone[i], feeds[i])
				if err != nil {
					t.Fatal(err)
				}
				if len(got[i]) != len(feeds[i]) || !sameBits(got[i], want) {
					t.Fatalf("sequence %d: StepBatch's %d rows differ from Step's %d", i, len(got[i]), len(want))
				}
				if batch[i].Len() != alone[i].Len() {
					t.Fatalf("sequence %d: cache length %d, Step's %d", i, batch[i].Len(), alone[i].Len())
				}
			}
			if _, err := m.StepBatch(batch[:2], feeds); err == nil || !strings.Contains(err.Error(), "caches for") {
				t.Errorf("mismatched lists: %v", err)
			}
			if _, err := m.StepBatch([]*Cache{batch[0], batch[0]}, [][]int32{{1}, {2}}); err == nil || !strings.Contains(err.Error(), "also sequence 0") {
				t.Errorf("a shared cache: %v", err)
			}
		})
	}
}

// StepBatchHead hands out, piece by piece of at most rows rows, in order, exactly StepBatch's
// logits for the same caches and ids (pieces that split a sequence, pieces of several, one
// piece of everything), grows the caches as StepBatch does, stops at f's error and returns
// it, and refuses a piece of no rows or mismatched lists.
func TestStepBatchHead(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			m := loadVariant(t, v.name)
			V := m.Config().VocabSize
			seq := func(n, salt int) []int32 {
				s := make([]int32, n)
				for i := range s {
					s[i] = int32((i*31+salt*7+3)%(V-1)) + 1
				}
				return s
			}
			prefixes := [][]int32{seq(5, 1), nil, seq(9, 3)}
			feeds := [][]int32{seq(6, 4), seq(11, 5), {7}}
			caches := func() []*Cache {
				cs := make([]*Cache, len(prefixes))
				for i, p := range prefixes {
					cs[i] = m.NewCache()
					if len(p) > 0 {
						if _, err := m.Step(cs[i], p); err != nil {
							t.Fatal(err)
						}
					}
				}
				return cs
			}
			ref := caches()
			want, err := m.StepBatch(ref, feeds)
			if err != nil {
				t.Fatal(err)
			}
			var wantRows [][]float32
			for _, rows := range want {
				wantRows = append(wantRows, rows...)
			}
			for _, rows := range []int{1, 4, 7, 18, 100} {
				cs := caches()
				next := 0
				err := m.StepBatchHead(cs, feeds, rows, func(lo int, z []float32) error {
					n := len(z) / V
					if lo != next || n < 1 || n > rows || len(z) != n*V {
						t.Fatalf("%d rows a piece: a piece of %d floats at row %d, expected row %d", rows, len(z), lo, next)
					}
					for r := range n {
						if !sameBits([][]float32{z[r*V : (r+1)*V]}, [][]float32{wantRows[lo+r]}) {
							t.Fatalf("%d rows a piece: row %d differs from StepBatch's", rows, lo+r)
						}
					}
					next += n
					return nil
				})
				if err != nil || next != len(wantRows) {
					t.Fatalf("%d rows a piece: %v after %d of %d rows", rows, err, next, len(wantRows))
				}
				for i := range cs {
					if cs[i].Len() != ref[i].Len() {
						t.Fatalf("sequence %d: cache length %d, StepBatch's %d", i, cs[i].Len(), ref[i].Len())
					}
				}
			}
			stop, calls := errors.New("enough"), 0
			err = m.StepBatchHead(caches(), feeds, 4, func(int, []float32) error { calls++; return stop })
			if err != stop || calls != 1 {
				t.Errorf("f's error: %v after %d calls", err, calls)
			}
			if err := m.StepBatchHead(caches(), feeds, 0, nil); err == nil || !strings.Contains(err.Error(), "0 rows") {
				t.Errorf("no rows a piece: %v", err)
			}
			if err := m.StepBatchHead(caches()[:2], feeds, 4, nil); err == nil || !strings.Contains(err.Error(), "caches for") {
				t.Errorf("mismatched lists: %v", err)
			}
		})
	}
}
