package filesearch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// params are the knobs of one task's tree. Each is stored in Task.Meta so the tree can be
// rebuilt from the task alone.
type params struct {
	seed     uint64
	depth    int  // path components of every service directory (/srv/kemo has depth 2)
	width    int  // directory names to choose from at each level above the services
	services int  // services with unrelated names, the asked one included
	near     int  // near-miss services whose names contain the asked one's ("kemo-old")
	files    int  // files in each service directory
	noise    int  // loose files in the directories above the services
	hint     bool // files are named after the key they hold ("port.txt"), not "app.conf"
}

// Bounds of the knobs accepted from Task.Meta: they keep a hostile task's tree small.
var knobBounds = map[string][2]int{
	"depth": {1, 8}, "width": {1, 8}, "services": {1, 16}, "near": {0, 6}, "files": {1, 6}, "noise": {0, 8},
}

func (p params) meta() map[string]string {
	return map[string]string{
		"seed": strconv.FormatUint(p.seed, 10), "depth": strconv.Itoa(p.depth), "width": strconv.Itoa(p.width),
		"services": strconv.Itoa(p.services), "near": strconv.Itoa(p.near), "files": strconv.Itoa(p.files),
		"noise": strconv.Itoa(p.noise), "hint": strconv.FormatBool(p.hint),
	}
}

// parseParams reads the knobs back from Task.Meta, reporting every problem at once.
func parseParams(meta map[string]string) (params, error) {
	var p params
	var errs []error
	seed, err := strconv.ParseUint(meta["seed"], 10, 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("meta seed %q: want an unsigned integer", clip(meta["seed"])))
	}
	p.seed = seed
	ints := map[string]*int{"depth": &p.depth, "width": &p.width, "services": &p.services, "near": &p.near,
		"files": &p.files, "noise": &p.noise}
	for _, k := range []string{"depth", "width", "services", "near", "files", "noise"} {
		b := knobBounds[k]
		v, err := strconv.Atoi(meta[k])
		if err != nil || v < b[0] || v > b[1] {
			errs = append(errs, fmt.Errorf("meta %s %q: want an integer in [%d, %d]", k, clip(meta[k]), b[0], b[1]))
			continue
		}
		*ints[k] = v
	}
	hint, err := strconv.ParseBool(meta["hint"])
	if err != nil {
		errs = append(errs, fmt.Errorf("meta hint %q: want true or false", clip(meta["hint"])))
	}
	p.hint = hint
	return p, errors.Join(errs...)
}

// node is one file or directory of the virtual tree.
type node struct {
	dir      bool
	children []string // sorted base names (directories only)
	content  string   // files only
}

// world is a generated task: the tree and the question about it.
type world struct {
	nodes    map[string]*node // by clean absolute path; "/" is the root
	service  string
	key      string
	answer   string
	factPath string
	prompt   string
}

// keys are the facts a service has, with the question asked about each.
var keys = []struct{ name, question string }{
	{"port", "What port does service %s use?"},
	{"user", "Which user runs service %s?"},
	{"host", "What host does service %s run on?"},
	{"version", "What version is service %s?"},
	{"timeout", "What timeout does service %s use?"},
	{"region", "What region is service %s in?"},
	{"owner", "Which team owns service %s?"},
	{"level", "What log level does service %s use?"},
}

func keyValue(rng *rand.Rand, key string) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	switch key {
	case "port":
		return strconv.Itoa(1024 + rng.IntN(8976))
	case "user":
		return pick("ana", "bob", "eli", "kai", "max", "zoe", "sam", "ivy", "lea", "tom") + strconv.Itoa(rng.IntN(10))
	case "host":
		return pick("db", "node", "web", "app", "edge", "box") + strconv.Itoa(1+rng.IntN(60))
	case "version":
		return strconv.Itoa(1+rng.IntN(9)) + "." + strconv.Itoa(rng.IntN(30))
	case "timeout":
		return strconv.Itoa(5+rng.IntN(116)) + "s"
	case "region":
		return pick("eu", "us", "ap", "sa", "af", "me") + "-" + pick("north", "south", "east", "west") + strconv.Itoa(1+rng.IntN(4))
	case "owner":
		return pick("infra", "data", "core", "web", "ml", "sec", "pay", "ops", "search", "mail") + "-team"
	default: // level
		return pick("debug", "info", "warn", "error", "trace", "fatal")
	}
}

