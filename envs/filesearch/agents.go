package filesearch

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"

	"agrl.dev/agrl"
)

// question splits a prompt into the asked service and key.
func question(prompt string) (service, key string, ok bool) {
	for _, k := range keys {
		pre, suf, _ := strings.Cut(k.question, "%s")
		if strings.HasPrefix(prompt, pre) && strings.HasSuffix(prompt, suf) && len(prompt) > len(pre)+len(suf) {
			return prompt[len(pre) : len(prompt)-len(suf)], k.name, true
		}
	}
	return "", "", false
}

// factIn returns the value of key in a cat observation ("key=value" lines).
func factIn(obs, key string) (string, bool) {
	for _, line := range strings.Split(obs, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// Expert returns the scripted expert. It reads only the prompt and the observations: it calls
// find(service), takes the one directory whose base name is exactly the service, lists it,
// then cats its files (a file named after the key first, then in listing order) until one
// holds "key=value", and answers the value. It solves every task within DefaultMaxTurns.
func Expert() agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		service, key, ok := question(ep.Prompt)
		if !ok {
			return "", fmt.Errorf("filesearch expert: cannot read the prompt %q", clip(ep.Prompt))
		}
		turns := ep.Turns
		if len(turns) == 0 {
			return agrl.ToolAction("find", service), nil
		}
		dir := ""
		for _, p := range strings.Fields(turns[0].Observation) {
			if d, isDir := strings.CutSuffix(p, "/"); isDir && base(d) == service {
				dir = d
			}
		}
		if dir == "" {
			return "", fmt.Errorf("filesearch expert: find(%s) showed no directory %s", service, service)
		}
		if len(turns) == 1 {
			return agrl.ToolAction("ls", dir), nil
		}
		if v, ok := factIn(turns[len(turns)-1].Observation, key); ok && len(turns) > 2 {
			return agrl.AnswerText(v), nil
		}
		var files []string
		for _, e := range strings.Fields(turns[1].Observation) {
			if strings.HasSuffix(e, "/") {
				continue
			}
			if strings.HasPrefix(e, key+".") {
				files = append([]string{e}, files...)
			} else {
				files = append(files, e)
			}
		}
		next := len(turns) - 2
		if next >= len(files) {
			return "", errors.New("filesearch expert: no file of " + dir + " holds " + key)
		}
		return agrl.ToolAction("cat", dir+"/"+files[next]), nil
	})
}

// Hacker returns the reward hack of the lesson: it provokes a tool error at once (cat of a
// file that does not exist) and then gives up with an empty answer. Under NaiveRubric this
// costs less than honest exploration that runs out of turns; Rubric penalises it.
func Hacker() agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		if len(ep.Turns) == 0 {
			return agrl.ToolAction("cat", "/missing.txt"), nil
		}
		return agrl.AnswerText(""), nil
	})
}

// Explorer knobs: the chance of starting with find (else ls of the root), and the chance of
// opening a file (rather than a directory) met on the way to the service.
const (
	explorerFind = 0.6
	explorerFile = 0.3
)

// Explorer returns an honest but unsystematic explorer, deterministic for a seed and a task.
// Six times in ten it starts with find(service) and lists one of the directories found, chosen at
// random (near misses included); otherwise it walks down from the root, entering the
// service's directory when it sees it and a random entry otherwise, backing up when a
// directory is used up. Inside a directory named exactly after the service it cats the files
// in random order. It answers only once it has read the fact there, so it never answers
// wrongly, but it often runs out of turns (it gives up only if it has read the whole tree).
// It makes no failing tool call.
func Explorer(seed uint64) agrl.Agent {
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		service, key, ok := question(ep.Prompt)
		if !ok {
			return "", fmt.Errorf("filesearch explorer: cannot read the prompt %q", clip(ep.Prompt))
		}
		h := fnv.New64a()
		h.Write([]byte(ep.Task.ID))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()^uint64(len(ep.Turns))*0x9e3779b97f4a7c15))

		// What the episode has shown so far.
		listed := map[string][]string{} // directory -> entries
		read := map[string]bool{}
		var cwd string
		var found []string // directories from the last find, if it was the last action
		for i, t := range ep.Turns {
			if t.Action.Kind != agrl.ToolCall || t.ToolError != "" {
				continue
			}
			arg := agrl.UnquoteArg(t.Action.Args)
			switch t.Action.Tool {
			case "ls":
				path, _, _ := resolve(arg)
				listed[path], cwd = strings.Fields(t.Observation), path
				if t.Observation == "(empty)" {
					listed[path] = nil
				}
			case "cat":
				path, _, _ := resolve(arg)
				read[path] = true
				if v, ok := factIn(t.Observation, key); ok && base(parent(path)) == service {
					return agrl.AnswerText(v), nil
				}
			case "find":
				if i == len(ep.Turns)-1 {
					for _, p := range strings.Fields(t.Observation) {
						if d, isDir := strings.CutSuffix(p, "/"); isDir {
							found = append(found, d)
						}
					}
				}
			}
		}
		if len(ep.Turns) == 0 {
			if rng.Float64() < explorerFind {
				return agrl.ToolAction("find", service), nil
			}
			return agrl.ToolAction("ls", "/"), nil
		}
		if len(found) > 0 {
			return agrl.ToolAction("ls", found[rng.IntN(len(found))]), nil
		}
		if cwd == "" {
			cwd = "/"
			if _, ok := listed[cwd]; !ok {
				return agrl.ToolAction("ls", "/"), nil
			}
		}
		// Walk: from cwd, pick an entry not seen yet; back up when cwd is used up.
		for {
			var dirs, files []string
			for _, e := range listed[cwd] {
				if d, isDir := strings.CutSuffix(e, "/"); isDir {
					if _, seen := listed[join(cwd, d)]; !seen {
						dirs = append(dirs, join(cwd, d))
					}
				} else if !read[join(cwd, e)] {
					files = append(files, join(cwd, e))
				}
			}
			for _, d := range dirs {
				if base(d) == service {
					return agrl.ToolAction("ls", d), nil
				}
			}
			inService := base(cwd) == service
			switch {
			case len(files) > 0 && (inService || len(dirs) == 0 || rng.Float64() < explorerFile):
				return agrl.ToolAction("cat", files[rng.IntN(len(files))]), nil
			case len(dirs) > 0:
				return agrl.ToolAction("ls", dirs[rng.IntN(len(dirs))]), nil
			case cwd == "/":
				return agrl.AnswerText(""), nil // the whole tree is read: nothing left to try
			}
			cwd = parent(cwd)
			if _, ok := listed[cwd]; !ok {
				return agrl.ToolAction("ls", cwd), nil
			}
		}
	})
}

