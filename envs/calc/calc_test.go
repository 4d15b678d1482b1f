package calc

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"agrl.dev/agrl"
)

func generate(t *testing.T, seed uint64, d agrl.Difficulty, n int) []agrl.Task {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([]agrl.Task, n)
	for i := range out {
		task, err := New().Generate(rng, d)
		if err != nil {
			t.Fatalf("Generate(%s): %v", d, err)
		}
		out[i] = task
	}
	return out
}

func TestGenerateDeterministic(t *testing.T) {
	for _, d := range agrl.Difficulties {
		a, b := generate(t, 42, d, 50), generate(t, 42, d, 50)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed, different tasks", d)
		}
		if c := generate(t, 43, d, 50); reflect.DeepEqual(a, c) {
			t.Errorf("%s: different seeds, same tasks", d)
		}
	}
}

func TestGenerateInvalidDifficulty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, d := range []agrl.Difficulty{0, -1, agrl.Extreme + 1} {
		if _, err := New().Generate(rng, d); err == nil {
			t.Errorf("Generate(%d) succeeded", int(d))
		}
	}
	if _, err := New().Generate(nil, agrl.Easy); err == nil {
		t.Error("Generate with a nil rng succeeded")
	}
}

// shape measures the knobs of a generated expression.
type shape struct {
	ops, minDigits, maxDigits int
	parens, div               bool
}

func shapeOf(expr string) shape {
	s := shape{minDigits: 99}
	for _, num := range strings.FieldsFunc(expr, func(r rune) bool { return !('0' <= r && r <= '9') }) {
		s.minDigits, s.maxDigits = min(s.minDigits, len(num)), max(s.maxDigits, len(num))
	}
	s.ops = strings.Count(expr, "+") + strings.Count(expr, "-") + strings.Count(expr, "*") + strings.Count(expr, "/")
	s.parens = strings.Contains(expr, "(")
	s.div = strings.Contains(expr, "/")
	return s
}

func TestGenerateKnobs(t *testing.T) {
	const n = 1000
	meanOps := map[agrl.Difficulty]float64{}
	for _, d := range agrl.Difficulties {
		lv := levels[d]
		seenOps := map[int]int{}
		divs, withWide, maxPrompt := 0, 0, 0
		for _, task := range generate(t, 5, d, n) {
			if err := task.Validate(); err != nil {
				t.Fatal(err)
			}
			expr := task.Meta["expr"]
			if task.Env != Name || task.Prompt != PromptPrefix+expr || task.Difficulty != d ||
				task.ID != agrl.TaskID(Name, task.Prompt) {
				t.Fatalf("malformed task %v", task)
			}
			s := shapeOf(expr)
			if s.ops < lv.minOps || s.ops > lv.maxOps || s.minDigits < lv.minDigits || s.maxDigits > lv.maxDigits {
				t.Errorf("%s: %q has %d operators and %d-%d digits", d, expr, s.ops, s.minDigits, s.maxDigits)
			}
			if s.parens != lv.parens {
				t.Errorf("%s: %q: parentheses %v, want %v", d, expr, s.parens, lv.parens)
			}
			if lv.wideOperand && s.maxDigits != lv.maxDigits {
				t.Errorf("%s: %q has no %d-digit operand", d, expr, lv.maxDigits)
			}
			// Every division is exact and every value within the level's bound.
			v, err := eval(expr, true, lv.limit)
			if err != nil || strconv.FormatInt(v, 10) != task.Answer {
				t.Errorf("%s: %q: strict eval %d, %v; answer %s", d, expr, v, err, task.Answer)
			}
			seenOps[s.ops]++
			meanOps[d] += float64(s.ops) / n
			if s.div {
				divs++
			}
			if s.maxDigits == lv.maxDigits {
				withWide++
			}
			maxPrompt = max(maxPrompt, len(task.Prompt))
		}
		for k := lv.minOps; k <= lv.maxOps; k++ {
			if seenOps[k] < n/10 {
				t.Errorf("%s: only %d of %d tasks have %d operators", d, seenOps[k], n, k)
			}
		}
		if divs < n/10 || withWide < n/10 {
			t.Errorf("%s: %d tasks divide, %d have a %d-digit operand; want >= %d each", d, divs, withWide, lv.maxDigits, n/10)
		}
		if maxPrompt > 80 {
			t.Errorf("%s: prompt of %d bytes", d, maxPrompt)
		}
		t.Logf("%-7s mean operators %.2f, with division %d/%d, with %d-digit operand %d/%d, longest prompt %d bytes",
			d, meanOps[d], divs, n, lv.maxDigits, withWide, n, maxPrompt)
	}
	for i := 1; i < len(agrl.Difficulties); i++ {
		a, b := agrl.Difficulties[i-1], agrl.Difficulties[i]
		if meanOps[b] <= meanOps[a] || levels[b].maxOps <= levels[a].maxOps || levels[b].maxDigits < levels[a].maxDigits {
			t.Errorf("%s is not harder than %s", b, a)
		}
	}
	if levels[agrl.Extreme].maxDigits <= levels[agrl.Hard].maxDigits {
		t.Error("extreme operands are no longer than hard ones")
	}
}

