#!/usr/bin/env python3
"""Check agrl's test checkpoints against Hugging Face transformers and PEFT themselves.

  python3 scripts/transformers_check.py [--out FILE.json]

scripts/llm_reference.py is our own PyTorch forward pass, written from the architectures'
published definitions; its logits are committed as agrl/llm/testdata/*/expected.json, and agrl's
Go forward pass, graphs and sampler are tested against them. This script closes the loop where
transformers is installed (none of our CPU machines can install it; the GPU machines lent to
some sessions have transformers, PEFT and torch): it loads every model directory of
agrl/llm/testdata with transformers' AutoModelForCausalLM in float64 (Llama with llama3 and
YaRN RoPE scaling, Qwen2 with and without YaRN, Qwen3, a sharded checkpoint), runs the token
sequences of its expected.json, and compares the logits with the committed float64 ones; then it
loads the qwen3-lora adapter onto qwen3 with PEFT and does the same. It also checks that
transformers loads the repository's testdata/tiny-qwen3 (the tutorial's fixture).

transformers computes some parts in float32 even in a float64 model (RoPE's angles, RMSNorm's
variance, the eager softmax), so the two differ by about 1e-6; the tolerance is 1e-4, the Go
tests' own. It needs transformers 5 (or 4.57+): older releases replaced the YaRN factor by
max_position_embeddings / original_max_position_embeddings (5 instead of 4 for qwen2-yarn) and
would fail that fixture. The exit status is 0 when every check
passes, 1 when one differs or fails to load, 2 when transformers or torch is missing. The
summary (one line per check, and the versions) goes to stdout and, with --out, to a JSON file.
"""

import argparse
import json
import os
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "agrl", "llm", "testdata")
TOL = 1e-4


def load_model(transformers, torch, path):
    """AutoModelForCausalLM in float64 with eager attention (transformers 5 calls the dtype
    argument dtype, 4 torch_dtype)."""
    auto = transformers.AutoModelForCausalLM
    try:
        m = auto.from_pretrained(path, dtype=torch.float64, attn_implementation="eager")
    except TypeError:
        m = auto.from_pretrained(path, torch_dtype=torch.float64, attn_implementation="eager")
    got = next(m.parameters()).dtype
    if got != torch.float64:  # transformers < 4.56 ignores dtype= rather than refusing it
        m = auto.from_pretrained(path, torch_dtype=torch.float64, attn_implementation="eager")
        got = next(m.parameters()).dtype
    if got != torch.float64:
        raise ValueError(f"the model loaded in {got}, not float64")
    return m.eval()


def compare(torch, model, expected):
    """The largest |logit - expected float64 logit| over every sequence and position."""
    worst = 0.0
    for s in expected["sequences"]:
        with torch.no_grad():
            got = model(input_ids=torch.tensor([s["ids"]], dtype=torch.long)).logits[0]
        want = torch.tensor(s["float64"], dtype=torch.float64)
        if got.shape != want.shape:
            raise ValueError(f"logits of shape {tuple(got.shape)}, want {tuple(want.shape)}")
        worst = max(worst, (got.double() - want).abs().max().item())
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the summary to this JSON file")
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"transformers-check: {e}; nothing to check here", file=sys.stderr)
        sys.exit(2)
    try:
        import peft
    except ImportError:
        peft = None
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    results = []

    def check(name, fn):
        try:
            worst = fn()
            ok = worst <= TOL
            results.append({"check": name, "max_abs_diff": worst, "ok": ok})
            print(f"{'ok  ' if ok else 'FAIL'} {name}: max |Δlogit| {worst:.3g} (tolerance {TOL:g})")
        except Exception as e:  # a load or shape failure is a failed check, with its reason
            results.append({"check": name, "error": f"{type(e).__name__}: {e}", "ok": False})
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3, file=sys.stderr)

    models = sorted(
        d for d in os.listdir(TESTDATA) if os.path.exists(os.path.join(TESTDATA, d, "config.json"))
    )
    for d in models:
        path = os.path.join(TESTDATA, d)
        with open(os.path.join(path, "expected.json")) as f:
            expected = json.load(f)
        check(f"transformers {d}", lambda: compare(torch, load_model(transformers, torch, path), expected))

    lora = os.path.join(TESTDATA, "qwen3-lora")
    if peft is None:
        results.append({"check": "peft qwen3-lora", "error": "peft is not installed", "ok": False})
        print("FAIL peft qwen3-lora: peft is not installed")
    else:
        with open(os.path.join(lora, "expected.json")) as f:
            expected = json.load(f)

        def adapted():
            base = load_model(transformers, torch, os.path.join(TESTDATA, "qwen3"))
            model = peft.PeftModel.from_pretrained(base, lora).eval()
            return compare(torch, model, expected)

        check("peft qwen3-lora on qwen3", adapted)

    tiny = os.path.join(ROOT, "testdata", "tiny-qwen3")

    def loads_tiny():
        m = load_model(transformers, torch, tiny)
        with torch.no_grad():
            out = m(input_ids=torch.tensor([[1, 2, 3]])).logits
        if not torch.isfinite(out).all():
            raise ValueError("non-finite logits")
        return 0.0

    check("transformers testdata/tiny-qwen3 loads", loads_tiny)

    summary = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": getattr(peft, "__version__", None),
        "checks": results,
        "ok": all(r["ok"] for r in results),
    }
    print(f"torch {summary['torch']}, transformers {summary['transformers']}, peft {summary['peft']}: "
          f"{sum(r['ok'] for r in results)} of {len(results)} checks pass")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
