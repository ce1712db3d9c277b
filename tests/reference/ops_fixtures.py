#!/usr/bin/env python3
"""Writes PyTorch reference values for Trestle's CPU ops to fixtures/ops.bin.

Inputs are seeded fp32 tensors; references are computed by PyTorch in float64 from those exact
fp32 values, so the C parity test (tests/unit/kernels/test_ops_torch_parity.c) measures only the C
kernels' own fp32 error. Run once and commit the output; CI never needs torch:

    pip install torch numpy
    python3 tests/reference/ops_fixtures.py

File format (little-endian): b"TRFIX001", u32 count, then per tensor: 48-byte NUL-padded name,
u64 element count, that many float32 values. Integer tensors (targets) are stored as floats.
"""
import math
import os
import struct

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ops.bin")
tensors = []


def put(name, t):
    tensors.append((name, t.detach().to(torch.float32).contiguous().reshape(-1)))


def leaf(shape, lo=-1.0, hi=1.0, gen=None):
    x = torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    return x


def f64(x):
    return x.double().requires_grad_(True)


def attention(gen):
    B, T, H, G, D = 2, 16, 4, 2, 8
    q, k, v = leaf((B, T, H, D), -2, 2, gen), leaf((B, T, G, D), -2, 2, gen), leaf((B, T, G, D), -1, 1, gen)
    dout = leaf((B, T, H, D), -1, 1, gen)
    for n, t in (("attn.q", q), ("attn.k", k), ("attn.v", v), ("attn.dout", dout)):
        put(n, t)
    qd, kd, vd = f64(q), f64(k), f64(v)
    # SDPA wants [B, heads, T, D]; enable_gqa repeats each K/V group for H/G query heads.
    o = F.scaled_dot_product_attention(qd.transpose(1, 2), kd.transpose(1, 2), vd.transpose(1, 2),
                                       is_causal=True, enable_gqa=True).transpose(1, 2)
    o.backward(dout.double())
    put("attn.out", o)
    put("attn.dq", qd.grad)
    put("attn.dk", kd.grad)
    put("attn.dv", vd.grad)
    # log-sum-exp of the scaled causal scores, the statistic the flash kernel saves, [B, H, T]
    kr = kd.detach().repeat_interleave(H // G, dim=2)
    s = torch.einsum("bthd,bshd->bhts", qd.detach(), kr) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    put("attn.lse", torch.logsumexp(s, dim=-1))


def norms(gen):
    R, D = 6, 32
    x, w, b, dy = leaf((R, D), -2, 2, gen), leaf((D,), 0.5, 1.5, gen), leaf((D,), -1, 1, gen), leaf((R, D), -1, 1, gen)
    for n, t in (("norm.x", x), ("norm.w", w), ("norm.b", b), ("norm.dy", dy)):
        put(n, t)
    xd, wd, bd = f64(x), f64(w), f64(b)
    y = F.rms_norm(xd, (D,), wd, eps=1e-5)
    y.backward(dy.double())
    put("rms.y", y), put("rms.dx", xd.grad), put("rms.dw", wd.grad)
    xd, wd, bd = f64(x), f64(w), f64(b)
    y = F.layer_norm(xd, (D,), wd, bd, eps=1e-5)
    y.backward(dy.double())
    put("ln.y", y), put("ln.dx", xd.grad), put("ln.dw", wd.grad), put("ln.db", bd.grad)


def llama3_inv_freq(dim, base, factor, low_freq_factor, high_freq_factor, old_context_len):
    # transformers.modeling_rope_utils._compute_llama3_parameters, in float64
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(gen):
    B, T, H, D, OFF = 2, 8, 3, 16, 8180
    x, dy = leaf((B, T, H, D), -1, 1, gen), leaf((B, T, H, D), -1, 1, gen)
    put("rope.x", x), put("rope.dy", dy)
    inv = llama3_inv_freq(D, 500000.0, 8.0, 1.0, 4.0, 8192.0)
    pos = torch.arange(OFF, OFF + T, dtype=torch.float64)
    emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)[None, :, None, :]  # [1, T, 1, D]
    xd = f64(x)
    y = xd * emb.cos() + rotate_half(xd) * emb.sin()
    y.backward(dy.double())
    put("rope.y", y), put("rope.dx", xd.grad)


def activations(gen):
    R, FF = 5, 12
    x, dy = leaf((R, 2 * FF), -4, 4, gen), leaf((R, FF), -1, 1, gen)
    put("swiglu.x", x), put("swiglu.dy", dy)
    xd = f64(x)
    gate, up = xd.chunk(2, dim=-1)
    y = F.silu(gate) * up
    y.backward(dy.double())
    put("swiglu.y", y), put("swiglu.dx", xd.grad)
    x, dy = leaf((257,), -5, 5, gen), leaf((257,), -1, 1, gen)
    put("gelu.x", x), put("gelu.dy", dy)
    for name, approx in (("gelu_erf", "none"), ("gelu_tanh", "tanh")):
        xd = f64(x)
        y = F.gelu(xd, approximate=approx)
        y.backward(dy.double())
        put(name + ".y", y), put(name + ".dx", xd.grad)


def cross_entropy(gen):
    R, V = 8, 300
    logits = leaf((R, V), -6, 6, gen)
    targets = torch.randint(0, V, (R,), generator=gen)
    targets[3] = -100  # ignored row; Trestle ignores any negative target
    dloss = leaf((R,), 0.2, 1.0, gen)
    put("ce.logits", logits), put("ce.targets", targets.float()), put("ce.dloss", dloss)
    ld = f64(logits)
    loss = F.cross_entropy(ld, targets, reduction="none", ignore_index=-100)
    (loss * dloss.double()).sum().backward()
    put("ce.loss", loss), put("ce.dlogits", ld.grad)


def main():
    gen = torch.Generator().manual_seed(20240611)
    attention(gen)
    norms(gen)
    rope(gen)
    activations(gen)
    cross_entropy(gen)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(b"TRFIX001")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors:
            raw = name.encode()
            assert len(raw) < 48
            f.write(raw + b"\0" * (48 - len(raw)))
            f.write(struct.pack("<Q", t.numel()))
            f.write(t.numpy().astype("<f4").tobytes())
    print(f"wrote {len(tensors)} tensors to {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