func TestNewTask(t *testing.T) {
	task, err := NewTask("12+7*(3-5)", agrl.Medium)
	if err != nil {
		t.Fatal(err)
	}
	want := agrl.Task{ID: agrl.TaskID("calc", "Compute: 12+7*(3-5)"), Env: "calc", Prompt: "Compute: 12+7*(3-5)",
		Answer: "-2", Difficulty: agrl.Medium, Meta: map[string]string{"expr": "12+7*(3-5)"}}
	if !reflect.DeepEqual(task, want) {
		t.Errorf("NewTask = %v, want %v", task, want)
	}
	if _, err := NewTask("1/0", agrl.Easy); err == nil {
		t.Error("NewTask(1/0) succeeded")
	}
	if _, err := NewTask("1+1", 0); err == nil {
		t.Error("NewTask with difficulty 0 succeeded")
	}
}

func TestResetValidates(t *testing.T) {
	good, _ := NewTask("6*7", agrl.Easy)
	if _, prompt, err := New().Reset(good); err != nil || prompt != "Compute: 6*7" {
		t.Fatalf("Reset(good) = %q, %v", prompt, err)
	}
	edit := func(f func(*agrl.Task)) agrl.Task {
		t := good
		t.Meta = map[string]string{"expr": good.Meta["expr"]}
		f(&t)
		return t
	}
	bad := map[string]agrl.Task{
		"wrong env":       edit(func(t *agrl.Task) { t.Env = "multihop" }),
		"no env":          edit(func(t *agrl.Task) { t.Env = "" }),
		"no meta":         edit(func(t *agrl.Task) { t.Meta = nil }),
		"no expr":         edit(func(t *agrl.Task) { delete(t.Meta, "expr") }),
		"garbled expr":    edit(func(t *agrl.Task) { t.Meta["expr"] = "6*/7"; t.Prompt = "Compute: 6*/7" }),
		"prompt mismatch": edit(func(t *agrl.Task) { t.Prompt = "Compute: 6*8" }),
		"wrong answer":    edit(func(t *agrl.Task) { t.Answer = "43" }),
		"padded answer":   edit(func(t *agrl.Task) { t.Answer = "042" }),
		"bad difficulty":  edit(func(t *agrl.Task) { t.Difficulty = 9 }),
		"division by 0":   edit(func(t *agrl.Task) { t.Meta["expr"] = "1/0"; t.Prompt = "Compute: 1/0"; t.Answer = "0" }),
	}
	for name, task := range bad {
		if _, _, err := New().Reset(task); err == nil {
			t.Errorf("Reset accepted a task with %s", name)
		}
	}
}

