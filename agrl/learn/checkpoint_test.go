package learn

import (
	"agrl.dev/agrl"

	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// weightsOf copies every model weight of p.
func weightsOf(t testing.TB, p *Policy) map[string][]float32 {
	out := map[string][]float32{}
	for _, w := range p.arch.weightSpecs() {
		v := p.store.GetVariable(model.JoinPath(lmScope, w.name))
		val, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[w.name] = tensors.MustCopyFlatData[float32](val)
	}
	return out
}

func maxDiff(a, b map[string][]float32) float64 {
	worst := 0.0
	for k, av := range a {
		bv := b[k]
		if len(av) != len(bv) {
			return math.Inf(1)
		}
		for i := range av {
			worst = max(worst, math.Abs(float64(av[i]-bv[i])))
		}
	}
	return worst
}

// sftBatch is a fixed little behaviour-cloning batch on the toy env.
func sftBatch(t testing.TB, tok *agrl.Tokenizer, n int) TrainBatch {
	tasks, err := agrl.NewMix(9).Tasks(addEnv{}, agrl.Train, n)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := agrl.ExpertEpisodes(addEnv{}, addExpert, tasks, agrl.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b := TrainBatch{Values: map[string][][]float32{"mask": nil}}
	for _, ep := range eps {
		ids, mask := agrl.EncodeEpisode(tok, ep)
		m := make([]float32, len(mask))
		for i, v := range mask {
			m[i] = float32(v)
		}
		b.Tokens = append(b.Tokens, ids)
		b.Values["mask"] = append(b.Values["mask"], m)
	}
	return b
}

func TestCheckpointRoundTripAndResume(t *testing.T) {
	dir := t.TempDir()
	opt := agrl.NewAdamW().LR(3e-3)
	// Uninterrupted: 6 steps.
	ref := MustNewPolicy(testLM().Seed(4))
	batch := sftBatch(t, ref.Tokenizer(), 8)
	trRef, err := ref.NewTrainer("sft", SFTLoss, []string{"mask"}, opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if _, err := trRef.Step(batch); err != nil {
			t.Fatal(err)
		}
	}
	// Interrupted: 3 steps, save, load into a fresh process-like policy, 3 more steps.
	p := MustNewPolicy(testLM().Seed(4))
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := tr.Step(batch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Save(dir); err != nil {
		t.Fatal(err)
	}
	q, err := LoadPolicy(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(weightsOf(t, p), weightsOf(t, q)); d != 0 {
		t.Fatalf("round trip changed weights by %g", d)
	}
	if q.Config().Vocab() != p.Config().Vocab() || q.Config().Spec().Width != p.Config().Spec().Width {
		t.Fatalf("config not restored: %+v", q.Config())
	}
	tr2, err := q.NewTrainer("sft", SFTLoss, []string{"mask"}, opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tr2.Steps() != 3 {
		t.Fatalf("resumed trainer at step %d, want 3", tr2.Steps())
	}
	for range 3 {
		if _, err := tr2.Step(batch); err != nil {
			t.Fatal(err)
		}
	}
	// Same optimizer state: the resumed run ends where the uninterrupted one does.
	if d := maxDiff(weightsOf(t, ref), weightsOf(t, q)); d > 1e-6 {
		t.Errorf("resumed training differs from uninterrupted by %g", d)
	}
}

func TestCheckpointFailedSave(t *testing.T) {
	dir := t.TempDir()
	p := MustNewPolicy(testLM().Seed(2))
	first := weightsOf(t, p)
	if _, err := p.Save(dir); err != nil {
		t.Fatal(err)
	}
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-2), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(sftBatch(t, p.Tokenizer(), 4)); err != nil {
		t.Fatal(err)
	}
	defer func() { saveHook = nil }()
	for _, stage := range []string{"written", "renamed"} {
		saveHook = func(s string) error {
			if s == stage {
				return errors.New("simulated crash at " + s)
			}
			return nil
		}
		if _, err := p.Save(dir); err == nil {
			t.Fatalf("save crashing at %q succeeded", stage)
		}
		q, err := LoadPolicy(dir, "")
		if err != nil {
			t.Fatalf("after a crash at %q: %v", stage, err)
		}
		if d := maxDiff(first, weightsOf(t, q)); d != 0 {
			t.Errorf("after a crash at %q the loaded weights are not the first checkpoint's (diff %g)", stage, d)
		}
	}
	// A damaged newest checkpoint is skipped.
	saveHook = nil
	last, err := p.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(last, "checkpoint-*.bin"))
	if len(files) != 1 || os.Truncate(files[0], 10) != nil {
		t.Fatalf("cannot damage %v", files)
	}
	if _, err := LoadPolicy(dir, ""); err != nil {
		t.Errorf("damaged newest checkpoint not skipped: %v", err)
	}
	if _, err := LoadPolicy(t.TempDir(), ""); err == nil {
		t.Error("loading an empty directory succeeded")
	}
}

// TestCheckpointKilledChild kills a process that saves checkpoints in a loop at an arbitrary
// moment and checks that what it leaves is loadable.
func TestCheckpointKilledChild(t *testing.T) {
	if os.Getenv("AGRL_CKPT_CHILD") != "" {
		childSaveLoop(os.Getenv("AGRL_CKPT_CHILD"))
		return
	}
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointKilledChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "AGRL_CKPT_CHILD="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child has saved at least once more, then kill it mid-flight.
		deadline := time.Now().Add(60 * time.Second)
		before := len(listCheckpoints(dir)) + ckptNumberOr(readLatest(dir))
		for time.Now().Before(deadline) && len(listCheckpoints(dir))+ckptNumberOr(readLatest(dir)) <= before {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(7+round*13) * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		q, err := LoadPolicy(dir, "")
		if err != nil {
			t.Fatalf("round %d: after kill: %v", round, err)
		}
		// The child stores the save counter in every weight's first entry.
		w := weightsOf(t, q)
		if w["embed"][0] < 1 {
			t.Errorf("round %d: loaded weights were never saved by the child", round)
		}
	}
}

func ckptNumberOr(name string) int {
	if n := ckptNumber(name); n > 0 {
		return n
	}
	return 0
}

func childSaveLoop(dir string) {
	p := MustNewPolicy(testLM())
	v := p.store.GetVariable(model.JoinPath(lmScope, "embed"))
	for i := 1; ; i++ {
		val := tensors.MustCopyFlatData[float32](v.MustValue())
		val[0] = float32(i)
		v.MustSetValue(tensors.FromFlatDataAndDimensions(val, v.Shape().Dimensions...))
		if _, err := p.Save(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child save:", err)
			os.Exit(3)
		}
		if strings.HasSuffix(dir, "never") {
			return
		}
	}
}

func TestClone(t *testing.T) {
	p := MustNewPolicy(testLM().Seed(12))
	tr, err := p.NewTrainer("sft", SFTLoss, []string{"mask"}, agrl.NewAdamW().LR(1e-2), 1)
	if err != nil {
		t.Fatal(err)
	}
	batch := sftBatch(t, p.Tokenizer(), 4)
	if _, err := tr.Step(batch); err != nil {
		t.Fatal(err)
	}
	ref, err := p.Clone()
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(weightsOf(t, p), weightsOf(t, ref)); d != 0 {
		t.Fatalf("clone differs by %g", d)
	}
	if _, err := tr.Step(batch); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(weightsOf(t, p), weightsOf(t, ref)); d == 0 {
		t.Error("training the policy changed its clone")
	}
}
