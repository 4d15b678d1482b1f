package learn

import (
	"agrl.dev/agrl"

	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestLongStepMemory measures one LoRA training step (rank 16, every projection, the GRPO
// loss) on one sequence of random tokens per width, when AGRL_BENCH_LONG names a shape
// (llm.ShapeNames); it is skipped otherwise. AGRL_BENCH_WIDTHS lists the widths
// (default 512,1024,2048), or AGRL_BENCH_BATCH the lengths of one batch's sequences
// (mixed lengths, trained as one step: its micro-batches as the policy cuts them);
// AGRL_BENCH_SEGMENTED=1 takes every step segment by segment, =0
// every step through the whole graph, =auto through the graphs as the policy decides (by
// default a step takes the host path where the learner trains there, pretrained_host.go,
// else the graphs as the policy decides; AGRL_BENCH_CHECKPOINT=1 checkpoints every trace of
// the host's steps; AGRL_BENCH_DROPOUT sets LoRA dropout). For each
// width it prints one JSON line: tokens/s (the faster of two steps after a warm-up step that
// compiles the graphs) and the peak resident memory above the loaded model (VmHWM after the
// loading's garbage was returned to the OS and the peak reset through /proc/self/clear_refs;
// run it with GOGC=25 so the peak follows the live data). Linux only.
func TestLongStepMemory(t *testing.T) {
	shape, cfg, dir := benchShape(t, "AGRL_BENCH_LONG")
	ints := func(name string) []int {
		var out []int
		if s := os.Getenv(name); s != "" {
			for _, f := range strings.Split(s, ",") {
				w, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || w < 2 {
					t.Fatalf("%s: %q", name, s)
				}
				out = append(out, w)
			}
		}
		return out
	}
	// batches are the lengths of each measured batch's sequences: one sequence a width, or
	// AGRL_BENCH_BATCH's one batch.
	var batches [][]int
	for _, w := range ints("AGRL_BENCH_WIDTHS") {
		batches = append(batches, []int{w})
	}
	if batches == nil {
		batches = [][]int{{512}, {1024}, {2048}}
	}
	lengths := ints("AGRL_BENCH_BATCH")
	if lengths != nil {
		batches = [][]int{lengths}
	}
	dropout := 0.0
	if s := os.Getenv("AGRL_BENCH_DROPOUT"); s != "" {
		var err error
		if dropout, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatalf("AGRL_BENCH_DROPOUT: %v", err)
		}
	}
	p, err := LoadPretrained(agrl.Pretrained(dir).LoRA(16, 32).Dropout(dropout), 1)
	if err != nil {
		t.Fatal(err)
	}
	mode := os.Getenv("AGRL_BENCH_SEGMENTED")
	p.graphTraining = mode != ""
	p.checkpointTraces = os.Getenv("AGRL_BENCH_CHECKPOINT") == "1"
	switch mode {
	case "1":
		p.segmentFrom = 2
	case "0":
		p.segmentFrom = 1 << 30
	}
	l, err := p.newLearner("bench", grpoLoss(0.2, 0.2, 0, agrl.K3), grpoValues, agrl.NewAdamW().LR(1e-5), 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, seqs := range batches {
		b := benchGRPOBatch(rng, cfg.VocabSize, seqs)
		tokens := 0
		for _, n := range seqs {
			tokens += n - 1
		}
		runtime.GC()
		debug.FreeOSMemory()
		base := procStatus(t, "VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Skipf("cannot reset the peak: %v", err)
		}
		best := 0.0
		for i := range 3 {
			st, err := l.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				best = max(best, float64(tokens)/st.Seconds)
			}
		}
		peak := procStatus(t, "VmHWM")
		rec := map[string]any{"shape": shape, "train_tokens_per_s": round1(best),
			"peak_above_model_gb": float64(int((peak-base)/1e7+0.5)) / 100}
		host := l.(*pretrainedTrainer).hostTraining()
		rec["on_host"] = host
		if dropout > 0 {
			rec["dropout"] = dropout
		}
		if host && len(seqs) == 1 {
			m, err := p.hostModel()
			if err != nil {
				t.Fatal(err)
			}
			plan, ok := p.hostPlan(m, b.Tokens, 0, 0)
			host = ok
			rec["on_host"], rec["checkpointed"] = ok, ok && plan[0].opts.Checkpointed
		}
		if lengths != nil {
			rec["lengths"] = lengths
		} else {
			rec["width"] = seqs[0]
			if !host {
				rec["segmented"] = p.segmented(seqs[0])
			}
		}
		line, _ := json.Marshal(rec)
		fmt.Println(string(line))
	}
}

// procStatus reads a memory figure of /proc/self/status in bytes.
func procStatus(t *testing.T, key string) float64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}