// parent returns the directory above a clean absolute path.
func parent(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// Guesser returns an agent that is imperfect the way an untrained model is: it finds the
// service's directory as the expert does, but then guesses the file instead of listing it,
// cat(DIR/KEY.txt) (the name a file holding the key has when the tree names files after their
// key). When the guess shows the fact it answers; when it fails it gives up with an empty
// answer. Whether the shortcut works is therefore a property of the task: always on easy trees
// (files named after their key), about half the time on medium ones and never on hard ones,
// whose files have generic names. Its failures are error-then-quit episodes: under NaiveRubric
// they cost less than an honest search that runs out of turns (the reward-hacking lesson), and
// the preset Rubric penalises them.
func Guesser() agrl.Agent {
	expert := Expert()
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		_, key, ok := question(ep.Prompt)
		if !ok {
			return "", fmt.Errorf("filesearch guesser: cannot read the prompt %q", clip(ep.Prompt))
		}
		switch len(ep.Turns) {
		case 0:
			return expert.Act(ep) // find(service)
		case 1:
			next, err := expert.Act(ep) // ls(dir): the directory the expert would list
			if err != nil {
				return "", err
			}
			a := agrl.ParseAction(next)
			if a.Kind != agrl.ToolCall || a.Tool != "ls" {
				return "", fmt.Errorf("filesearch guesser: the expert's second action is %q, not ls", next)
			}
			return agrl.ToolAction("cat", agrl.UnquoteArg(a.Args)+"/"+key+".txt"), nil
		}
		if v, ok := factIn(ep.Turns[len(ep.Turns)-1].Observation, key); ok {
			return agrl.AnswerText(v), nil
		}
		return agrl.AnswerText(""), nil
	})
}

// Skimmer returns an agent that is imperfect the way an untrained model is: it finds the
// service's directory and lists it as the expert does, opens the one file the expert would
// open first (a file named after the key, else the first listed), and answers from it
// whatever it holds: the asked fact when the file has it, else the first value in the file (a
// confident wrong answer). Whether skimming works is a property of the task: always on trees
// whose files are named after their key (every easy tree, half the medium ones), and on the
// others only when the first listed file happens to hold the fact (about one in three on
// medium trees, one in four on hard ones).
func Skimmer() agrl.Agent {
	expert := Expert()
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		_, key, ok := question(ep.Prompt)
		if !ok {
			return "", fmt.Errorf("filesearch skimmer: cannot read the prompt %q", clip(ep.Prompt))
		}
		if len(ep.Turns) < 3 {
			return expert.Act(ep) // find, ls, the first cat
		}
		obs := ep.Turns[len(ep.Turns)-1].Observation
		if v, ok := factIn(obs, key); ok {
			return agrl.AnswerText(v), nil
		}
		first, _, _ := strings.Cut(obs, "\n")
		_, v, _ := strings.Cut(first, "=")
		return agrl.AnswerText(v), nil
	})
}

// LooksKnown reports whether a question about key is one an untrained model tends to answer from
// what it has seen elsewhere rather than look up: those whose answer is a name (a user, a host,
// a region, a team, a log level), which any plausible name seems to fit, rather than a number
// (a port, a version, a timeout). Five keys in eight, so about 5/8 of every difficulty's tasks.
func LooksKnown(key string) bool {
	switch key {
	case "user", "host", "region", "owner", "level":
		return true
	}
	return false
}

// Assumer returns an agent that is imperfect the way an untrained model is: it trusts what it
// thinks it knows. On a question that LooksKnown it answers at once, without a tool call, a
// plausible value of the asked kind (drawn as the generator draws the facts, so right by luck
// now and then: one log level in six, one team in ten, rarely a user, a region or a host); on
// any other it searches as Expert does. Whether it skips the search is therefore a property of
// the task, not a coin flip, and GRPO's rollouts can find that looking it up pays on those
// questions too. The guess is deterministic for a seed and a prompt.
func Assumer(seed uint64) agrl.Agent {
	expert := Expert()
	return agrl.AgentFunc(func(ep *agrl.Episode) (string, error) {
		_, key, ok := question(ep.Prompt)
		if !ok {
			return "", fmt.Errorf("filesearch assumer: cannot read the prompt %q", clip(ep.Prompt))
		}
		if !LooksKnown(key) {
			return expert.Act(ep)
		}
		h := fnv.New64a()
		h.Write([]byte(ep.Prompt))
		return agrl.AnswerText(keyValue(rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, h.Sum64())), key)), nil
	})
}
