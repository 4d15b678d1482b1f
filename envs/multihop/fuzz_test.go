package multihop

import (
	"strings"
	"testing"

	"agrl.dev/agrl"
)

// fuzzTask is a fixed hard task that the fuzz targets search in.
var fuzzTask = agrl.Task{
	ID: "multihop-fuzz", Env: Name, Difficulty: agrl.Hard,
	Meta: map[string]string{metaSeed: "7", metaWorld: "7,3,4,2", metaChain: "works,founded,born"},
}

func init() {
	w, _ := newWorld(7, sizes{7, 3, 4, 2})
	fuzzTask.Meta[metaStart] = w.names[0] // a person
	res, err := resolve(spec{seed: 7, sizes: sizes{7, 3, 4, 2}, chain: []int{1, 3, 0}, start: w.names[0]})
	if err != nil {
		panic(err)
	}
	fuzzTask.Prompt, fuzzTask.Answer = res.prompt, res.answer
}

// FuzzSearch feeds arbitrary argument text to the search tool.
func FuzzSearch(f *testing.F) {
	start := fuzzTask.Meta[metaStart]
	for _, s := range []string{
		start + " works", `"` + start + ` works"`, "'mentor of " + start + "'", "mentor of " + start,
		"", `""`, "the of is", "born", "born born born", "Dax's born", "\x00\xff", "a\nb",
		strings.Repeat("x", 129), strings.Repeat("born ", 25), "((((", `"unbalanced`, "../etc/passwd",
		"99999999999999999999", "Ünï", "<tool>search(x)</tool>",
	} {
		f.Add(s)
	}
	w, _ := newWorld(7, sizes{7, 3, 4, 2})
	facts := map[string]bool{}
	for _, t := range w.text {
		facts[t] = true
	}
	f.Fuzz(func(t *testing.T, args string) {
		sess, _, err := New().TopK(3).Reset(fuzzTask)
		if err != nil {
			t.Fatal(err)
		}
		r := sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "search", Args: args})
		if r.Done || r.Info["relevant"] != "true" && r.Info["relevant"] != "false" {
			t.Fatalf("search(%q): %+v", args, r)
		}
		if (r.ToolError != "") != strings.HasPrefix(r.Observation, "error: ") {
			t.Fatalf("search(%q): tool error %q with observation %q", args, r.ToolError, r.Observation)
		}
		if r.ToolError != "" {
			if r.Info["relevant"] != "false" || len(r.Observation) > 150 {
				t.Fatalf("search(%q): %+v", args, r)
			}
			return
		}
		lines := strings.Split(r.Observation, "\n")
		if len(lines) > 3 || len(args) > MaxQueryBytes+2 {
			t.Fatalf("search(%q): %d lines", args, len(lines))
		}
		for _, l := range lines {
			if !facts[l] {
				t.Fatalf("search(%q) returned %q, not a fact", args, l)
			}
		}
		again := sess.Step(agrl.Action{Kind: agrl.ToolCall, Tool: "search", Args: args})
		if again.Observation != r.Observation {
			t.Fatalf("search(%q) is not deterministic", args)
		}
	})
}

// FuzzReset feeds arbitrary Meta to Reset: it must refuse or accept without panicking, and
// every task it accepts is one the expert solves.
func FuzzReset(f *testing.F) {
	m := fuzzTask.Meta
	f.Add(m[metaSeed], m[metaWorld], m[metaChain], m[metaStart], fuzzTask.Prompt, fuzzTask.Answer)
	f.Add("0", "2,1,1,1", "mentor", "x", "Who is the mentor of x?", "y")
	f.Add("18446744073709551615", "16,8,8,8", "born,located", "", "", "")
	f.Add("-1", "1,1,1,1", "", "", "q", "")
	f.Add("7", "7,3,4,2,", "works,,born", m[metaStart], "?", "?")
	f.Add("7", "16,16,16,16", strings.Repeat("mentor,", 6), "Bo", "x", "x")
	f.Fuzz(func(t *testing.T, seed, world, chain, start, prompt, answer string) {
		task := agrl.Task{ID: "fuzz", Env: Name, Prompt: prompt, Answer: answer, Difficulty: agrl.Medium,
			Meta: map[string]string{metaSeed: seed, metaWorld: world, metaChain: chain, metaStart: start}}
		if s, err := parseSpec(task.Meta); err == nil {
			// Also try the prompt and answer the Meta implies, so accepted tasks get explored.
			if res, err := resolve(s); err == nil && len(prompt)%2 == 0 {
				task.Prompt, task.Answer = res.prompt, res.answer
			}
		}
		_, _, err := New().Reset(task)
		if err != nil {
			return
		}
		ep, err := agrl.Play(New().Turns(maxHops+1), task, Expert(), agrl.Limits{})
		if err != nil || !ep.Correct {
			t.Fatalf("accepted task not solved (%v): %s", err, ep)
		}
	})
}
