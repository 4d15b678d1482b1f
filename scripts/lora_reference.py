#!/usr/bin/env python3
"""Reference logits of a model with a LoRA adapter, from an independent PyTorch computation.

  /usr/bin/python3 scripts/lora_reference.py MODEL_DIR ADAPTER_DIR

MODEL_DIR is a model directory as scripts/llm_reference.py reads one; ADAPTER_DIR holds a LoRA
adapter in PEFT's format: adapter_config.json (peft_type "LORA", r, lora_alpha, target_modules)
and adapter_model.safetensors, whose tensors are named

  base_model.model.<weight name without ".weight">.lora_A.weight   [r, in]
  base_model.model.<weight name without ".weight">.lora_B.weight   [out, r]

for the weight [out, in] they adapt. This writes ADAPTER_DIR/expected.json in the format of
llm_reference.py (the same token sequences scheme, seeded by ADAPTER_DIR's name), with

  float64: the logits of the merged model, every adapted weight replaced by
           W + (lora_alpha / r) * B @ A, computed in float64 throughout;
  float32: the logits in float32 with the adapters unmerged, each adapted projection
           computing W x + b + (lora_alpha / r) * B (A x), as PEFT's LoRA layer does.

and how far the two are apart. The two ways are equal in exact arithmetic, so their agreement
checks this script as well as the Go code that compares against it (agrl/llm's TestLoRAReference).

Only plain LoRA is handled: a config asking for rsLoRA, DoRA, biases, per-module ranks or
alphas, or a subset of layers is refused. No peft or transformers package is used; the
safetensors files are parsed with json + struct (llm_reference.read_safetensors).

Needs torch (Debian: apt-get install -y python3-torch) and numpy; run with /usr/bin/python3.
"""

import json
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_reference as ref  # noqa: E402

# Options whose non-default values change the arithmetic; their defaults are falsy.
UNSUPPORTED = (
    "use_rslora", "use_dora", "fan_in_fan_out", "lora_bias", "rank_pattern", "alpha_pattern",
    "layers_to_transform", "modules_to_save", "layer_replication", "target_parameters",
    "trainable_token_indices",
)
PREFIX = "base_model.model."


def read_adapter(adapter_dir, W):
    """The adapter as {projection name: (A, B, scale)}, A and B float64 tensors, checked
    against the model's weights W."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        c = json.load(f)
    if c.get("peft_type") != "LORA":
        raise ValueError(f"peft_type {c.get('peft_type')!r} is not LORA")
    for key in UNSUPPORTED:
        if c.get(key):
            raise ValueError(f"{key} = {c[key]!r} is not supported")
    if c.get("bias", "none") != "none":
        raise ValueError(f"bias {c['bias']!r} is not supported")
    r, alpha, targets = c["r"], c["lora_alpha"], c["target_modules"]
    if not isinstance(targets, list):
        raise ValueError("target_modules must be a list")
    scale = alpha / r

    T = ref.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    lora = {}
    for name in sorted(T):
        if not (name.startswith(PREFIX) and name.endswith(".lora_A.weight")):
            if not name.endswith(".lora_B.weight"):
                raise ValueError(f"unexpected tensor {name}")
            continue
        proj = name[len(PREFIX) : -len(".lora_A.weight")]
        b_name = PREFIX + proj + ".lora_B.weight"
        if proj.rsplit(".", 1)[-1] not in targets:
            raise ValueError(f"{name}: {proj} is not a target module")
        if proj + ".weight" not in W or b_name not in T:
            raise ValueError(f"{name}: no {proj}.weight in the model or no {b_name}")
        out, inp = W[proj + ".weight"].shape
        A, B = torch.from_numpy(T[name]), torch.from_numpy(T[b_name])
        if tuple(A.shape) != (r, inp) or tuple(B.shape) != (out, r):
            raise ValueError(f"{proj}: A {tuple(A.shape)}, B {tuple(B.shape)} for W {(out, inp)}, r {r}")
        lora[proj] = (A, B, scale)
    if 2 * len(lora) != len(T):
        raise ValueError("lora_B tensors without their lora_A")
    return c, lora


def main(args):
    if len(args) != 2:
        sys.exit(__doc__)
    model_dir, adapter_dir = args
    torch.set_num_threads(1)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = ref.Config(json.load(f))
    W = {name: torch.from_numpy(a) for name, a in ref.read_weights(model_dir).items()}
    c, lora = read_adapter(adapter_dir, W)

    merged = dict(W)
    for proj, (A, B, scale) in lora.items():
        merged[proj + ".weight"] = W[proj + ".weight"] + scale * (B @ A)

    seqs = ref.sequences(cfg, seed=zlib.crc32(os.path.basename(os.path.normpath(adapter_dir)).encode()))
    parts, worst, base_gap = [], 0.0, 0.0
    for ids in seqs:
        with torch.no_grad():
            l64 = ref.logits(cfg, merged, ids, torch.float64)
            l32 = ref.logits(cfg, W, ids, torch.float32, lora=lora)
            base = ref.logits(cfg, W, ids, torch.float64)
        worst = max(worst, (l32.double() - l64).abs().max().item())
        base_gap = max(base_gap, (base - l64).abs().max().item())
        parts.append(
            '    {\n      "ids": %s,\n      "float64": %s,\n      "float32": %s\n    }'
            % (json.dumps(ids), ref.fmt_rows(l64.tolist()), ref.fmt_rows(l32.tolist()))
        )
    text = (
        "{\n"
        f'  "generated_by": "scripts/lora_reference.py",\n'
        f'  "torch": {json.dumps(torch.__version__)},\n'
        f'  "decimals": {ref.DECIMALS},\n'
        f'  "r": {c["r"]},\n'
        f'  "lora_alpha": {json.dumps(c["lora_alpha"])},\n'
        f'  "target_modules": {json.dumps(c["target_modules"])},\n'
        f'  "max_abs_float32_unmerged_vs_float64_merged": {worst:.3g},\n'
        f'  "max_abs_adapted_vs_base": {base_gap:.3g},\n'
        '  "sequences": [\n' + ",\n".join(parts) + "\n  ]\n}\n"
    )
    json.loads(text)  # well-formed
    with open(os.path.join(adapter_dir, "expected.json"), "w") as f:
        f.write(text)
    print(
        f"{adapter_dir}: {len(lora)} adapted projections, {len(seqs)} sequences, "
        f"float32 unmerged vs float64 merged max |diff| {worst:.3g}, adapted vs base {base_gap:.3g}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