// TestTaskJSONRoundTrip replays a task that went through JSON.
func TestTaskJSONRoundTrip(t *testing.T) {
	for _, task := range generate(t, 9, agrl.Hard, 20) {
		b, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		var back agrl.Task
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		a, err1 := agrl.Play(New(), task, Expert(), agrl.Limits{})
		c, err2 := agrl.Play(New(), back, Expert(), agrl.Limits{})
		if err1 != nil || err2 != nil || a.Transcript() != c.Transcript() || !c.Correct {
			t.Errorf("replay differs: %v %v\n%s\n%s", err1, err2, a.Transcript(), c.Transcript())
		}
	}
}

func TestStep(t *testing.T) {
	task, _ := NewTask("12+7*(3-5)", agrl.Medium)
	sess, _, err := New().Reset(task)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		a       agrl.Action
		obs     string
		toolErr bool
		done    bool
		correct bool
	}{
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: "12+7*(3-5)"}, "-2", false, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: `"7/2"`}, "3", false, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: `'-7/2'`}, "-3", false, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: "9**9**9"}, "error: unsupported operator ** at 2", true, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: "1/0"}, "error: division by zero", true, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "calc", Args: ""}, "error: empty expression", true, false, false},
		{agrl.Action{Kind: agrl.ToolCall, Tool: "python", Args: "1"}, `error: unknown tool "python", the only tool is calc`, true, false, false},
		{agrl.Action{Kind: agrl.Invalid}, "error: not a tool call or an answer", true, false, false},
		{agrl.Action{Kind: agrl.AnswerAction, Answer: "-2"}, "", false, true, true},
		{agrl.Action{Kind: agrl.AnswerAction, Answer: "-02"}, "", false, true, true},
		{agrl.Action{Kind: agrl.AnswerAction, Answer: "2"}, "", false, true, false},
		{agrl.Action{Kind: agrl.AnswerAction, Answer: ""}, "", false, true, false},
	}
	for _, c := range cases {
		r := sess.Step(c.a)
		if r.Observation != c.obs || (r.ToolError != "") != c.toolErr || r.Done != c.done || r.Correct != c.correct {
			t.Errorf("Step(%v) = %+v", c.a, r)
		}
	}
}

func TestCheckAnswer(t *testing.T) {
	cases := []struct {
		answer, gold string
		want         bool
	}{
		{"-5", "-5", true},
		{"+5", "5", true},
		{"5", "5", true},
		{" 5 ", "5", true},
		{"5.", "5", true},
		{"005", "5", true},
		{"-0", "0", true},
		{"\u22125", "-5", true},
		{"5", "-5", false},
		{"-5", "5", false},
		{"5.0", "5", false},
		{"5e0", "5", false},
		{"five", "5", false},
		{"1,000", "1000", false},
		{"- 5", "-5", false},
		{"--5", "5", false},
		{"+-5", "-5", false},
		{"55", "5", false},
		{"", "0", false},
		{"-", "0", false},
		{"0x10", "16", false},
		{"9223372036854775808", "-9223372036854775808", false},
		{"123456789012345678901234567890", "123456789012345678901234567890", true},
		{strings.Repeat("0", 70) + "1", "1", false},
	}
	for _, c := range cases {
		if got := CheckAnswer(c.answer, c.gold); got != c.want {
			t.Errorf("CheckAnswer(%q, %q) = %v, want %v", c.answer, c.gold, got, c.want)
		}
	}
}

func TestTurnsSetter(t *testing.T) {
	base := New()
	six := base.Turns(6)
	if base.MaxTurns() != DefaultMaxTurns || six.MaxTurns() != 6 || six.Turns(0).MaxTurns() != DefaultMaxTurns {
		t.Errorf("MaxTurns: base %d, six %d", base.MaxTurns(), six.MaxTurns())
	}
	if tools := base.Tools(); len(tools) != 1 || tools[0].Name != "calc" || base.Name() != "calc" {
		t.Errorf("Tools = %v, Name = %q", tools, base.Name())
	}
}
