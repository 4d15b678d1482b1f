package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"agrl.dev/agrl/hf"
)

// MaxShardSize is the most bytes of weights Save puts in one safetensors file: 5 GB, the
// default max_shard_size of transformers' save_pretrained. Larger models are split into shards.
const MaxShardSize = 5_000_000_000

// tokenizerFiles are the files Save copies from the directory the model was loaded from, where
// it has them: the tokenizer's and the generation defaults.
var tokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
	"vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "tokenizer.model",
}

// saveTypes are the weight types Save writes, with their torch_dtype and converters.
var saveTypes = map[hf.DType]struct {
	torch  string
	tensor func([]float32, ...int) hf.Tensor
}{
	hf.F32:  {"float32", hf.F32Tensor},
	hf.BF16: {"bfloat16", hf.BF16Tensor},
	hf.F16:  {"float16", hf.F16Tensor},
}

// Save writes m to dir (created if needed) as a Hugging Face model directory that transformers,
// vLLM and Load read, with the adapters a merged into the weights: each targeted projection is
// saved as W + (Alpha/Rank)·B·A (the product summed in float64, then rounded to float32). A nil a
// means the adapters m runs with: none for a model from Load, those of WithAdapters for a view;
// a view cannot save with other adapters than its own. The directory gets
//
//   - config.json, as WriteRandom writes it, with torch_dtype naming dtype;
//   - the weights under transformers' names (hf.Config.Tensors), as dtype (hf.F32, hf.BF16 or
//     hf.F16, rounded to nearest even), in model.safetensors or, past MaxShardSize bytes, in
//     shards model-0000i-of-0000n.safetensors of consecutive tensors named by
//     model.safetensors.index.json (replacing a checkpoint of the other layout in dir);
//   - a copy of each tokenizer file the directory m was loaded from has: tokenizer.json,
//     tokenizer_config.json, special_tokens_map.json, generation_config.json, vocab.json,
//     merges.txt, added_tokens.json, chat_template.jinja, tokenizer.model.
//
// Tied embeddings stay tied: no lm_head.weight is written (LoRA never adapts the embeddings).
//
// Without adapters an F32 save gives back every weight bit for bit, and so does a BF16 save of a
// model loaded from BF16 weights (they are bfloat16 values already). With adapters merged, an
// F32 save's logits differ from the adapted model's by float32 rounding (the merged weight is
// rounded once where the adapted forward pass rounds A x, B(A x) and the sum), and a BF16 save
// rounds each merged weight to 8 significant bits (a relative error up to 2⁻⁹), which moves the
// logits by far more: save in F32 to keep the adapted model exactly.
//
// An adapter value that is NaN or infinite is an error before anything is written; so is a
// merged weight that overflows, or is too large for float16 in an F16 save, when it is reached.
func (m *Model) Save(dir string, a *Adapters, dtype hf.DType) error {
	return m.save(dir, a, dtype, MaxShardSize)
}

