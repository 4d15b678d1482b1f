#!/usr/bin/env python3
"""The PyTorch peer of agrl/learn's TestLLMThroughput: the same decoder at the same real shape,
with random weights, timed the same way; prints one JSON line with the same keys.

  /usr/bin/python3 scripts/bench_llm_peer.py smollm2-135m      # or qwen3-0.6b, qwen2.5-0.5b
  /usr/bin/python3 scripts/bench_llm_peer.py smollm2-135m full # the train step fine-tunes every weight

  prefill  tokens/s of the forward pass over a 256-token prompt into a KV cache (after a
           16-token warm-up pass)
  decode   tokens/s of 32 single-token steps after it (batch 1; the better of one thread and
           all threads, reported as decode_threads)
  decode_batch8  tokens/s of 32 steps of 8 sequences decoded together (one KV cache of batch
           8, after a 64-token prompt each; all threads)
  score    tokens/s of the per-token log-probs of 4 sequences of 256 tokens (no gradient),
           after a warm-up call
  train    tokens/s of one LoRA optimizer step (rank 16, alpha 32, every projection, frozen
           base) on 4 sequences of 256 tokens: forward, log-softmax of the targets, a
           policy-gradient loss, backward, AdamW — the median of 5 steps after a warm-up step;
           with "full", every weight is trained instead (embeddings, projections, biases,
           norms), as agrl's TestLLMThroughput does with AGRL_BENCH_FULL=1

The decoder is written here in plain PyTorch from the architectures' definitions (RMSNorm,
rotate-half RoPE, grouped-query causal attention, SwiGLU, Qwen2's q/k/v biases, Qwen3's q/k
norms, tied embeddings), float32, torch.set_num_threads(os.cpu_count()). Needs Debian's
python3-torch (1.13: no fused attention kernel, which transformers would not use on the CPU
for this either), installed with apt-get when missing; OpenBLAS runs with its best kernels for
this CPU, not the ones this workplace's OPENBLAS_CORETYPE pins (scripts/torch_peer.py: the JSON
line's openblas_coretype says which). Run both side by side with `make bench-llm`
(scripts/bench_llm.sh).
"""

import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import ensure_torch, openblas_coretype, reexec_in_torch_env  # noqa: E402

if __name__ == "__main__":
    # OpenBLAS's variables are read when torch loads it: set them (torch_peer.py) first.
    ensure_torch()
    reexec_in_torch_env()

import torch  # noqa: E402

SHAPES = {
    "smollm2-135m": dict(family="llama", vocab=49152, hidden=576, inter=1536, layers=30, heads=9, kv=3, head_dim=64,
                         eps=1e-5, theta=100000.0, tied=True),
    "qwen3-0.6b": dict(family="qwen3", vocab=151936, hidden=1024, inter=3072, layers=28, heads=16, kv=8, head_dim=128,
                       eps=1e-6, theta=1000000.0, tied=True),
    "qwen2.5-0.5b": dict(family="qwen2", vocab=151936, hidden=896, inter=4864, layers=24, heads=14, kv=2, head_dim=64,
                         eps=1e-6, theta=1000000.0, tied=True),
}
PROMPT, DECODE, BATCH, SEQ, RANK, ALPHA = 256, 32, 4, 256, 16, 32.0


