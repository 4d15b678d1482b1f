package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"agrl.dev/agrl"
)

// Fault injection with real signals: the test binary re-runs itself as the agrl command
// (TestMain) and the tests stop, suspend or kill it mid-run.

const helperEnv = "AGRL_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func init() {
	// A model small enough that a warm start of a few hundred steps takes seconds.
	presets["micro"] = func() agrl.LM { return agrl.TinyLM().Width(32).Heads(4).Layers(2).MLP(64).Context(128) }
}

// microFlags train the micro preset briefly; sft sets the warm start's steps.
func microFlags(out string, sft int) []string {
	return []string{"train", "--env", "calc", "--out", out, "--preset", "micro", "--sft-steps", strconv.Itoa(sft),
		"--demos", "64", "--steps", "2", "--group", "2", "--tasks", "2", "--eval-tasks", "3", "--eval-every", "1",
		"--max-action-tokens", "24"}
}

// cli is the agrl command running in a subprocess.
type cli struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
	done   chan struct{}
}

func startCLI(t *testing.T, args ...string) *cli {
	t.Helper()
	c := &cli{cmd: exec.Command(os.Args[0], args...), lines: make(chan string, 1000), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), helperEnv+"=1")
	c.cmd.Stdout = io.Discard
	pipe, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			c.stderr.WriteString(line + "\n")
			select {
			case c.lines <- line:
			default:
			}
		}
	}()
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// waitFor reads stderr until a line contains s (or the process ends, or 60 s pass).
func (c *cli) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line := <-c.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-c.done:
			t.Fatalf("the command ended before printing %q:\n%s", s, c.stderr.String())
		case <-timeout:
			t.Fatalf("no %q within 60 s:\n%s", s, c.stderr.String())
		}
	}
}

// exit waits (at most limit) for the command to end and returns its exit code.
func (c *cli) exit(t *testing.T, limit time.Duration) int {
	t.Helper()
	ended := make(chan error, 1)
	go func() { <-c.done; ended <- c.cmd.Wait() }()
	select {
	case <-ended:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("still running after %v:\n%s", limit, c.stderr.String())
	}
	return -1
}

func (c *cli) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func readSummary(t *testing.T, dir string) agrl.Summary {
	t.Helper()
	var s agrl.Summary
	b, err := os.ReadFile(filepath.Join(dir, agrl.RunSummaryFile))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSIGINTDuringSFT: Ctrl-C during the warm start stops within seconds (not at the end of
// SFT), saves a checkpoint of the warm start and exits 130; while it runs, a second command on
// the same run is locked out at once; the same command then resumes the warm start.
func TestSIGINTDuringSFT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := microFlags(out, 3000)
	c := startCLI(t, args...)
	c.waitFor(t, "warm start 1/3000 [") // the first SFT step is done (progress: step 1, then every 5%)

	code, _, errOut := runCLI(args...)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("in use by process %d", c.cmd.Process.Pid)) {
		t.Errorf("a second command on the same run: exit %d: %s", code, errOut)
	}

	c.signal(t, syscall.SIGINT)
	sent := time.Now()
	if code := c.exit(t, 20*time.Second); code != 130 {
		t.Fatalf("exit %d after SIGINT:\n%s", code, c.stderr.String())
	}
	t.Logf("SIGINT to exit: %v", time.Since(sent).Round(time.Millisecond))
	if !strings.Contains(c.stderr.String(), "checkpoint at warm-start SFT step") {
		t.Errorf("no checkpoint of the warm start:\n%s", c.stderr.String())
	}
	s := readSummary(t, out)
	if s.Status != "cancelled" || !strings.Contains(s.Resume, "SFT step") {
		t.Errorf("summary: %+v", s)
	}

	// The same command resumes the warm start where it stopped.
	again := startCLI(t, args...)
	again.waitFor(t, "continuing at step")
	t.Logf("resumed: %s", strings.TrimSpace(again.stderr.String()))
	again.signal(t, syscall.SIGTERM) // SIGTERM is handled like SIGINT
	if code := again.exit(t, 20*time.Second); code != 143 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, again.stderr.String())
	}
	if s := readSummary(t, out); s.Status != "cancelled" {
		t.Errorf("summary after SIGTERM: %+v", s)
	}
}

