#!/usr/bin/env python3
"""Writes Hugging Face MoE model directories for the MoE import test (tests/unit/hf/test_hf_moe.c):
a tiny random MixtralForCausalLM (4 experts top-2, GQA, untied) and a tiny random
Qwen3MoeForCausalLM (8 experts top-2 with norm_topk_prob, QK norms, head_dim 8, a dense first layer
through mlp_only_layers, tied head), each saved with save_pretrained (config.json +
model.safetensors, float32), and what transformers computes for one batch in the TRMFIX01 format
of make_fixtures.py: tokens, targets, logits, the loss without the router's aux loss, and every
parameter's gradient (g:NAME under Trestle's names and layouts). The router weights are scaled up
so the top-k choices have margins. Rerun only when the cases change (CI reads the committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0
    /tmp/venv/bin/python tests/reference/make_hf_moe_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import transformers

from make_fixtures import SEQ, VOCAB, grouped_qkv, write

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2


def moe_map(get, cfg, block, gate, up, down, qk_norm, dense_layers):
    """Trestle's tensors: Llama's layers, with router and per-expert fc1 = [gate; up], fc2."""
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    out = [("embedding.word_embeddings.weight", get("model.embed_tokens.weight"))]
    for i in range(cfg.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "input_layernorm.weight")))
        qkv = grouped_qkv(get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                          get(p + "self_attn.v_proj.weight"), h, g)
        out.append((m + "self_attention.linear_qkv.weight", qkv))
        if qk_norm:
            out.append((m + "self_attention.q_layernorm.weight", get(p + "self_attn.q_norm.weight")))
            out.append((m + "self_attention.k_layernorm.weight", get(p + "self_attn.k_norm.weight")))
        out.append((m + "self_attention.linear_proj.weight", get(p + "self_attn.o_proj.weight")))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "post_attention_layernorm.weight")))
        if i in dense_layers:
            fc1 = torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
            out.append((m + "mlp.linear_fc1.weight", fc1))
            out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.down_proj.weight")))
            continue
        b = f"{p}{block}."
        out.append((m + "mlp.router.weight", get(b + "gate.weight")))
        n = cfg.num_local_experts if hasattr(cfg, "num_local_experts") else cfg.num_experts
        for e in range(n):
            x = f"{b}experts.{e}."
            fc1 = torch.cat([get(x + gate + ".weight"), get(x + up + ".weight")], 0)
            out.append((m + f"mlp.experts.local_experts.{e}.linear_fc1.weight", fc1))
            out.append((m + f"mlp.experts.local_experts.{e}.linear_fc2.weight",
                        get(x + down + ".weight")))
    out.append(("decoder.final_layernorm.weight", get("model.norm.weight")))
    if not cfg.tie_word_embeddings:
        out.append(("output_layer.weight", get("lm_head.weight")))
    return out


def prepare(model):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            if n.endswith("mlp.gate.weight"):
                p.copy_(2.0 * torch.randn_like(p))
    return model.float().eval()


def save(model, name, mapper):
    out = os.path.join(HERE, "fixtures", name)
    model.save_pretrained(out, safe_serialization=True)
    os.remove(os.path.join(out, "generation_config.json"))
    # The saved names (the checkpoint format), for the map: transformers may hold the experts
    # fused in memory.
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1
    logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    grads = saved_layout_grads(model)
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))]
    tensors += [("g:" + n, t) for n, t in mapper(lambda k: grads[k])]
    write(os.path.join(out, "expected.bin"), tensors)
    print(f"{out}: loss {loss.item():.6f}")


def saved_layout_grads(model):
    """Gradients under the checkpoint's names: fused in-memory experts split per expert."""
    g = {}
    for n, p in model.named_parameters():
        if n.endswith("experts.gate_up_proj"):
            pre = n[: -len("gate_up_proj")]
            E, two_f, _ = p.grad.shape
            f = two_f // 2
            for e in range(E):
                g[f"{pre}{e}.gate"] = p.grad[e, :f]
                g[f"{pre}{e}.up"] = p.grad[e, f:]
        elif n.endswith("experts.down_proj"):
            pre = n[: -len("down_proj")]
            for e in range(p.grad.shape[0]):
                g[f"{pre}{e}.down"] = p.grad[e]
        else:
            g[n] = p.grad
    return g


def main():
    torch.manual_seed(0)
    mcfg = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=12, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=SEQ, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, initializer_range=0.2,
        router_jitter_noise=0.0, sliding_window=None)
    mcfg._attn_implementation = "eager"
    mixtral = prepare(transformers.MixtralForCausalLM(mcfg))
    # in memory: mlp.gate / mlp.experts.{gate,up,down}; saved as block_sparse_moe.*.w1/w3/w2
    save(mixtral, "hf_mixtral", lambda get: moe_map(
        get_mem(get, "block_sparse_moe", "mlp", {"w1": "gate", "w3": "up", "w2": "down"}), mcfg,
        "block_sparse_moe", "w1", "w3", "w2", False, []))
    torch.manual_seed(0)
    qcfg = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=20, moe_intermediate_size=12,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[0], max_position_embeddings=SEQ, rms_norm_eps=1e-6,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        initializer_range=0.2, use_sliding_window=False)
    qcfg._attn_implementation = "eager"
    qwen = prepare(transformers.Qwen3MoeForCausalLM(qcfg))
    save(qwen, "hf_qwen3_moe", lambda get: moe_map(
        get_mem(get, "mlp", "mlp", {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}),
        qcfg, "mlp", "gate_proj", "up_proj", "down_proj", True, [0]))


def get_mem(get, saved_block, mem_block, proj):
    """A lookup by checkpoint name into the in-memory gradients."""
    def f(name):
        name = name.replace(f".{saved_block}.", f".{mem_block}.")
        for saved, mem in proj.items():
            if name.endswith(f".{saved}.weight") and ".experts." in name:
                return get(name[: -len(f".{saved}.weight")] + f".{mem}")
        return get(name)
    return f


if __name__ == "__main__":
    main()
