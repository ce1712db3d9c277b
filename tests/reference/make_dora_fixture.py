#!/usr/bin/env python3
"""Writes the PyTorch reference for DoRA (Megatron-Bridge's peft DoRA) on the tiny Llama of
make_fixtures.py: every linear layer of the decoder computes

    y = (m / ||V||) * (x V^T),   V = W + scale * B A,   ||V|| = row norms, detached,

with Megatron's fused adapters (one A for the fused QKV rows and one for fc1 = [gate; up]; B and
m per output row). The base weights are frozen. A, B and m start random (B nonzero so A has a
gradient; m away from ||V|| so the scale is not 1). Stored like make_fixtures.py (TRMFIX01,
Trestle's names and layouts): tokens, targets, logits, loss, w:NAME, g:NAME (zero for frozen
tensors), p3:NAME after 3 AdamW steps (weight decay on A and B, none on m). Read by
tests/unit/model/test_model_torch_parity.c. Rerun only when the case changes:

    python3 tests/reference/make_dora_fixture.py
"""
import os

import torch
import torch.nn.functional as F
import transformers

from make_fixtures import ADAM, BATCH, HERE, SEQ, VOCAB, grouped_qkv, llama_map, \
    tiny_llama_config, write

RANK, ALPHA = 4, 8
SCALE = ALPHA / RANK


def dora_weight(w, a, b, m):
    v = w + SCALE * b @ a
    return (m / v.norm(dim=1).detach())[:, None] * v


def main():
    torch.manual_seed(0)
    cfg = tiny_llama_config()
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg).float()
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(3)

    def leaf(*shape, std):
        return (torch.randn(*shape, generator=gen) * std).requires_grad_(True)

    adapters = []  # per layer: dict of leaves
    for layer in model.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        d = {}
        for group, mods in (("qkv", (att.q_proj, att.k_proj, att.v_proj)),
                            ("proj", (att.o_proj,)), ("fc1", (mlp.gate_proj, mlp.up_proj)),
                            ("fc2", (mlp.down_proj,))):
            a = leaf(RANK, mods[0].in_features, std=0.3)
            d[group + ".a"] = a
            for j, mod in enumerate(mods):
                b = leaf(mod.out_features, RANK, std=0.1)
                with torch.no_grad():
                    norm = (mod.weight + SCALE * b @ a).norm(dim=1)
                m = (norm * (1 + 0.2 * torch.randn(norm.shape, generator=gen))).requires_grad_()
                d[f"{group}.b{j}"], d[f"{group}.m{j}"] = b, m
                mod.forward = (lambda x, mod=mod, a=a, b=b, m=m:
                               F.linear(x, dora_weight(mod.weight, a, b, m)))
        adapters.append(d)

    tok_gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=tok_gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=tok_gen)
    targets[0, 3] = -1

    def loss_fn():
        logits = model(input_ids=tokens).logits
        return logits, F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                       ignore_index=-1)

    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    named = dict(model.named_parameters())

    def adapter_tensors(get):
        out = []
        for i, d in enumerate(adapters):
            pre = f"decoder.layers.{i}."
            for group, mod, fuse in (("qkv", "self_attention.linear_qkv", "qkv"),
                                     ("proj", "self_attention.linear_proj", None),
                                     ("fc1", "mlp.linear_fc1", "cat"), ("fc2", "mlp.linear_fc2", None)):
                n = pre + mod + ".adapter."
                out.append((n + "linear_in.weight", get(d[group + ".a"])))
                for part, key in (("linear_out.weight", "b"), ("weight_magnitude", "m")):
                    ts = [get(d[f"{group}.{key}{j}"]) for j in range(3 if fuse == "qkv" else
                                                                       2 if fuse else 1)]
                    t = (grouped_qkv(*ts, h, g) if fuse == "qkv" else
                         torch.cat(ts, 0) if fuse else ts[0])
                    out.append((n + part, t))
        return out

    logits, loss = loss_fn()
    loss.backward()
    base = llama_map(lambda k: named[k].detach().clone(), cfg)
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))]
    tensors += [("w:" + n, t) for n, t in base]
    tensors += [("w:" + n, t) for n, t in adapter_tensors(lambda t: t.detach().clone())]
    tensors += [("g:" + n, torch.zeros_like(t)) for n, t in base]
    tensors += [("g:" + n, t) for n, t in adapter_tensors(lambda t: t.grad.clone())]
    leaves = [t for d in adapters for t in d.values()]
    decay = [t for t in leaves if t.ndim > 1]
    no_decay = [t for t in leaves if t.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], **ADAM)
    for _ in range(3):
        opt.step()
        opt.zero_grad()
        loss_fn()[1].backward()
    tensors += [("p3:" + n, t) for n, t in base]
    tensors += [("p3:" + n, t) for n, t in adapter_tensors(lambda t: t.detach().clone())]
    path = os.path.join(HERE, "fixtures", "model_llama_dora.bin")
    write(path, tensors)
    print(f"{path}: loss {loss.item():.6f}, {len(tensors)} tensors")


if __name__ == "__main__":
    main()
