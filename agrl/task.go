package agrl

// This file holds the task types: a Task is one problem an environment poses, with its gold
// answer and difficulty. Tasks are produced by an Env's generator and drawn through a Mix,
// which fixes the difficulty proportions and the train/dev/test/OOD splits.

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
)

// Difficulty is a task's difficulty bucket. The zero value is invalid, so a Task whose
// difficulty was never set is caught by Validate.
type Difficulty int

const (
	// Easy tasks: the fewest operators, hops or directories.
	Easy Difficulty = iota + 1
	// Medium tasks.
	Medium
	// Hard tasks: the hardest bucket a training Mix draws from.
	Hard
	// Extreme tasks are harder than anything in training. Mixes never train on them: they make
	// up the out-of-distribution (OOD) split.
	Extreme
)

// Difficulties lists the buckets in increasing order.
var Difficulties = []Difficulty{Easy, Medium, Hard, Extreme}

var difficultyNames = map[Difficulty]string{Easy: "easy", Medium: "medium", Hard: "hard", Extreme: "extreme"}

// String returns "easy", "medium", "hard" or "extreme" (or "difficulty(N)" when invalid).
func (d Difficulty) String() string {
	if s, ok := difficultyNames[d]; ok {
		return s
	}
	return fmt.Sprintf("difficulty(%d)", int(d))
}

// Valid reports whether d is one of the four buckets.
func (d Difficulty) Valid() bool { _, ok := difficultyNames[d]; return ok }

// ParseDifficulty reads a difficulty name as written by String (case-insensitive).
func ParseDifficulty(s string) (Difficulty, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for d, name := range difficultyNames {
		if name == t {
			return d, nil
		}
	}
	return 0, fmt.Errorf("agrl: unknown difficulty %q (want easy, medium, hard or extreme)", s)
}

// MarshalText writes the difficulty's name, so JSON files read "hard", not 3.
func (d Difficulty) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("agrl: cannot marshal invalid difficulty %d", int(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads a difficulty name.
func (d *Difficulty) UnmarshalText(b []byte) error {
	v, err := ParseDifficulty(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Task is one problem posed by an environment.
type Task struct {
	// ID is stable across runs: the environment name and a hash of the prompt (see TaskID).
	ID string `json:"id"`
	// Env names the environment that generated the task.
	Env string `json:"env"`
	// Prompt is the text the policy sees first.
	Prompt string `json:"prompt"`
	// Answer is the gold answer, compared after NormalizeAnswer unless the environment says otherwise.
	Answer string `json:"answer"`
	// Difficulty is the bucket the task was generated for.
	Difficulty Difficulty `json:"difficulty"`
	// Meta carries environment-specific data that its Session, expert and reward components
	// read back (for example the expression of a calc task, or the seed of a virtual file tree).
	// Values are strings so tasks round-trip through JSON unchanged.
	Meta map[string]string `json:"meta,omitempty"`
}

// TaskID derives a task's stable identifier from its environment name and prompt.
func TaskID(env, prompt string) string {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	return fmt.Sprintf("%s-%016x", env, h.Sum64())
}

// Validate reports what is wrong with a task, or nil.
func (t Task) Validate() error {
	var problems []string
	if t.Env == "" {
		problems = append(problems, "empty env name")
	}
	if strings.TrimSpace(t.Prompt) == "" {
		problems = append(problems, "empty prompt")
	}
	if !t.Difficulty.Valid() {
		problems = append(problems, fmt.Sprintf("invalid difficulty %d", int(t.Difficulty)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("agrl: invalid task %q: %s", t.ID, strings.Join(problems, "; "))
	}
	return nil
}

// String renders the task as one line of JSON, handy in logs and notebooks.
func (t Task) String() string {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Sprintf("Task{%s: %v}", t.ID, err)
	}
	return string(b)
}

// NormalizeAnswer puts an answer in the canonical form used by exact-match checks: surrounding
// space and one trailing period removed, letters lower-cased, inner runs of white space
// collapsed to one space, and a leading "+" or a unicode minus on a number made plain.
// It never matches substrings: "12" and "123" stay different.
func NormalizeAnswer(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	s = strings.TrimSuffix(s, ".")
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\u2212", "-")
	if len(s) > 1 && s[0] == '+' && s[1] >= '0' && s[1] <= '9' {
		s = s[1:]
	}
	return s
}
