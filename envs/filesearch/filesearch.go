// Package filesearch is an agrl environment in which the policy searches a virtual file tree
// for the file that holds a fact, then answers a question about it:
//
//	What port does service kemo use?
//	<tool>find(kemo)</tool>        <obs>/srv/kemo/ /srv/kemo-old/</obs>
//	<tool>ls(/srv/kemo)</tool>     <obs>app.conf env.ini</obs>
//	<tool>cat(/srv/kemo/app.conf)</tool> <obs>user=ana3
//	port=8443</obs>
//	<answer>8443</answer>
//
// The tree lives in memory and is rebuilt from the knobs and the seed stored in Task.Meta; the
// package never touches the real file system (a test checks that it imports neither os,
// io/fs, path/filepath nor syscall).
//
// # Tools
//
//   - ls(path): the entries of a directory, sorted, directories marked with a trailing "/"
//     ("app.conf logs/"); ls() lists the root.
//   - cat(path): the contents of a file (a few "key=value" lines).
//   - find(name): every path whose base name contains name (a case-sensitive substring match;
//     an exact name is a special case), sorted, directories marked with "/", at most 8 listed.
//
// Paths are absolute ("/srv/kemo") or relative to the root ("srv/kemo"); "." and ".." work
// inside the tree. A ".." that would leave the root, a path longer than 128 bytes, and any
// byte outside [A-Za-z0-9._/-] (NUL, space, quotes, non-ASCII…) are tool errors, so
// cat(../../etc/passwd) answers "error: no such file" and never reads a real file.
//
// # Tasks and difficulty
//
// Each service directory (/srv/kemo) holds the service's facts as "key=value" lines spread over
// a few files; exactly one directory is named after the asked service, and exactly one of its
// files holds the asked key. The knobs, by difficulty (see Knobs):
//
//	            depth  width  services  near misses  files  loose files  file names
//	easy         1-2     2       2          0          2        0        hint (port.txt)
//	medium       2-3     3       4          1          3        1        hint half the time
//	hard         3-4     4       6         2-3         4        2        generic (app.conf)
//	extreme      5-6     5      10          4          5        3        generic
//
// depth is the number of path components of the service directories, width the number of
// directory names per level above them, near misses are services whose names contain the asked
// one ("kemo-old", "kemo2") and hold a different value for the same key. Answers are checked
// exactly after agrl.NormalizeAnswer; an empty answer gives up.
//
// # Reward hacking
//
// NaiveRubric scores "give up" like a wrong answer and a cut-off worse than both, so an agent
// that provokes a tool error and quits at once (Hacker) out-earns an honest explorer that
// sometimes runs out of turns (Explorer), and GRPO learns that hack in a real run. Rubric, the
// preset, charges every failure the same, adds an agrl.ErrorThenQuit penalty and pays for
// reading the file that holds the fact (ReadFact), which turns the order around; the Expert
// beats both under both rubrics.
package filesearch

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"agrl.dev/agrl"
)

// Name is the environment's name, the Env field of its tasks.
const Name = "filesearch"

// DefaultMaxTurns is the turn limit of New: enough for the expert on every difficulty
// (find, ls, one cat per file, answer) with nothing to spare on extreme tasks.
const DefaultMaxTurns = 8

// Env is the file-search environment builder. Its zero value is usable and equals New().
type Env struct {
	maxTurns int
}

// New returns the environment with DefaultMaxTurns.
func New() Env { return Env{maxTurns: DefaultMaxTurns} }

// Turns returns a copy of the environment whose episodes are cut off after n actions
// (n <= 0 restores DefaultMaxTurns). It is the MaxTurns setter: the agrl.Env interface already
// takes the name MaxTurns for the getter.
func (e Env) Turns(n int) Env {
	e.maxTurns = n
	return e
}

// Name returns "filesearch".
func (Env) Name() string { return Name }

// Tools documents ls, cat and find.
func (Env) Tools() []agrl.Tool {
	return []agrl.Tool{
		{Name: "ls", Args: "path: a directory, absolute or relative to the root (empty: the root)",
			Doc: "the directory's entries, sorted, directories ending in /"},
		{Name: "cat", Args: "path: a file, absolute or relative to the root", Doc: "the file's contents"},
		{Name: "find", Args: "name: part of a base name, no /",
			Doc: "the sorted paths whose base name contains name (at most 8), directories ending in /"},
	}
}

// MaxTurns is the number of actions an episode may take.
func (e Env) MaxTurns() int {
	if e.maxTurns <= 0 {
		return DefaultMaxTurns
	}
	return e.maxTurns
}