func (m *Model) save(dir string, a *Adapters, dtype hf.DType, shardSize int64) error {
	root := m.base()
	switch {
	case a == nil:
		a = m.lora
	case m.lora != nil && a != m.lora:
		return errors.New("llm: Save: the model runs with other adapters: save from the model without adapters (WithAdapters(nil))")
	}
	if a != nil {
		if err := a.fits(root.cfg); err != nil {
			return fmt.Errorf("llm: Save: %w", err)
		}
		for _, p := range a.params {
			if i := nonFinite(p.Data); i >= 0 {
				return fmt.Errorf("llm: Save: %s: element %d is %v", p.Name, i, p.Data[i])
			}
		}
	}
	st, ok := saveTypes[dtype]
	if !ok {
		return fmt.Errorf("llm: Save: dtype %q is not F32, BF16 or F16", dtype)
	}
	cfg := root.Config()
	cfg.TorchDType = st.torch

	adapted := map[string]*adapter{}
	if a != nil {
		for l, mods := range a.layers {
			for mod, p := range mods {
				if p != nil {
					adapted[moduleWeight(l, mod)] = p
				}
			}
		}
	}

	// Shards take consecutive tensors; a new one starts where the next tensor would take the
	// current one past shardSize (a tensor larger than that gets a shard of its own).
	specs := cfg.Tensors()
	var shards [][]hf.TensorSpec
	var cur, total int64
	for _, s := range specs {
		if p, _, _ := root.slot(s.Name); p == nil {
			return fmt.Errorf("llm: Save: the model has no %s", s.Name) // cannot happen: Load checked
		}
		n := int64(hf.TensorInfo{Shape: s.Shape}.Len() * dtype.Size())
		if len(shards) == 0 || (cur > 0 && cur+n > shardSize) {
			shards, cur = append(shards, nil), 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], s)
		cur += n
		total += n
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := writeConfig(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt"}
	index := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, make(map[string]string, len(specs))}
	for k, group := range shards {
		file := hf.SingleFile
		if len(shards) > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(shards))
		}
		tensors := make(map[string]hf.Tensor, len(group))
		for _, s := range group {
			w, _ := root.tensor(s.Name) // one at a time: a projection held transposed is transposed back here
			if p := adapted[s.Name]; p != nil {
				w = p.merged(w, a.cfg.Scale())
			}
			if i := nonFinite(w); i >= 0 {
				return fmt.Errorf("llm: Save: %s: element %d is %v", s.Name, i, w[i])
			}
			if dtype == hf.F16 {
				for i, v := range w {
					if math.Abs(float64(v)) >= 65520 {
						return fmt.Errorf("llm: Save: %s: element %d (%v) is too large for float16", s.Name, i, v)
					}
				}
			}
			tensors[s.Name] = st.tensor(w, s.Shape...)
			index.WeightMap[s.Name] = file
		}
		if err := hf.WriteFile(filepath.Join(dir, file), tensors, meta); err != nil {
			return fmt.Errorf("llm: %w", err)
		}
	}
	if len(shards) == 1 {
		if err := removeIfExists(filepath.Join(dir, hf.IndexFile)); err != nil {
			return err
		}
	} else {
		data, err := json.MarshalIndent(index, "", "  ")
		if err != nil {
			return fmt.Errorf("llm: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, hf.IndexFile), append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("llm: %w", err)
		}
		if err := removeIfExists(filepath.Join(dir, hf.SingleFile)); err != nil {
			return err
		}
	}

	for _, name := range tokenizerFiles {
		if err := copyIfExists(filepath.Join(root.dir, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("llm: Save: %w", err)
		}
	}
	return nil
}

// Weights returns a copy of the base model's tensors (adapters not merged), by the names
// transformers saves them under, each row-major in the checkpoint's shape
// (hf.Config.Tensors). It is how another implementation of the same model, such as the GoMLX
// graphs of agrl/learn/hfgraph, takes the weights without a round trip through files.
func (m *Model) Weights() map[string][]float32 {
	root := m
	if m.root != nil {
		root = m.root
	}
	w := map[string][]float32{}
	for _, name := range root.names() {
		v, ok := root.tensor(name)
		if !ok {
			continue
		}
		if p, _, _ := root.slot(name); *p != nil { // the model's own slice: copied
			v = append([]float32(nil), v...)
		}
		w[name] = v
	}
	return w
}

// WeightsView is Weights without the copies: the model's own slices, which the caller must not
// modify (the model and every view sharing its weights read them). It is for loaders that copy
// the weights elsewhere (into a GoMLX store, say) without holding a third copy meanwhile.
// A projection the model holds transposed (Share) is transposed back into a new slice.
func (m *Model) WeightsView() map[string][]float32 {
	if m.root != nil {
		return m.root.weights()
	}
	return m.weights()
}

// weights maps the name of each of m's tensors, as transformers saves it, to its values in
// the checkpoint's layout (projections held transposed, Share, transposed back into new slices).
func (m *Model) weights() map[string][]float32 {
	names := m.names()
	w := make(map[string][]float32, len(names))
	for _, name := range names {
		if v, ok := m.tensor(name); ok {
			w[name] = v
		}
	}
	return w
}

// copyIfExists copies the file src to dst, if there is a src and it is not dst itself.
func copyIfExists(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer in.Close()
	si, err := in.Stat()
	if err != nil {
		return err
	}
	if si.IsDir() {
		return nil
	}
	if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
		return nil
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
