#!/usr/bin/env python3
"""Reference logits for agrl/llm's test checkpoints, from an independent PyTorch forward pass.

  /usr/bin/python3 scripts/llm_reference.py agrl/llm/testdata/*/

For each model directory (config.json plus model.safetensors, or model.safetensors.index.json
and its shards) this reads the weights, runs the decoder on a few fixed token sequences
(lengths 1, 3, 8 and 16, drawn from a generator seeded by the directory's name) in float64 and
in float32, and writes DIR/expected.json: the inputs, both sets of logits at every position
(rounded to 1e-7), how far the float32 logits are from the float64 ones, and RoPE's inverse
frequencies and attention factor (float64). agrl/llm's Go tests compare against that file
without Python.

The forward pass is written here from the architectures' published definitions, in plain
PyTorch: no transformers, no safetensors package (the header is parsed with json + struct).
It covers what agrl/llm supports: Llama 3.x / SmolLM2 (tied or untied embeddings, optional
attention and MLP biases), Qwen2/2.5 (q, k, v biases) and Qwen3 (per-head RMSNorm of q and k
before RoPE, explicit head_dim), with RoPE scaled as rope_scaling says (llama3, linear, yarn).

  embed -> for each layer:
             x += o_proj(attention(rope(q), rope(k), v))   q, k, v from rms_norm(x)
             x += down(silu(gate(h)) * up(h))               h = rms_norm(x)
        -> rms_norm -> lm_head (embed_tokens when tied)

Attention is causal softmax(q k^T / sqrt(head_dim)) v, each key-value head shared by
num_attention_heads / num_key_value_heads consecutive query heads. RoPE rotates dimension i of a
head with dimension i + head_dim/2 (the "rotate half" layout of Hugging Face checkpoints).

Needs torch (Debian: apt-get install -y python3-torch) and numpy; run with /usr/bin/python3.
"""

import json
import math
import os
import random
import struct
import sys
import zlib

import numpy as np
import torch

LENGTHS = (1, 3, 8, 16)
DECIMALS = 7


def read_safetensors(path):
    """The tensors of one safetensors file, as float64 numpy arrays."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            raw = f.read(end - begin)
            dtype = info["dtype"]
            if dtype == "F32":
                a = np.frombuffer(raw, dtype="<f4")
            elif dtype == "F16":
                a = np.frombuffer(raw, dtype="<f2")
            elif dtype == "BF16":
                # bfloat16 is the top half of a float32's bits.
                a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                raise ValueError(f"{path}: {name}: dtype {dtype} is not a float type")
            out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def read_weights(d):
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(weight_map.values())):
        for name, a in read_safetensors(os.path.join(d, shard)).items():
            if weight_map.get(name) != shard:
                raise ValueError(f"{shard}: {name} is not in the index under this shard")
            out[name] = a
    missing = set(weight_map) - set(out)
    if missing:
        raise ValueError(f"{d}: tensors in the index but in no shard: {sorted(missing)}")
    return out


class Config:
    def __init__(self, j):
        self.family = j["model_type"]
        if self.family not in ("llama", "qwen2", "qwen3"):
            raise ValueError(f"model_type {self.family!r} is not supported")
        self.vocab = j["vocab_size"]
        self.hidden = j["hidden_size"]
        self.layers = j["num_hidden_layers"]
        self.heads = j["num_attention_heads"]
        self.kv_heads = j.get("num_key_value_heads") or self.heads
        default_head_dim = 128 if self.family == "qwen3" else self.hidden // self.heads
        self.head_dim = j.get("head_dim") or default_head_dim
        self.eps = j.get("rms_norm_eps", 1e-6)
        self.theta = j.get("rope_theta", 10000.0)
        self.rope_scaling = j.get("rope_scaling")
        self.max_pos = j.get("max_position_embeddings")
        self.tied = j.get("tie_word_embeddings", False)
        if j.get("hidden_act", "silu") != "silu":
            raise ValueError("hidden_act must be silu")


def inv_freq(cfg, dtype):
    """RoPE's inverse frequencies theta^(-2i/d) and the factor cos and sin are multiplied by,
    with the config's rope_scaling: llama3 (Llama 3.1), linear, or yarn."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.theta ** (torch.arange(0, d, 2, dtype=torch.int64).to(dtype) / d))
    s = cfg.rope_scaling
    kind = s and (s.get("rope_type") or s.get("type"))
    if kind in (None, "default"):
        return inv, 1.0
    if kind == "linear":
        return inv / s["factor"], 1.0
    if kind == "yarn":
        return yarn(cfg, inv)
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not supported")
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    # Short wavelengths (< old/high) stay; long ones (> old/low) are divided by factor; the
    # band between is a linear blend whose weight t goes from 0 at old/low to 1 at old/high.
    t = (old / wavelen - low) / (high - low)
    blended = (1 - t) * inv / factor + t * inv
    out = torch.where(wavelen > old / low, inv / factor, blended)
    return torch.where(wavelen < old / high, inv, out), 1.0