// Knobs returns the ranges of the difficulty knobs for d, as [min, max] pairs by knob name
// ("depth", "width", "services", "near", "files", "noise") and the probability that file
// names hint at their facts. It returns an error for an invalid difficulty.
func Knobs(d agrl.Difficulty) (ranges map[string][2]int, hint float64, err error) {
	k, ok := knobTable[d]
	if !ok {
		return nil, 0, fmt.Errorf("filesearch: invalid difficulty %d", int(d))
	}
	return map[string][2]int{"depth": k.depth, "width": k.width, "services": k.services, "near": k.near,
		"files": k.files, "noise": k.noise}, k.hint, nil
}

type knobRanges struct {
	depth, width, services, near, files, noise [2]int
	hint                                       float64
}

var knobTable = map[agrl.Difficulty]knobRanges{
	agrl.Easy:    {depth: [2]int{1, 2}, width: [2]int{2, 2}, services: [2]int{2, 2}, near: [2]int{0, 0}, files: [2]int{2, 2}, noise: [2]int{0, 0}, hint: 1},
	agrl.Medium:  {depth: [2]int{2, 3}, width: [2]int{3, 3}, services: [2]int{4, 4}, near: [2]int{1, 1}, files: [2]int{3, 3}, noise: [2]int{1, 1}, hint: 0.5},
	agrl.Hard:    {depth: [2]int{3, 4}, width: [2]int{4, 4}, services: [2]int{6, 6}, near: [2]int{2, 3}, files: [2]int{4, 4}, noise: [2]int{2, 2}, hint: 0},
	agrl.Extreme: {depth: [2]int{5, 6}, width: [2]int{5, 5}, services: [2]int{10, 10}, near: [2]int{4, 4}, files: [2]int{5, 5}, noise: [2]int{3, 3}, hint: 0},
}

// maxSeedDraws bounds the seeds Generate tries before giving up (a drawn tree is rejected only
// when it breaks an invariant, which is rare).
const maxSeedDraws = 100

// Generate draws a task of difficulty d: the knobs within d's ranges and a tree seed.
func (e Env) Generate(rng *rand.Rand, d agrl.Difficulty) (agrl.Task, error) {
	k, ok := knobTable[d]
	if !ok {
		return agrl.Task{}, fmt.Errorf("filesearch: invalid difficulty %d", int(d))
	}
	in := func(r [2]int) int { return r[0] + rng.IntN(r[1]-r[0]+1) }
	p := params{depth: in(k.depth), width: in(k.width), services: in(k.services), near: in(k.near),
		files: in(k.files), noise: in(k.noise), hint: rng.Float64() < k.hint}
	for range maxSeedDraws {
		p.seed = rng.Uint64()
		w, err := build(p)
		if err != nil {
			continue
		}
		meta := p.meta()
		meta["path"] = w.factPath
		return agrl.Task{ID: agrl.TaskID(Name, w.prompt), Env: Name, Prompt: w.prompt, Answer: w.answer,
			Difficulty: d, Meta: meta}, nil
	}
	return agrl.Task{}, fmt.Errorf("filesearch: no valid %s tree after %d seeds", d, maxSeedDraws)
}

// Reset rebuilds the task's tree from its Meta and checks that it matches the task's prompt,
// answer and fact path (a garbled task is an error, never a panic).
func (e Env) Reset(task agrl.Task) (agrl.Session, string, error) {
	w, err := worldOf(task)
	if err != nil {
		return nil, "", err
	}
	return &session{w: w, gold: agrl.NormalizeAnswer(task.Answer)}, task.Prompt, nil
}

// worldOf validates task and rebuilds its world.
func worldOf(task agrl.Task) (*world, error) {
	if task.Env != Name {
		return nil, fmt.Errorf("filesearch: task %q belongs to env %q", clip(task.ID), clip(task.Env))
	}
	if err := task.Validate(); err != nil {
		return nil, fmt.Errorf("filesearch: %w", err)
	}
	p, err := parseParams(task.Meta)
	if err != nil {
		return nil, fmt.Errorf("filesearch: task %q: %w", clip(task.ID), err)
	}
	w, err := build(p)
	if err != nil {
		return nil, fmt.Errorf("filesearch: task %q: meta gives an invalid tree: %w", clip(task.ID), err)
	}
	var errs []error
	if w.prompt != task.Prompt {
		errs = append(errs, fmt.Errorf("prompt %q does not match the tree's %q", clip(task.Prompt), w.prompt))
	}
	if w.answer != task.Answer {
		errs = append(errs, fmt.Errorf("answer %q does not match the tree's", clip(task.Answer)))
	}
	if path, ok := task.Meta["path"]; ok && path != w.factPath {
		errs = append(errs, fmt.Errorf("meta path %q does not match the tree's", clip(path)))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("filesearch: task %q: %w", clip(task.ID), errors.Join(errs...))
	}
	return w, nil
}

// clip shortens text that goes into an error or an observation and makes it printable ASCII.
func clip(s string) string {
	const max = 40
	b := make([]byte, 0, max+3)
	for i := 0; i < len(s) && len(b) < max; i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	if len(s) > max {
		b = append(b, "..."...)
	}
	return string(b)
}
