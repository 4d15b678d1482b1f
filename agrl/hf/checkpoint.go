package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The file names transformers gives a checkpoint's weights: one file, or an index naming the
// shard that holds each tensor.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// A Source is a set of named tensors: a *File or a *Checkpoint.
type Source interface {
	// Names lists the tensors, sorted.
	Names() []string
	// Info describes the named tensor; false if there is none.
	Info(name string) (TensorInfo, bool)
}

// A Checkpoint is the weights of a model directory: model.safetensors, or the shards that
// model.safetensors.index.json names. It reads tensors from whichever shard holds them; its
// methods are safe for concurrent use.
type Checkpoint struct {
	dir    string
	shards []*File          // sorted by path
	where  map[string]*File // tensor name -> its shard
	shard  map[*File]string // shard -> its file name in dir
	names  []string         // sorted
}

// maxListed caps how many problems an index error lists.
const maxListed = 20

// OpenDir opens the checkpoint in dir. Like transformers, it prefers model.safetensors and
// falls back to model.safetensors.index.json. For an index it opens every shard and checks
// that each tensor is in exactly the shard the index names: a missing shard, a tensor absent
// from its shard, a tensor in two shards, or one in a shard but not in the index is an error
// (one error listing the first 20 problems). Close the Checkpoint when done.
func OpenDir(dir string) (*Checkpoint, error) {
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err == nil {
		f, err := Open(single)
		if err != nil {
			return nil, err
		}
		c := &Checkpoint{dir: dir, shards: []*File{f}, where: map[string]*File{}, shard: map[*File]string{f: SingleFile}, names: f.Names()}
		for _, name := range c.names {
			c.where[name] = f
		}
		return c, nil
	}
	indexPath := filepath.Join(dir, IndexFile)
	data, err := os.ReadFile(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hf: %s holds neither %s nor %s", dir, SingleFile, IndexFile)
	}
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	index, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", indexPath, err)
	}
	c, err := openShards(dir, index)
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", indexPath, err)
	}
	return c, nil
}

// parseIndex reads the weight_map of an index file. Its other fields ("metadata", with
// total_size) are not used.
func parseIndex(data []byte) (map[string]string, error) {
	top, err := objectFields(data)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(top, func(f field) bool { return f.key == "weight_map" })
	if i < 0 {
		return nil, errors.New("no weight_map")
	}
	entries, err := objectFields(top[i].value)
	if err != nil {
		return nil, fmt.Errorf("weight_map: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("weight_map is empty")
	}
	index := make(map[string]string, len(entries))
	for _, e := range entries {
		var file string
		if e.value[0] != '"' || json.Unmarshal(e.value, &file) != nil {
			return nil, fmt.Errorf("weight_map: tensor %q: shard %s is not a string", e.key, e.value)
		}
		// Shards sit beside the index: a path would let an index read any file.
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, `/\`) {
			return nil, fmt.Errorf("weight_map: tensor %q: shard %q is not a file name", e.key, file)
		}
		index[e.key] = file
	}
	return index, nil
}

// openShards opens each shard the index names and checks the index against them.
func openShards(dir string, index map[string]string) (*Checkpoint, error) {
	byShard := make(map[string][]string) // shard file -> the tensors the index puts there
	for name, file := range index {
		byShard[file] = append(byShard[file], name)
	}
	files := slices.Sorted(maps.Keys(byShard))
	c := &Checkpoint{dir: dir, where: map[string]*File{}, shard: map[*File]string{}}
	var problems []string
	for _, file := range files {
		listed := byShard[file]
		slices.Sort(listed)
		f, err := Open(filepath.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("shard %s is missing (the index puts %d tensors there, the first %q)", file, len(listed), listed[0]))
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		c.shards = append(c.shards, f)
		c.shard[f] = file
		for _, name := range f.Names() {
			if other, ok := c.where[name]; ok {
				problems = append(problems, fmt.Sprintf("tensor %q is in both %s and %s", name, c.shard[other], file))
				continue
			}
			c.where[name] = f
			if want, ok := index[name]; !ok {
				problems = append(problems, fmt.Sprintf("shard %s holds tensor %q, which the index does not list", file, name))
			} else if want != file {
				problems = append(problems, fmt.Sprintf("shard %s holds tensor %q, which the index puts in %s", file, name, want))
			}
		}
		for _, name := range listed {
			if _, ok := f.tensors[name]; !ok {
				problems = append(problems, fmt.Sprintf("tensor %q is not in its shard %s", name, file))
			}
		}
	}
	if len(problems) > 0 {
		c.Close()
		return nil, listError("the index does not match its shards", problems, maxListed)
	}
	for name := range c.where {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c, nil
}

// listError is an error whose first line is head and count, then one problem a line, at most
// max of them.
func listError(head string, problems []string, max int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d problems):", head, len(problems))
	for i, p := range problems {
		if i == max {
			fmt.Fprintf(&b, "\n\t... and %d more", len(problems)-max)
			break
		}
		b.WriteString("\n\t" + p)
	}
	return errors.New(b.String())
}

// Close closes every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Dir is the directory the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// Shards lists the checkpoint's weight files (names in Dir), sorted.
func (c *Checkpoint) Shards() []string {
	s := make([]string, len(c.shards))
	for i, f := range c.shards {
		s[i] = c.shard[f]
	}
	return s
}

// Shard is the name of the weight file that holds the named tensor, or "" if none does.
func (c *Checkpoint) Shard(name string) string {
	f, ok := c.where[name]
	if !ok {
		return ""
	}
	return c.shard[f]
}

// Names lists the tensors of all shards, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Info describes the named tensor; false if there is none.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	f, ok := c.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

func (c *Checkpoint) file(name string) (*File, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, fmt.Errorf("hf: %s: no tensor %q", c.dir, name)
	}
	return f, nil
}

// Float32s reads the named tensor as float32s (see File.Float32s).
func (c *Checkpoint) Float32s(name string) ([]float32, error) {
	f, err := c.file(name)
	if err != nil {
		return nil, err
	}
	return f.Float32s(name)
}

// Bytes reads the named tensor's raw little-endian bytes.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f, err := c.file(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// Section returns a reader of the named tensor's raw little-endian bytes.
func (c *Checkpoint) Section(name string) (*io.SectionReader, error) {
	f, err := c.file(name)
	if err != nil {
		return nil, err
	}
	return f.Section(name)
}
