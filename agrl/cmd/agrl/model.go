package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"agrl.dev/agrl"
	"agrl.dev/agrl/bpe"
	"agrl.dev/agrl/hf"
	"agrl.dev/agrl/learn"
	"agrl.dev/agrl/llm"
	"agrl.dev/internal/sysmem"
)

const modelUsage = `Usage:
  agrl model random -shape NAME -tokenizer FILE -out DIR   write a model directory with random weights
  agrl model export -run DIR -out DIR [-merged]            save a pretrained run's adapters (PEFT) or merged model
`

// cmdModel handles the pretrained-model utilities.
func cmdModel(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("want a subcommand: random or export\n" + modelUsage)}
	}
	switch args[0] {
	case "random":
		return cmdModelRandom(args[1:], stdout, stderr)
	case "export":
		return cmdModelExport(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, modelUsage)
		return nil
	}
	return usageError{fmt.Errorf("unknown subcommand %q\n%s", args[0], modelUsage)}
}

// cmdModelRandom writes a Hugging Face model directory of a named shape with seeded random
// weights and the given tokenizer: real formats without a download, for checks and benchmarks.
func cmdModelRandom(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model random", stderr)
	shape := fs.String("shape", "tiny-qwen3", "model shape: "+strings.Join(llm.ShapeNames(), ", "))
	tokPath := fs.String("tokenizer", "", "tokenizer.json (or .json.gz) to ship with the model; its vocabulary must fit the shape's")
	out := fs.String("out", "", "directory to write (created)")
	seed := fs.Uint64("seed", 1, "seed of the random weights")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the shape's)")
	context := fs.Int("context", 0, "max_position_embeddings (0: the shape's)")
	dtype := fs.String("dtype", "bfloat16", "stored dtype: bfloat16, float16 or float32")
	if err := parse(fs, args); err != nil {
		return err
	}
	var errs []error
	cfg, err := llm.Shape(*shape)
	if err != nil {
		errs = append(errs, err)
	}
	if *out == "" {
		errs = append(errs, errors.New("-out is required"))
	}
	if *tokPath == "" {
		errs = append(errs, errors.New("-tokenizer is required (a model directory needs tokenizer.json)"))
	}
	if *vocab < 0 || *context < 0 {
		errs = append(errs, errors.New("-vocab and -context must be >= 0"))
	}
	switch *dtype {
	case "bfloat16", "float16", "float32":
	default:
		errs = append(errs, fmt.Errorf("-dtype %q: want bfloat16, float16 or float32", *dtype))
	}
	if *out != "" {
		if err := checkNewDir(*out); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	tok, err := readMaybeGzip(*tokPath)
	if err != nil {
		return err
	}
	if *vocab > 0 {
		cfg.VocabSize = *vocab
	}
	if *context > 0 {
		cfg.MaxPositionEmbeddings = *context
	}
	cfg.TorchDType = *dtype
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	// The weights are held whole, in their stored dtype, while the file is written.
	size := int64(cfg.NumParams()) * int64(dtypes[*dtype].Size())
	if usable := sysmem.Usable(); usable > 0 && size > usable {
		return usageError{fmt.Errorf("%s with %d ids is %d parameters: %.1f GB of %s weights, more than this machine's %.1f GB",
			*shape, cfg.VocabSize, cfg.NumParams(), float64(size)/1e9, *dtype, float64(usable)/1e9)}
	}
	t, err := bpe.FromJSON(tok)
	if err != nil {
		return fmt.Errorf("%s: %w", *tokPath, err)
	}
	if t.VocabSize() > cfg.VocabSize {
		return usageError{fmt.Errorf("the tokenizer has %d ids; shape %s holds %d (pass -vocab)", t.VocabSize(), *shape, cfg.VocabSize)}
	}
	if cfg.BOSTokenID >= cfg.VocabSize {
		cfg.BOSTokenID = -1
	}
	var eos []int
	for _, id := range cfg.EOSTokenIDs {
		if id < cfg.VocabSize {
			eos = append(eos, id)
		}
	}
	cfg.EOSTokenIDs = eos
	if err := llm.WriteRandom(*out, cfg, *seed, 1); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "tokenizer.json"), tok, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s (%s), %d parameters, random weights (seed %d), tokenizer %s\n", *out, *shape, cfg.Architecture, cfg.NumParams(), *seed, *tokPath)
	return nil
}

// dtypes are the stored dtypes the model commands take, by torch_dtype name.
var dtypes = map[string]hf.DType{"float32": hf.F32, "bfloat16": hf.BF16, "float16": hf.F16}

// checkNewDir returns an error unless dir is absent or an empty directory: the model
// commands write config.json and the weights' files there, which would replace a run's
// configuration, another model's files or anything else of the same name.
func checkNewDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("-out %s is a file, not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	what := "files"
	switch {
	case slices.Contains(names, agrl.RunMetricsFile) || slices.Contains(names, agrl.RunCheckpointsDir):
		what = "a training run"
	case slices.Contains(names, "config.json"):
		what = "a model"
	}
	if len(names) > 4 {
		names = append(names[:4], "…")
	}
	return fmt.Errorf("-out %s already holds %s (%s): writing there would replace its files; name a new or empty directory", dir, what, strings.Join(names, ", "))
}

// readMaybeGzip reads a file, gunzipping it when it is gzip-compressed.
func readMaybeGzip(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		return data, err
	}
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return io.ReadAll(io.LimitReader(r, 1<<30))
}

// cmdModelExport writes the newest checkpoint of a pretrained run as PEFT adapters, or merged
// into the base model's weights as a Hugging Face model directory.
func cmdModelExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model export", stderr)
	runDir := fs.String("run", "", "run directory of a pretrained (-model) run")
	out := fs.String("out", "", "directory to write")
	merged := fs.Bool("merged", false, "merge the adapters into the weights and write a whole model directory (default: the adapters alone, in PEFT's format)")
	dtype := fs.String("dtype", "float32", "dtype of merged weights: float32 (reads back bit for bit), bfloat16 or float16")
	if err := parse(fs, args); err != nil {
		return err
	}
	var errs []error
	if *runDir == "" || *out == "" {
		errs = append(errs, errors.New("-run and -out are required"))
	}
	dt := dtypes[*dtype]
	if dt == "" {
		errs = append(errs, fmt.Errorf("-dtype %q: want float32, bfloat16 or float16", *dtype))
	}
	if *out != "" {
		if err := checkNewDir(*out); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	m, err := learn.LoadModel(filepath.Join(*runDir, agrl.RunCheckpointsDir), "")
	if err != nil {
		return err
	}
	p, ok := m.(*learn.PretrainedPolicy)
	if !ok {
		return fmt.Errorf("%s holds a Tiny policy, not a pretrained model's adapters: nothing to export", *runDir)
	}
	if p.IsFull() && !*merged {
		return usageError{fmt.Errorf("%s fully fine-tuned its model: there are no adapters to export; use -merged to write the whole model", *runDir)}
	}
	if *merged {
		err = p.SaveMerged(*out, dt)
	} else {
		err = p.SaveAdapters(*out)
	}
	if err != nil {
		return err
	}
	what := "LoRA adapters (PEFT: adapter_config.json, adapter_model.safetensors)"
	switch {
	case p.IsFull():
		what = "fully fine-tuned model (config.json, safetensors, tokenizer)"
	case *merged:
		what = "merged model (config.json, safetensors, tokenizer)"
	}
	fmt.Fprintf(stdout, "%s: %s of %s at %s\n", *out, what, p.Spec().Dir, p.Checkpoint())
	return nil
}