class Linear:
    """A frozen weight [out, in] (plus bias) with an optional LoRA adapter."""

    def __init__(self, inp, out, bias, g):
        self.w = torch.randn(out, inp, generator=g) * 0.02
        self.b = torch.randn(out, generator=g) * 0.02 if bias else None
        self.a = self.bb = None

    def add_lora(self, g):
        self.a = (torch.rand(RANK, self.w.shape[1], generator=g) * 2 - 1) / math.sqrt(self.w.shape[1])
        self.a.requires_grad_(True)
        self.bb = torch.zeros(self.w.shape[0], RANK, requires_grad=True)
        return [self.a, self.bb]

    def __call__(self, x):
        y = torch.nn.functional.linear(x, self.w, self.b)
        if self.a is not None:
            y = y + (ALPHA / RANK) * torch.nn.functional.linear(torch.nn.functional.linear(x, self.a), self.bb)
        return y


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Model:
    def __init__(self, c, g):
        self.c = c
        h, d = c["hidden"], c["head_dim"]
        self.embed = torch.randn(c["vocab"], h, generator=g) * 0.02
        self.layers = []
        for _ in range(c["layers"]):
            bias = c["family"] == "qwen2"
            L = dict(q=Linear(h, c["heads"] * d, bias, g), k=Linear(h, c["kv"] * d, bias, g),
                     v=Linear(h, c["kv"] * d, bias, g), o=Linear(c["heads"] * d, h, False, g),
                     gate=Linear(h, c["inter"], False, g), up=Linear(h, c["inter"], False, g),
                     down=Linear(c["inter"], h, False, g), n1=torch.ones(h), n2=torch.ones(h))
            if c["family"] == "qwen3":
                L["qn"], L["kn"] = torch.ones(d), torch.ones(d)
            self.layers.append(L)
        self.norm = torch.ones(h)
        inv = 1.0 / (c["theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        pos = torch.arange(8192, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat([pos, pos], -1)
        self.cos, self.sin = emb.cos().float(), emb.sin().float()

    def lora_params(self):
        ps = []
        g = torch.Generator().manual_seed(3)
        for L in self.layers:
            for k in ("q", "k", "v", "o", "gate", "up", "down"):
                ps += L[k].add_lora(g)
        return ps

    def all_params(self):
        """Every weight, made trainable (full fine-tuning)."""
        ps = [self.embed, self.norm]
        for L in self.layers:
            for k, v in L.items():
                if isinstance(v, Linear):
                    ps += [v.w] + ([v.b] if v.b is not None else [])
                else:
                    ps.append(v)
        for p in ps:
            p.requires_grad_(True)
        return ps

    def forward(self, ids, cache=None):
        """ids [B, T]; cache: a list of (k, v) per layer, extended in place; returns logits."""
        c = self.c
        B, T = ids.shape
        d, nh, nkv = c["head_dim"], c["heads"], c["kv"]
        start = 0 if cache is None or not cache else cache[0][0].shape[2]
        cos, sin = self.cos[start:start + T], self.sin[start:start + T]

        def rope(x):
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        x = self.embed[ids]
        for li, L in enumerate(self.layers):
            hN = rms(x, L["n1"], c["eps"])
            q = L["q"](hN).view(B, T, nh, d).transpose(1, 2)
            k = L["k"](hN).view(B, T, nkv, d).transpose(1, 2)
            v = L["v"](hN).view(B, T, nkv, d).transpose(1, 2)
            if "qn" in L:
                q, k = rms(q, L["qn"], c["eps"]), rms(k, L["kn"], c["eps"])
            q, k = rope(q), rope(k)
            if cache is not None:
                if len(cache) <= li:
                    cache.append((k, v))
                else:
                    pk, pv = cache[li]
                    k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
                    cache[li] = (k, v)
            rep = nh // nkv
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            s = q @ k.transpose(-1, -2) / math.sqrt(d)
            S = k.shape[2]
            mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            s = s.masked_fill(~mask, float("-inf"))
            a = torch.softmax(s, -1) @ v
            x = x + L["o"](a.transpose(1, 2).reshape(B, T, nh * d))
            hN = rms(x, L["n2"], c["eps"])
            x = x + L["down"](torch.nn.functional.silu(L["gate"](hN)) * L["up"](hN))
        return rms(x, self.norm, c["eps"]) @ self.embed.t()


def main():
    shape = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    c = SHAPES[shape]
    torch.set_num_threads(os.cpu_count())
    g = torch.Generator().manual_seed(1)
    m = Model(c, g)
    ids = torch.randint(0, c["vocab"], (1, PROMPT), generator=g)
    with torch.no_grad():
        m.forward(ids[:, :16], [])  # warm-up, not timed (as in the Go test)
        cache = []
        t = time.perf_counter()
        m.forward(ids, cache)
        prefill = PROMPT / (time.perf_counter() - t)
        # Batch-1 decoding is faster on one thread than on two here (OpenBLAS's threads cost
        # more than they share on matrix-vector products): PyTorch gets the better of the two.
        decode, decode_threads = 0.0, 0
        for threads in sorted({1, os.cpu_count()}):
            torch.set_num_threads(threads)
            c2 = [(k.clone(), v.clone()) for k, v in cache]
            t = time.perf_counter()
            for _ in range(DECODE):
                m.forward(torch.randint(0, c["vocab"], (1, 1), generator=g), c2)
            d = DECODE / (time.perf_counter() - t)
            if d > decode:
                decode, decode_threads = d, threads
        torch.set_num_threads(os.cpu_count())
        c8 = []
        m.forward(torch.randint(0, c["vocab"], (8, 64), generator=g), c8)
        t = time.perf_counter()
        for _ in range(DECODE):
            m.forward(torch.randint(0, c["vocab"], (8, 1), generator=g), c8)
        decode8 = 8 * DECODE / (time.perf_counter() - t)
        del c8
    batch = torch.randint(0, c["vocab"], (BATCH, SEQ), generator=g)
    with torch.no_grad():
        for i in range(2):  # the first call warms up, as in the Go test
            t = time.perf_counter()
            logits = m.forward(batch[:, :-1])
            torch.log_softmax(logits, -1).gather(-1, batch[:, 1:, None])
            score = BATCH * (SEQ - 1) / (time.perf_counter() - t)
        del logits
    full = len(sys.argv) > 2 and sys.argv[2] == "full"
    params = m.all_params() if full else m.lora_params()
    opt = torch.optim.AdamW(params, lr=1e-5)
    adv = torch.randn(BATCH, SEQ - 1, generator=g)
    secs = []
    for i in range(6):
        t = time.perf_counter()
        logits = m.forward(batch[:, :-1])
        logp = torch.log_softmax(logits, -1).gather(-1, batch[:, 1:, None]).squeeze(-1)
        ratio = torch.exp(logp - logp.detach())
        loss = -(ratio * adv).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i > 0:
            secs.append(time.perf_counter() - t)
    train = BATCH * (SEQ - 1) / statistics.median(secs)
    print(json.dumps({"impl": "torch " + torch.__version__, "shape": shape, "threads": torch.get_num_threads(),
                      "openblas_coretype": openblas_coretype(),
                      "prefill_tokens_per_s": round(prefill, 1), "decode_tokens_per_s": round(decode, 1), "decode_threads": decode_threads, "decode_batch8_tokens_per_s": round(decode8, 1), "score_tokens_per_s": round(score, 1),
                      "train_tokens_per_s": round(train, 1), ("trainable_params" if full else "lora_params"): sum(p.numel() for p in params)}))


if __name__ == "__main__":
    main()