// TestKilledBeforeFirstCheckpoint: a command killed (SIGKILL) during the warm start, before any
// checkpoint, leaves a directory the same command runs to completion.
func TestKilledBeforeFirstCheckpoint(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := microFlags(out, 10)
	c := startCLI(t, args...)
	c.waitFor(t, "warm start: SFT on")
	c.signal(t, syscall.SIGKILL)
	c.exit(t, 20*time.Second)
	if _, err := os.Stat(filepath.Join(out, agrl.RunConfigFile)); err != nil {
		t.Fatalf("the killed command left no config.json, so this tests nothing: %v", err)
	}
	code, _, errOut := runCLI(append(args, "--quiet")...)
	if code != 0 {
		t.Fatalf("the same command after SIGKILL: exit %d: %s", code, errOut)
	}
	if s := readSummary(t, out); s.Status != "completed" || s.Steps != 2 {
		t.Errorf("summary: %+v", s)
	}
}

// TestSIGSTOPIsAPause: a command stopped for longer than its watchdog and continued finishes
// normally: the watchdog counts running time, not wall time.
func TestSIGSTOPIsAPause(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := append(microFlags(out, 20), "--watchdog", "6s") // graph calls here take well under a second
	c := startCLI(t, args...)
	c.waitFor(t, "warm start: SFT on")
	time.Sleep(300 * time.Millisecond)
	for range 2 { // twice: the stop lands inside a graph call
		c.signal(t, syscall.SIGSTOP)
		time.Sleep(7 * time.Second) // longer than the watchdog
		c.signal(t, syscall.SIGCONT)
		time.Sleep(200 * time.Millisecond)
	}
	if code := c.exit(t, 120*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGSTOP/SIGCONT:\n%s", code, c.stderr.String())
	}
	if s := readSummary(t, out); s.Status != "completed" {
		t.Errorf("summary: %+v", s)
	}
}

// TestSecondSignalExitsAtOnce: while the first SIGTERM's graceful stop waits for an evaluation
// to finish, a second one ends the process at once.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	args := append(microFlags(out, 1), "--eval-tasks", "3000") // the start's evaluation takes many seconds
	c := startCLI(t, args...)
	c.waitFor(t, "warm start: 1 steps")
	c.signal(t, syscall.SIGTERM)
	c.waitFor(t, "stopping after the current step")
	c.signal(t, syscall.SIGTERM)
	if code := c.exit(t, 10*time.Second); code != 143 {
		t.Fatalf("exit %d:\n%s", code, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), "second SIGTERM: exiting at once") {
		t.Errorf("stderr:\n%s", c.stderr.String())
	}
}

// TestEveryProblemAtOnce: flag problems and configuration problems come together, with one exit
// code (2), and an unknown environment hides none of the others.
func TestEveryProblemAtOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, _, errOut := runCLI("train", "--env", "nope", "--clip-high", "-1", "--sft-steps", "-5", "--lr", "1e-300",
		"--group", "1", "--checkpoint-every", "-1", "--out", out)
	for _, want := range []string{`unknown environment "nope"`, "-clip-high -1", "-sft-steps -5", "learning rate 1e-300 is 0 in float32",
		"group size 1", "CheckpointEvery"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("train: stderr lacks %q", want)
		}
	}
	if code != 2 {
		t.Errorf("train: exit %d", code)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused command created the run directory")
	}
	code, _, errOut = runCLI("eval", "--run", out, "--n", "-3", "--temperature", "-5", "--split", "train")
	for _, want := range []string{"-n -3", "-temperature -5", "-split train"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("eval: stderr lacks %q: %s", want, errOut)
		}
	}
	if code != 2 {
		t.Errorf("eval: exit %d", code)
	}
	// A sweep checks every point before the shared warm start trains, and refuses duplicates.
	root := filepath.Join(t.TempDir(), "sweep")
	code, _, errOut = runCLI(append([]string{"sweep", "--grid", "kl=-1,0.01;clip-high=-1,0.3", "--out", root}, quick...)...)
	for _, want := range []string{"grid point kl=-1,clip-high=-1", "KL coefficient -1", "-clip-high -1", "grid point kl=0.01,clip-high=-1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("sweep: stderr lacks %q: %s", want, errOut)
		}
	}
	if code != 2 {
		t.Errorf("sweep: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(root, "warm-start")); err == nil {
		t.Error("the sweep trained its warm start before refusing a point")
	}
	code, _, errOut = runCLI(append([]string{"sweep", "--grid", "lr=1e-4,0.0001", "--out", root}, quick...)...)
	if code != 2 || !strings.Contains(errOut, `lists the same value twice ("1e-4" and "0.0001")`) {
		t.Errorf("duplicate points: exit %d: %s", code, errOut)
	}
}
