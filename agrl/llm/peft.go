package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"agrl.dev/agrl/hf"
)

// The files of a PEFT adapter directory, as PEFT's save_pretrained names them.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// Save writes the adapters to dir (created if needed) as PEFT saves a LoRA adapter, for
// PeftModel.from_pretrained, vLLM and the like to load:
//
//   - adapter_config.json: peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha,
//     lora_dropout, target_modules, base_model_name_or_path (BaseModel, null if ""), and the options that
//     pin this package's arithmetic to their defaults: bias "none", fan_in_fan_out,
//     use_rslora and use_dora false, no modules_to_save, layers_to_transform, rank_pattern or
//     alpha_pattern; init_lora_weights true and inference_mode true, as PEFT saves them. Keys
//     sorted, indented by two spaces.
//   - adapter_model.safetensors: every Param under its PEFT name, as F32, with metadata
//     {"format": "pt"}.
//
// The values are written exactly, so LoadAdapters gives back the same adapters bit for bit. An
// adapter value that is NaN or infinite is an error, and nothing is written.
func (a *Adapters) Save(dir string) error {
	tensors := make(map[string]hf.Tensor, len(a.params))
	for _, p := range a.params {
		if i := nonFinite(p.Data); i >= 0 {
			return fmt.Errorf("llm: saving adapters: %s: element %d is %v", p.Name, i, p.Data[i])
		}
		tensors[p.Name] = hf.F32Tensor(p.Data, p.Shape...)
	}
	c := a.cfg
	var base any // null when unknown, as PEFT writes it
	if a.BaseModel != "" {
		base = a.BaseModel
	}
	j := map[string]any{
		"peft_type":               "LORA",
		"task_type":               "CAUSAL_LM",
		"base_model_name_or_path": base,
		"revision":                nil,
		"inference_mode":          true,
		"r":                       c.Rank,
		"lora_alpha":              c.Alpha,
		"lora_dropout":            c.Dropout,
		"target_modules":          c.TargetModules,
		"bias":                    "none",
		"fan_in_fan_out":          false,
		"use_rslora":              false,
		"use_dora":                false,
		"init_lora_weights":       true,
		"modules_to_save":         nil,
		"layers_to_transform":     nil,
		"layers_pattern":          nil,
		"rank_pattern":            map[string]any{},
		"alpha_pattern":           map[string]any{},
	}
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, AdapterConfigFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	if err := hf.WriteFile(filepath.Join(dir, AdapterWeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("llm: %w", err)
	}
	return nil
}

// nonFinite returns the index of the first NaN or infinite value of v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}

// LoadAdapters reads the PEFT LoRA adapter in dir (adapter_config.json and
// adapter_model.safetensors) for the model m, checking it against m:
//
//   - the config must be a LoRA one (peft_type "LORA") with a valid r, lora_alpha,
//     lora_dropout and a list of target_modules from LoRAModules, and must leave at their
//     defaults the options that would change the arithmetic (use_rslora, use_dora, bias,
//     fan_in_fan_out, lora_bias, rank_pattern, alpha_pattern, layers_to_transform,
//     modules_to_save, layer_replication, target_parameters, trainable_token_indices);
//   - the weights must hold exactly a lora_A [r, in] and a lora_B [out, r] for every targeted
//     projection of every layer of m, as F32, F16 or BF16, none NaN or infinite.
//
// Every problem is reported in one error, each tensor by name. The adapters' BaseModel is the
// config's base_model_name_or_path; m is unchanged (run them with m.WithAdapters).
func LoadAdapters(dir string, m *Model) (*Adapters, error) {
	if m == nil {
		return nil, errors.New("llm: LoadAdapters: nil model")
	}
	cfgPath := filepath.Join(dir, AdapterConfigFile)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("llm: LoadAdapters: %w", err)
	}
	cfg, baseModel, err := parseAdapterConfig(data)
	if err != nil {
		return nil, fmt.Errorf("llm: LoadAdapters: %s: %w", cfgPath, err)
	}
	wPath := filepath.Join(dir, AdapterWeightsFile)
	if _, err := os.Stat(wPath); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, "adapter_model.bin")); err == nil {
			return nil, fmt.Errorf("llm: LoadAdapters: %s has adapter_model.bin but no %s: only safetensors weights are read", dir, AdapterWeightsFile)
		}
	}
	f, err := hf.Open(wPath)
	if err != nil {
		return nil, fmt.Errorf("llm: LoadAdapters: %w", err)
	}
	defer f.Close()

	a := newAdapters(m.base().cfg, cfg, baseModel)
	var problems []string
	expected := map[string]int{}
	for i, p := range a.params {
		expected[p.Name] = i
	}
	for _, name := range f.Names() {
		if _, ok := expected[name]; !ok {
			info, _ := f.Info(name)
			problems = append(problems, fmt.Sprintf("unexpected %s %s %v%s", name, info.DType, info.Shape, a.whyUnexpected(name)))
		}
	}
	for _, p := range a.params {
		info, ok := f.Info(p.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing %s %v", p.Name, p.Shape))
		case !slices.Equal(info.Shape, p.Shape):
			problems = append(problems, fmt.Sprintf("%s: shape %v, want %v (r = %d in %s)", p.Name, info.Shape, p.Shape, cfg.Rank, AdapterConfigFile))
		case !info.DType.Float():
			problems = append(problems, fmt.Sprintf("%s: dtype %s, want F32, F16 or BF16", p.Name, info.DType))
		default:
			v, err := f.Float32s(p.Name)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if i := nonFinite(v); i >= 0 {
				problems = append(problems, fmt.Sprintf("%s: element %d is %v", p.Name, i, v[i]))
				continue
			}
			copy(p.Data, v)
		}
	}
	if len(problems) > 0 {
		const most = 20
		n := len(problems)
		if n > most {
			problems = append(problems[:most], fmt.Sprintf("and %d more", n-most))
		}
		noun := "problems"
		if n == 1 {
			noun = "problem"
		}
		return nil, fmt.Errorf("llm: LoadAdapters: %s does not fit the model (%d %s):\n\t%s",
			wPath, n, noun, strings.Join(problems, "\n\t"))
	}
	return a, nil
}

