package learn

import (
	"fmt"
	"path/filepath"

	"agrl.dev/agrl"
	"agrl.dev/agrl/hf"
	"agrl.dev/internal/sysmem"
)

// A model too large for the machine is refused before its weights are read: reading them
// would take the memory until the kernel killed the process, with nothing said. The check
// counts only what a run cannot do without — the float32 copies of the weights held in Go
// memory — so a refused model could never have run here; one that passes may still need more
// (activations, the Go heap's slack: docs/llm.md, "Memory").

// usableMemory is the memory this process may use, in bytes (0: unknown, nothing checked);
// a variable so tests can set it.
var usableMemory = sysmem.Usable

// fullHostCopies is how many float32 copies of the weights full fine-tuning keeps in Go
// memory on the go backend: the trained weights (which the sampler reads in place,
// syncLive), their gradients summed over micro-batches, AdamW's two moments and the frozen
// pretrained model (the KL reference).
const fullHostCopies = 5

// checkModelFits returns an error when the model in dir, trained as s says, cannot fit in
// usable bytes of memory (usable 0: not checked). A config.json that cannot be read is left
// for the loader to report.
func checkModelFits(dir string, s agrl.PretrainedSpec, usable int64) error {
	if usable <= 0 {
		return nil
	}
	cfg, err := hf.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil
	}
	params := int64(cfg.NumParams())
	bc, err := ParseBackend(s.Backend)
	if err != nil {
		return nil // Validate has said so
	}
	copies, what := int64(1), "its weights in float32 (the host sampler's copy, kept on every backend)"
	if s.Full && bc.Name == "go" {
		copies = fullHostCopies
		what = fmt.Sprintf("%d float32 copies of its weights (the trained weights, their gradients, AdamW's two moments, the frozen reference)", fullHostCopies)
	}
	need := float64(params) * 4 * float64(copies)
	if !s.Full && s.LoRA.Validate() == nil { // (LoadConfig validated cfg)
		// The adapters, their gradients and AdamW's two moments, in float32.
		a := float64(s.LoRA.AdapterParams(cfg))
		need += a * 4 * 4
		what += fmt.Sprintf(", and its LoRA adapters at rank %d (%.2fM parameters: with their gradients and AdamW's moments, four float32 copies)", s.LoRA.Rank, a/1e6)
	}
	if need <= float64(usable) {
		return nil
	}
	hint := "a smaller model or LoRA rank, or a machine with more memory"
	if s.Full {
		hint = "LoRA adapters instead of -full (Full), a smaller model, or a machine with more memory"
	}
	return fmt.Errorf("agrl: %s (%.2fB parameters) does not fit this machine's memory: it needs at least %s, %.1f GiB, and this process may use %.1f GiB (the smaller of MemTotal and the cgroup's memory.max); use %s",
		dir, float64(params)/1e9, what, need/(1<<30), float64(usable)/(1<<30), hint)
}
