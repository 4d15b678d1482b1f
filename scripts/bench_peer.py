#!/usr/bin/env python3
"""agrl against PyTorch on the same CPU, side by side (make bench-peer).

Runs, in turn, agrl's Go benchmarks (BenchmarkTrain and BenchmarkSample in agrl/learn, simd
build) and the same model written in PyTorch (this file with --torch), ROUNDS times each,
A B A B, and prints each side's tokens/s (min-median-max over the rounds) and the agrl/PyTorch
ratio of every round. The shape is the issue's Tiny one: vocabulary 64, width 128, 2 layers,
4 heads, context 128, MLP 512, RoPE, pre-LayerNorm, no biases, ReLU, untied output layer.

  training: AdamW steps on 32 sequences of 128 tokens (cross-entropy on every next token)
  sampling: 64 sequences, a 16-token prompt, then 64 new tokens with a KV cache, temperature 1

PyTorch gets its best of 1 thread and all threads per measurement; agrl runs as `make bench` does.
Both sides time --steps steps (or samplings; 10) after the same warm-up: two training steps (agrl's first
compiles its graph, its second settles its buffers), one sampling.

PyTorch comes from Debian's python3-torch (installed with apt-get when missing). OpenBLAS 0.3.21
misdetects Sapphire Rapids-class Intel cores as "Prescott" (SSE3) and then runs many times
slower, so on an Intel CPU the PyTorch side runs with OPENBLAS_CORETYPE=SkylakeX, and elsewhere
without the OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE this workplace sets (scripts/torch_peer.py; in
that process only). It is a tool for people, not a test: machines are shared and noisy, so read the
ranges and the per-round ratios, and name the machine (printed first) with every number.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import PY, cpu_model, ensure_torch, openblas_coretype, torch_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The shape (must match benchLM in agrl/learn/bench_test.go).
VOCAB, WIDTH, LAYERS, HEADS, CONTEXT, MLP = 64, 128, 2, 4, 128, 512
TRAIN_BATCH, TRAIN_LEN = 32, 128
SAMPLE_BATCH, PROMPT, NEW = 64, 16, 64


# ---------------------------------------------------------------- the PyTorch side


def torch_bench(what, steps):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(1)
    torch.set_num_threads(int(os.environ.get("PEER_THREADS", os.cpu_count() or 1)))
    torch.set_num_interop_threads(1)
    hd = WIDTH // HEADS

    def rope_tables(n):
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
        return ang.cos(), ang.sin()

    cos_t, sin_t = rope_tables(CONTEXT)

    def rope(x, pos):  # x [B, H, T, hd]; pos: first position
        # Rotate-half form, as agrl's model: dimension i turns with i + hd/2 (contiguous halves
        # and one cat; the interleaved even/odd form with strided stores was slower here).
        c, s = cos_t[pos:pos + x.shape[2]], sin_t[pos:pos + x.shape[2]]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
            self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False)
            self.out = torch.nn.Linear(WIDTH, WIDTH, bias=False)
            self.up = torch.nn.Linear(WIDTH, MLP, bias=False)
            self.down = torch.nn.Linear(MLP, WIDTH, bias=False)

        def forward(self, x, pos=0, cache=None):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=-1)
            q, k, v = (z.view(b, t, HEADS, hd).transpose(1, 2) for z in (q, k, v))
            q, k = rope(q, pos), rope(k, pos)
            if cache is not None:  # preallocated [B, H, CONTEXT, hd] keys and values
                cache[0][:, :, pos:pos + t] = k
                cache[1][:, :, pos:pos + t] = v
                k, v = cache[0][:, :, :pos + t], cache[1][:, :, :pos + t]
            # Attention written out (PyTorch 1.13 has no fused scaled_dot_product_attention).
            scores = q @ k.transpose(-1, -2) * (hd ** -0.5)  # [B, H, t, pos+t]
            if t > 1:  # causal, offset by the tokens already cached
                mask = torch.ones(t, k.shape[2], dtype=torch.bool).tril(k.shape[2] - t)
                scores = scores.masked_fill(~mask, float("-inf"))
            a = torch.softmax(scores, dim=-1) @ v
            x = x + self.out(a.transpose(1, 2).reshape(b, t, WIDTH))
            return x + self.down(F.relu(self.up(self.ln2(x))))

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, WIDTH)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = torch.nn.LayerNorm(WIDTH)
            self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

        def forward(self, tokens, pos=0, caches=None):
            x = self.embed(tokens)
            for i, blk in enumerate(self.blocks):
                x = blk(x, pos, None if caches is None else caches[i])
            return self.head(self.ln(x))

    model = LM()
    if what == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
        data = torch.randint(12, VOCAB, (TRAIN_BATCH, TRAIN_LEN))

        def step():
            logits = model(data[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        step()  # warm-up: two steps, as agrl's benchmark (its second merges its arena's chunks)
        step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        # The Go benchmark's count: the targets, TRAIN_LEN − 1 per sequence.
        return steps * TRAIN_BATCH * (TRAIN_LEN - 1) / (time.perf_counter() - start)

    prompt = torch.randint(12, VOCAB, (SAMPLE_BATCH, PROMPT))
    gen = torch.Generator().manual_seed(1)

    @torch.no_grad()
    def sample():
        caches = [(torch.zeros(SAMPLE_BATCH, HEADS, CONTEXT, hd), torch.zeros(SAMPLE_BATCH, HEADS, CONTEXT, hd))
                  for _ in range(LAYERS)]
        logits = model(prompt, 0, caches)[:, -1]
        pos = PROMPT
        for i in range(NEW):
            logp = torch.log_softmax(logits, dim=-1)  # recorded per token, as agrl's sampler does
            nxt = torch.multinomial(logp.exp(), 1, generator=gen)
            if i < NEW - 1:
                logits = model(nxt, pos, caches)[:, -1]
                pos += 1

    sample()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        sample()
    # The Go benchmark's count: the sampled tokens.
    return steps * SAMPLE_BATCH * NEW / (time.perf_counter() - start)


# ---------------------------------------------------------------- the driver


def run_torch(what, steps):
    """PyTorch's best of 1 and all threads (on 2 shared cores its intra-op threads help the
    training step and often hurt the small sampling ops)."""
    best = 0.0
    for threads in sorted({1, os.cpu_count() or 1}):
        env = dict(torch_env(), PEER_THREADS=str(threads))
        out = subprocess.run([PY, os.path.abspath(__file__), "--torch", what, "--steps", str(steps)],
                             capture_output=True, text=True, env=env, check=True).stdout
        best = max(best, float(out.strip().splitlines()[-1]))
    return best


def run_go(binary, steps):
    out = subprocess.run([binary, "-test.run", "^$", "-test.bench", "^Benchmark(Sample|Train)$", "-test.benchtime", f"{steps}x"],
                         capture_output=True, text=True, cwd=os.path.join(ROOT, "agrl", "learn"), check=True).stdout
    rates = {}
    for line in out.splitlines():
        m = re.match(r"Benchmark(Sample|Train)\S*\s.*?([\d.]+) tokens/s", line)
        if m:
            rates[m.group(1).lower()] = float(m.group(2))
    if set(rates) != {"sample", "train"}:
        sys.exit("bench-peer: could not read the Go benchmarks' tokens/s:\n" + out)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="A B rounds (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (or samplings) per measurement, on both sides")
    ap.add_argument("--torch", choices=["train", "sample"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch:
        print(torch_bench(args.torch, args.steps))
        return
    ensure_torch()
    binary = os.path.join(ROOT, "bin", "learn-bench.test")
    env = dict(os.environ, GOEXPERIMENT="simd")
    subprocess.run(["go", "test", "-c", "-o", binary, "./agrl/learn/"], cwd=ROOT, env=env, check=True)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; PyTorch with OPENBLAS_CORETYPE={openblas_coretype()}")
    go = {"train": [], "sample": []}
    pt = {"train": [], "sample": []}
    for r in range(args.rounds):
        rates = run_go(binary, args.steps)
        for k in go:
            go[k].append(rates[k])
            pt[k].append(run_torch(k, args.steps))
        print(f"round {r + 1}: agrl train {go['train'][-1]:,.0f} sample {go['sample'][-1]:,.0f} | "
              f"PyTorch train {pt['train'][-1]:,.0f} sample {pt['sample'][-1]:,.0f} tokens/s", flush=True)

    def rng(v):
        return f"{min(v):,.0f}–{statistics.median(v):,.0f}–{max(v):,.0f}"

    print()
    print("| tokens/s (min–median–max) | agrl | PyTorch | agrl / PyTorch per round |")
    print("|---|---|---|---|")
    for k, label in (("train", f"training, {TRAIN_BATCH}×{TRAIN_LEN} tokens, AdamW"),
                     ("sample", f"KV-cache sampling, batch {SAMPLE_BATCH}")):
        ratios = ", ".join(f"{g / p:.2f}" for g, p in zip(go[k], pt[k]))
        print(f"| {label} | {rng(go[k])} | {rng(pt[k])} | {ratios} |")


if __name__ == "__main__":
    main()