// Directory names per level above the services; deeper levels reuse the last pool. No name
// has the consonant-vowel-consonant-vowel shape of a service name.
var levelPools = [][]string{
	{"srv", "opt", "apps", "etc", "home", "var", "usr", "mnt", "www"},
	{"prod", "dev", "test", "stage", "ci", "qa", "edge", "main", "old"},
	{"eu", "us", "ap", "sa", "af", "me", "uk", "cn", "in"},
	{"a1", "b2", "c3", "d4", "e5", "f6", "g7", "h8", "k9"},
	{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9"},
	{"y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"},
	{"z1", "z2", "z3", "z4", "z5", "z6", "z7", "z8", "z9"},
}

// Generic names of service files when the name gives no hint.
var genericFiles = []string{"app.conf", "main.cfg", "env.ini", "run.cfg", "svc.yml", "base.ini", "site.cfg"}

// Forms of near-miss service names; %s is the asked service.
var nearForms = []string{"%s-old", "%s2", "%s-dev", "old-%s", "%s-bak", "%sx"}

const (
	consonants = "bdfgklmnprstvz"
	vowels     = "aeiou"
	maxFind    = 8 // find lists at most this many paths
)

func serviceName(rng *rand.Rand) string {
	b := []byte{consonants[rng.IntN(len(consonants))], vowels[rng.IntN(len(vowels))],
		consonants[rng.IntN(len(consonants))], vowels[rng.IntN(len(vowels))]}
	return string(b)
}

// build generates the tree and the question of p deterministically. It fails only when the
// drawn tree breaks an invariant (the caller then draws another seed).
func build(p params) (*world, error) {
	rng := rand.New(rand.NewPCG(p.seed, 0x66696c6573656172))
	w := &world{nodes: map[string]*node{"/": {dir: true}}}

	// Directory names available at each level above the services.
	levels := make([][]string, p.depth-1)
	for i := range levels {
		pool := append([]string(nil), levelPools[min(i, len(levelPools)-1)]...)
		rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
		levels[i] = pool[:min(p.width, len(pool))]
	}
	randomParent := func() string {
		path := ""
		for _, names := range levels {
			path += "/" + names[rng.IntN(len(names))]
		}
		return path
	}

	// Services: the asked one first, then unrelated names, then near misses.
	seen := map[string]bool{}
	var names []string
	for len(names) < p.services {
		s := serviceName(rng)
		if !seen[s] {
			seen[s] = true
			names = append(names, s)
		}
	}
	target := names[0]
	forms := append([]string(nil), nearForms...)
	rng.Shuffle(len(forms), func(a, b int) { forms[a], forms[b] = forms[b], forms[a] })
	for i := 0; i < p.near && i < len(forms); i++ {
		names = append(names, fmt.Sprintf(forms[i], target))
	}
	k := keys[rng.IntN(len(keys))]
	w.service, w.key = target, k.name
	w.prompt = fmt.Sprintf(k.question, target)

	targetParent := randomParent()
	for i, s := range names {
		parent := targetParent
		if i > 0 && !(i >= p.services && rng.IntN(2) == 0) { // half the near misses are siblings
			parent = randomParent()
		}
		dir := parent + "/" + s
		if w.nodes[dir] != nil {
			return nil, fmt.Errorf("duplicate service directory %s", dir)
		}
		vals := map[string]string{}
		for _, kk := range keys {
			vals[kk.name] = keyValue(rng, kk.name)
		}
		if i > 0 {
			for vals[k.name] == w.answer {
				vals[k.name] = keyValue(rng, k.name)
			}
		} else {
			w.answer = vals[k.name]
		}
		mustHaveKey := i == 0 || i >= p.services || rng.IntN(2) == 0
		for name, content := range serviceFiles(rng, p, k.name, mustHaveKey, vals) {
			w.addFile(dir+"/"+name, content)
			if i == 0 && strings.Contains("\n"+content+"\n", "\n"+k.name+"="+w.answer+"\n") {
				w.factPath = dir + "/" + name
			}
		}
	}

	// Loose files above the services; some mention the asked service by name.
	for i := 0; i < p.noise; i++ {
		parent := ""
		if len(levels) > 0 {
			for _, lv := range levels[:rng.IntN(len(levels))+1] {
				parent += "/" + lv[rng.IntN(len(lv))]
			}
		}
		var name, content string
		switch rng.IntN(4) {
		case 0:
			name, content = target+".log", target+": started"
		case 1:
			s := names[rng.IntN(len(names))]
			name, content = s+".log", s+": stopped"
		case 2:
			name, content = "readme.txt", "services live here"
		default:
			name, content = "notes.txt", "todo: rotate logs"
		}
		if w.nodes[parent+"/"+name] == nil {
			w.addFile(parent+"/"+name, content)
		}
	}
	return w, w.check()
}

// serviceFiles lays out one service's facts over p.files files.
func serviceFiles(rng *rand.Rand, p params, key string, mustHaveKey bool, vals map[string]string) map[string]string {
	order := make([]string, 0, len(keys))
	for _, kk := range keys {
		if kk.name != key {
			order = append(order, kk.name)
		}
	}
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	if mustHaveKey {
		order = append([]string{key}, order...)
	}
	out := map[string]string{}
	if p.hint {
		for _, kk := range order[:min(p.files, len(order))] {
			out[kk+".txt"] = kk + "=" + vals[kk]
		}
		return out
	}
	names := append([]string(nil), genericFiles...)
	rng.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
	names = names[:min(p.files, len(names))]
	lines := make([][]string, len(names))
	for i, kk := range order[:min(len(order), len(names)+len(names)/2+1)] {
		f := i
		if i >= len(names) {
			f = rng.IntN(len(names))
		}
		lines[f] = append(lines[f], kk+"="+vals[kk])
	}
	rng.Shuffle(len(lines), func(a, b int) { lines[a], lines[b] = lines[b], lines[a] })
	for i, name := range names {
		out[name] = strings.Join(lines[i], "\n")
	}
	return out
}

// addFile adds a file and every missing directory above it.
func (w *world) addFile(path, content string) {
	w.nodes[path] = &node{content: content}
	for {
		i := strings.LastIndexByte(path, '/')
		parent, base := path[:i], path[i+1:]
		if parent == "" {
			parent = "/"
		}
		pn := w.nodes[parent]
		if pn == nil {
			pn = &node{dir: true}
			w.nodes[parent] = pn
		}
		j := sort.SearchStrings(pn.children, base)
		if j < len(pn.children) && pn.children[j] == base {
			return
		}
		pn.children = append(pn.children, "")
		copy(pn.children[j+1:], pn.children[j:])
		pn.children[j] = base
		if parent == "/" {
			return
		}
		path = parent
	}
}

// check verifies the invariants that make the task solvable by exploring: the fact file
// exists, exactly one directory is named after the service, find lists every match, and no
// path is too long for the tools.
func (w *world) check() error {
	if w.factPath == "" {
		return errors.New("no fact file")
	}
	dirs := 0
	for path, n := range w.nodes {
		if len(path) > maxPath {
			return fmt.Errorf("path %s too long", path)
		}
		if n.dir && base(path) == w.service {
			dirs++
		}
	}
	if dirs != 1 {
		return fmt.Errorf("%d directories named %s", dirs, w.service)
	}
	if got := len(w.find(w.service)); got > maxFind {
		return fmt.Errorf("find(%s) has %d matches", w.service, got)
	}
	return nil
}

func base(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// find returns the sorted paths whose base name contains name, directories with a
// trailing "/".
func (w *world) find(name string) []string {
	var out []string
	for path, n := range w.nodes {
		if path != "/" && strings.Contains(base(path), name) {
			if n.dir {
				path += "/"
			}
			out = append(out, path)
		}
	}
	sort.Strings(out)
	return out
}