def yarn(cfg, inv):
    """YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language
    Models", section 3): NTK-by-parts interpolation plus an attention temperature.

    Over the original context L a frequency pair with inverse frequency f turns r = L f / 2pi
    times. Pairs with r > beta_fast keep f, pairs with r < beta_slow get f / factor, and the
    pairs between blend the two linearly in the pair index. The band's ends are the pair
    indices where r equals beta_fast and beta_slow: solving L theta^(-2i/d) / 2pi = r for i,
    i(r) = d ln(L / (2 pi r)) / (2 ln theta), floored and ceiled unless truncate is false, kept
    in [0, d - 1]. The temperature multiplies cos and sin by 0.1 ln(factor) + 1 (the paper's
    sqrt(1/t)), or by attention_factor, or, with DeepSeek's mscale and mscale_all_dim, by
    the ratio of 0.1 m ln(factor) + 1 for the two."""
    s, d = cfg.rope_scaling, cfg.head_dim
    factor = s["factor"]
    L = s.get("original_max_position_embeddings") or cfg.max_pos
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def pair(r):
        return d * math.log(L / (2 * math.pi * r)) / (2 * math.log(cfg.theta))

    lo, hi = pair(beta_fast), pair(beta_slow)
    if s.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    i = torch.arange(d // 2, dtype=inv.dtype)
    ramp = ((i - lo) / (hi - lo)).clamp(0, 1)  # 0: keep f, 1: f / factor
    out = inv * (1 - ramp) + inv / factor * ramp

    def m(k):
        return 1.0 if factor <= 1 else 0.1 * k * math.log(factor) + 1.0

    att = s.get("attention_factor")
    if att is None:
        mscale, mscale_all = s.get("mscale"), s.get("mscale_all_dim")
        att = m(mscale) / m(mscale_all) if mscale and mscale_all else m(1)
    return out, att


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, cos, sin):
    """RoPE on x [..., T, d]: the first half of each head pairs with the second half."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def logits(cfg, W, ids, dtype, lora=None):
    """Logits [T, vocab] for the token ids, computed in dtype throughout.

    lora, if given, maps a projection (such as "model.layers.0.self_attn.q_proj") to (A, B,
    scale): that projection then adds scale * B (A x) to its output, after the bias, as an
    unmerged LoRA layer does (see scripts/lora_reference.py)."""
    w = lambda name: W[name].to(dtype)
    opt = lambda name: W[name].to(dtype) if name in W else None

    def linear(x, name):
        y = x @ w(name + ".weight").T
        b = opt(name + ".bias")
        y = y if b is None else y + b
        if lora and name in lora:
            A, B, scale = lora[name]
            y = y + ((x @ A.to(dtype).T) @ B.to(dtype).T) * scale
        return y

    T, D = len(ids), cfg.head_dim
    pos = torch.arange(T, dtype=torch.int64).to(dtype)
    inv, att = inv_freq(cfg, dtype)
    freqs = torch.outer(pos, inv)  # [T, D/2]
    ang = torch.cat((freqs, freqs), dim=-1)  # [T, D]: angle i serves dims i and i + D/2
    cos, sin = ang.cos() * att, ang.sin() * att
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal: the future
    group = cfg.heads // cfg.kv_heads

    x = w("model.embed_tokens.weight")[torch.tensor(ids, dtype=torch.int64)]  # [T, hidden]
    for l in range(cfg.layers):
        p = f"model.layers.{l}."
        h = rms_norm(x, w(p + "input_layernorm.weight"), cfg.eps)
        q = linear(h, p + "self_attn.q_proj").view(T, cfg.heads, D).transpose(0, 1)  # [H, T, D]
        k = linear(h, p + "self_attn.k_proj").view(T, cfg.kv_heads, D).transpose(0, 1)  # [KV, T, D]
        v = linear(h, p + "self_attn.v_proj").view(T, cfg.kv_heads, D).transpose(0, 1)
        if cfg.family == "qwen3":
            q = rms_norm(q, w(p + "self_attn.q_norm.weight"), cfg.eps)
            k = rms_norm(k, w(p + "self_attn.k_norm.weight"), cfg.eps)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # KV head j serves query heads j*group ... (j+1)*group - 1.
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(D)  # [H, T, T]
        scores = scores.masked_fill(causal, float("-inf"))
        att = torch.softmax(scores, dim=-1) @ v  # [H, T, D]
        x = x + linear(att.transpose(0, 1).reshape(T, cfg.heads * D), p + "self_attn.o_proj")

        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), cfg.eps)
        g, u = linear(h, p + "mlp.gate_proj"), linear(h, p + "mlp.up_proj")
        x = x + linear(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")

    x = rms_norm(x, w("model.norm.weight"), cfg.eps)
    head = w("model.embed_tokens.weight") if cfg.tied else w("lm_head.weight")
    return x @ head.T


def sequences(cfg, seed):
    rng = random.Random(seed)
    return [[rng.randrange(cfg.vocab) for _ in range(n)] for n in LENGTHS]


def fmt_rows(rows):
    return "[\n" + ",\n".join(
        "        [" + ",".join(repr(round(float(v), DECIMALS)) for v in row) + "]" for row in rows
    ) + "\n      ]"


def main(dirs):
    if not dirs:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    for d in dirs:
        if not os.path.exists(os.path.join(d, "config.json")):
            print(f"{d}: skipped (no config.json: an adapter, see scripts/lora_reference.py)")
            continue
        with open(os.path.join(d, "config.json")) as f:
            cfg = Config(json.load(f))
        W = {name: torch.from_numpy(a) for name, a in read_weights(d).items()}
        seqs = sequences(cfg, seed=zlib.crc32(os.path.basename(os.path.normpath(d)).encode()))
        parts, worst = [], 0.0
        inv64, att = inv_freq(cfg, torch.float64)
        inv64 = inv64.tolist()
        for ids in seqs:
            with torch.no_grad():
                l64 = logits(cfg, W, ids, torch.float64)
                l32 = logits(cfg, W, ids, torch.float32)
            worst = max(worst, (l32.double() - l64).abs().max().item())
            parts.append(
                '    {\n      "ids": %s,\n      "float64": %s,\n      "float32": %s\n    }'
                % (json.dumps(ids), fmt_rows(l64.tolist()), fmt_rows(l32.tolist()))
            )
        text = (
            "{\n"
            f'  "generated_by": "scripts/llm_reference.py",\n'
            f'  "torch": {json.dumps(torch.__version__)},\n'
            f'  "decimals": {DECIMALS},\n'
            f'  "max_abs_float32_vs_float64": {worst:.3g},\n'
            f'  "rope_inv_freq": {json.dumps([float(v) for v in inv64])},\n'
            f'  "rope_attention_factor": {att!r},\n'
            '  "sequences": [\n' + ",\n".join(parts) + "\n  ]\n}\n"
        )
        json.loads(text)  # well-formed
        with open(os.path.join(d, "expected.json"), "w") as f:
            f.write(text)
        print(f"{d}: {len(seqs)} sequences, float32 vs float64 max |diff| {worst:.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