// peftName matches the name of a LoRA matrix in a PEFT adapter of these decoders.
var peftName = regexp.MustCompile(`^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_([AB])\.weight$`)

// whyUnexpected explains, where it can, why the named tensor is not one of a's.
func (a *Adapters) whyUnexpected(name string) string {
	sub := peftName.FindStringSubmatch(name)
	if sub == nil {
		return ""
	}
	mod := moduleIndex(sub[3])
	switch {
	case mod < 0:
		return fmt.Sprintf(" (%s is not a projection LoRA adapts)", sub[3])
	case !slices.Contains(a.cfg.TargetModules, sub[3]):
		return fmt.Sprintf(" (%s is not in target_modules %v)", sub[3], a.cfg.TargetModules)
	}
	var l int
	fmt.Sscan(sub[1], &l)
	if l >= len(a.layers) {
		return fmt.Sprintf(" (the model has %d layers)", len(a.layers))
	}
	group := "self_attn"
	if mod >= gateProj {
		group = "mlp"
	}
	return fmt.Sprintf(" (%s is in %s, not %s)", sub[3], group, sub[2])
}

// parseAdapterConfig reads a PEFT adapter_config.json, reporting every problem in one error.
func parseAdapterConfig(data []byte) (LoRAConfig, string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return LoRAConfig{}, "", err
	}
	var errs []error
	get := func(key string, v any) bool {
		r, ok := raw[key]
		if !ok || string(r) == "null" {
			return false
		}
		if err := json.Unmarshal(r, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			return false
		}
		return true
	}

	var peftType string
	if !get("peft_type", &peftType) || peftType != "LORA" {
		errs = append(errs, fmt.Errorf("peft_type is %s, want \"LORA\"", rawOr(raw["peft_type"], "missing")))
	}
	var c LoRAConfig
	if !get("r", &c.Rank) {
		errs = append(errs, errors.New("r is missing"))
	}
	if !get("lora_alpha", &c.Alpha) {
		errs = append(errs, errors.New("lora_alpha is missing"))
	}
	get("lora_dropout", &c.Dropout) // PEFT's default: 0
	if r, ok := raw["target_modules"]; ok && bytes.HasPrefix(bytes.TrimSpace(r), []byte(`"`)) {
		errs = append(errs, fmt.Errorf("target_modules is the pattern %s: only a list of module names is supported", r))
	} else if !get("target_modules", &c.TargetModules) {
		errs = append(errs, errors.New("target_modules is missing"))
	}
	var base string
	get("base_model_name_or_path", &base)

	// Options that change which weights are adapted or how: only their defaults are supported.
	for _, o := range []struct{ key, why string }{
		{"use_rslora", "rsLoRA's alpha/√r scaling"},
		{"use_dora", "DoRA"},
		{"fan_in_fan_out", "transposed (Conv1D) weights"},
		{"lora_bias", "LoRA biases"},
		{"bias", "trained biases"},
		{"rank_pattern", "per-module ranks"},
		{"alpha_pattern", "per-module alphas"},
		{"layers_to_transform", "adapting some layers only"},
		{"modules_to_save", "fully trained modules"},
		{"layer_replication", "replicated layers"},
		{"target_parameters", "adapted parameters"},
		{"trainable_token_indices", "trained token embeddings"},
	} {
		if r, ok := raw[o.key]; ok && !isDefault(r) {
			errs = append(errs, fmt.Errorf("%s is %s, which asks for %s: not supported", o.key, compact(r), o.why))
		}
	}
	if len(errs) == 0 {
		errs = c.problems()
	}
	if len(errs) > 0 {
		return LoRAConfig{}, "", errors.Join(errs...)
	}
	return c, base, nil
}

// isDefault reports whether a PEFT option holds its "off" value: null, false, "none", or an
// empty list or object.
func isDefault(r json.RawMessage) bool {
	switch compact(r) {
	case "null", "false", `"none"`, "[]", "{}":
		return true
	}
	return false
}

func compact(r json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, r); err != nil {
		return string(r)
	}
	return b.String()
}

func rawOr(r json.RawMessage, missing string) string {
	if r == nil {
		return missing
	}
	return compact(r)
}
