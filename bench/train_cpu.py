#!/usr/bin/env python3
"""PyTorch eager reference for bench/train_cpu.c: the same models (GPT-2 124M, a ~30M
Llama-style model, llama_tiny), batch and training step (zero grads, forward, cross entropy,
backward, grad-norm clipping, AdamW), timed on CPU in fp32. Prints one line
"RESULT tokens_per_s=<float>". Installs torch (pip's default index) into
~/.cache/trestle/bench-venv on first use when it is not importable.

    python3 bench/train_cpu.py --model gpt2_124m --batch 4 --seq 64 --steps 10
"""
import argparse
import math
import os
import subprocess
import sys
import time


def ensure_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.path.expanduser("~/.cache/trestle/bench-venv")
    py = os.path.join(venv, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        sys.exit("torch is still missing inside " + venv)
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv], stdout=sys.stderr)
    # From the default package index (the only one this project's machines reach).
    subprocess.check_call([py, "-m", "pip", "install", "-q", "torch"], stdout=sys.stderr)
    os.execv(py, [py] + sys.argv)


ensure_torch()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MODELS = {
    # layers, hidden, heads, kv groups, ffn, vocab, llama-style?
    "gpt2_124m": (12, 768, 12, 12, 3072, 50304, False),
    "llama_30m": (8, 512, 8, 4, 1408, 16384, True),
    "llama_tiny": (2, 64, 4, 2, 192, 256, True),
}


class Block(nn.Module):
    def __init__(self, c, heads, groups, ffn, llama):
        super().__init__()
        self.h, self.g, self.d, self.llama = heads, groups, c // heads, llama
        norm = (lambda: nn.RMSNorm(c, eps=1e-5)) if llama else (lambda: nn.LayerNorm(c))
        self.n1, self.n2 = norm(), norm()
        self.qkv = nn.Linear(c, (heads + 2 * groups) * self.d, bias=not llama)
        self.proj = nn.Linear(heads * self.d, c, bias=not llama)
        self.fc1 = nn.Linear(c, 2 * ffn if llama else ffn, bias=not llama)
        self.fc2 = nn.Linear(ffn, c, bias=not llama)

    def rope(self, x, cos, sin):
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat((-x2, x1), -1) * sin

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        qkv = self.qkv(self.n1(x))
        q, k, v = qkv.split([self.h * self.d, self.g * self.d, self.g * self.d], -1)
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        k = k.view(b, t, self.g, self.d).transpose(1, 2)
        v = v.view(b, t, self.g, self.d).transpose(1, 2)
        if self.llama:
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.g != self.h)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.fc1(self.n2(x))
        if self.llama:
            gate, up = h.chunk(2, -1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc2(h)


class Model(nn.Module):
    def __init__(self, layers, c, heads, groups, ffn, vocab, llama, seq):
        super().__init__()
        self.llama = llama
        self.wte = nn.Embedding(vocab, c)
        self.wpe = None if llama else nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads, groups, ffn, llama) for _ in range(layers))
        self.norm = nn.RMSNorm(c, eps=1e-5) if llama else nn.LayerNorm(c)
        d = c // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        f = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((f, f), -1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        x = self.wte(ids)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.norm(x) @ self.wte.weight.t()  # tied output layer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    layers, c, heads, groups, ffn, vocab, llama = MODELS[a.model]
    model = Model(layers, c, heads, groups, ffn, vocab, llama, a.seq)
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ids = torch.randint(0, vocab, (a.batch, a.seq))
    tg = torch.randint(0, vocab, (a.batch, a.seq))
    t0 = 0.0
    for s in range(-2, a.steps):
        if s == 0:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(ids).reshape(-1, vocab), tg.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = (time.perf_counter() - t0) / a.steps
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.model}: {n / 1e6:.1f}M params, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {dt * 1e3:.1f} ms/step", file=sys.stderr)
    print(f"RESULT tokens_per_s={a.batch * a.seq / dt:.1f}")
    assert math.isfinite(loss.item())


if __name__ == "__main__":
    main()
