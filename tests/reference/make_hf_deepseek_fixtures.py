#!/usr/bin/env python3
"""Writes tiny random DeepseekV3ForCausalLM directories for the import tests
(tests/unit/hf/test_hf_deepseek.c): multi-latent attention with interleaved rotary channels
(rope_interleave), saved with save_pretrained (config.json + model.safetensors, float32), and
what transformers computes for one batch in the TRMFIX01 format of make_fixtures.py: tokens,
targets, logits, loss and every parameter's gradient (g:NAME under Trestle's names; MLA's
tensors map one to one).

  hf_deepseek_v3: compressed queries (q_lora_rank), YaRN as DeepSeek-V3 configures it but with a
    short original context so the frequency ramp blends (factor 4, mscale 0.8, mscale_all_dim
    0.6), value heads narrower than query heads;
  hf_deepseek_v3_q: queries straight from the hidden state (q_proj), plain rotary, value heads
    wider than query heads;
  (those two with every layer dense: first_k_dense_replace = num_hidden_layers, so no expert
    exists)
  hf_deepseek_v3_moe: one dense layer then two MoE layers: 8 routed experts in 2 groups
    (topk_group 1, top-2: transformers' group score, the best two experts, is Megatron's top
    topk / topk_group), 2 shared experts, routed_scaling_factor 2.5, norm_topk_prob, a random
    e_score_correction_bias (a buffer: its gradient is written as zeros, as Trestle's frozen
    expert bias has);
  hf_deepseek_v3_mtp: hf_deepseek_v3_moe's model and files plus one MTP depth
    (num_nextn_predict_layers 1) as DeepSeek's checkpoints hold it: layer 3 with enorm, hnorm,
    eh_proj, shared_head.norm, copies of the embedding (embed_tokens) and of the output layer
    (shared_head.head), and an MoE transformer layer. transformers' model has no MTP (it skips
    those tensors on loading), so there is no oracle for the depth: the test is the round trip
    and Trestle's own losses before and after it (its expected.bin is hf_deepseek_v3_moe's, the
    main model being the same).

Norm weights are moved away from one. Rerun only when the cases change (CI reads the committed
files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0
    /tmp/venv/bin/python tests/reference/make_hf_deepseek_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import transformers

from make_fixtures import SEQ, VOCAB, write

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2

MLA_NAMES = {
    "self_attn.q_a_proj.weight": "self_attention.linear_q_down_proj.weight",
    "self_attn.q_a_layernorm.weight": "self_attention.q_layernorm.weight",
    "self_attn.q_b_proj.weight": "self_attention.linear_q_up_proj.weight",
    "self_attn.q_proj.weight": "self_attention.linear_q_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "self_attention.linear_kv_down_proj.weight",
    "self_attn.kv_a_layernorm.weight": "self_attention.kv_layernorm.weight",
    "self_attn.kv_b_proj.weight": "self_attention.linear_kv_up_proj.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
}


def moe_map(get, cfg, p, m):
    """The MoE block of HF layer prefix p under Trestle's layer prefix m (transformers 5 holds
    the experts fused: gate_up_proj[e] is Trestle's [gate; up] fc1, down_proj[e] its fc2)."""
    out = [(m + "mlp.router.weight", get(p + "mlp.gate.weight")),
           (m + "mlp.router.expert_bias",
            torch.zeros(1, cfg.n_routed_experts) if get(p + "mlp.gate.weight") is not None
            else None)]
    gu, down = get(p + "mlp.experts.gate_up_proj"), get(p + "mlp.experts.down_proj")
    for e in range(cfg.n_routed_experts):
        out.append((m + f"mlp.experts.local_experts.{e}.linear_fc1.weight", gu[e]))
        out.append((m + f"mlp.experts.local_experts.{e}.linear_fc2.weight", down[e]))
    fc1 = torch.cat([get(p + "mlp.shared_experts.gate_proj.weight"),
                     get(p + "mlp.shared_experts.up_proj.weight")], 0)
    out.append((m + "mlp.shared_experts.linear_fc1.weight", fc1))
    out.append((m + "mlp.shared_experts.linear_fc2.weight",
                get(p + "mlp.shared_experts.down_proj.weight")))
    return out


def trestle_map(get, cfg, names):
    out = [("embedding.word_embeddings.weight", get("model.embed_tokens.weight"))]
    for i in range(cfg.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "input_layernorm.weight")))
        for hf, tr in MLA_NAMES.items():
            if p + hf in names:
                out.append((m + tr, get(p + hf)))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "post_attention_layernorm.weight")))
        if i >= cfg.first_k_dense_replace:
            out += moe_map(get, cfg, p, m)
            continue
        fc1 = torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
        out.append((m + "mlp.linear_fc1.weight", fc1))
        out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.down_proj.weight")))
    out.append(("decoder.final_layernorm.weight", get("model.norm.weight")))
    out.append(("output_layer.weight", get("lm_head.weight")))
    return out


def tiny(q_lora_rank, rope, nope, v, rope_parameters, layers=2, dense=2, experts=4, shared=1,
         groups=1):
    cfg = transformers.DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=8,
        num_hidden_layers=layers, first_k_dense_replace=dense, n_routed_experts=experts,
        n_shared_experts=shared, num_experts_per_tok=2, n_group=groups, topk_group=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=q_lora_rank, kv_lora_rank=16, qk_rope_head_dim=rope,
        qk_nope_head_dim=nope, v_head_dim=v, max_position_embeddings=SEQ, rms_norm_eps=1e-6,
        tie_word_embeddings=False, attention_bias=False, rope_interleave=True,
        rope_parameters=rope_parameters, initializer_range=0.2, num_nextn_predict_layers=0)
    cfg._attn_implementation = "eager"
    model = transformers.DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):  # large enough to change the choice
                b.copy_(0.3 * torch.randn_like(b))
    return model, cfg


def save(model, cfg, name):
    model = model.float().eval()
    out = os.path.join(HERE, "fixtures", name)
    model.save_pretrained(out, safe_serialization=True)
    gen_cfg = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)  # the import reads no generation settings
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1
    logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    named = dict(model.named_parameters())
    grads = trestle_map(lambda k: named[k].grad if k in named else None, cfg, named)
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))] + [("g:" + n, t) for n, t in grads]
    write(os.path.join(out, "expected.bin"), tensors)
    print(f"{out}: loss {loss.item():.6f}, {len(grads)} gradients")
    return out


def add_mtp(src, name):
    """src's files plus one MTP depth (layer num_hidden_layers) of random weights, laid out as
    DeepSeek-V3's checkpoints hold it; config.json's num_nextn_predict_layers 1."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    out = os.path.join(HERE, "fixtures", name)
    os.makedirs(out, exist_ok=True)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    conf = json.load(open(os.path.join(src, "config.json")))
    layers = conf["num_hidden_layers"]
    last, depth = f"model.layers.{layers - 1}.", f"model.layers.{layers}."
    gen = torch.Generator().manual_seed(2)
    for k in sorted(tensors):
        if k.startswith(last):  # the depth's layer is built like the last one
            t = tensors[k]
            noise = 0.2 * torch.randn(t.shape, generator=gen)
            tensors[depth + k[len(last):]] = (1.0 + noise if k.endswith("norm.weight") else noise
                                              ).contiguous()
    C = conf["hidden_size"]
    for n in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        tensors[depth + n] = 1.0 + 0.5 * torch.randn(C, generator=gen)
    tensors[depth + "eh_proj.weight"] = 0.2 * torch.randn(C, 2 * C, generator=gen)
    tensors[depth + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"].clone()
    tensors[depth + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    conf["num_nextn_predict_layers"] = 1
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(os.path.join(src, "expected.bin"), os.path.join(out, "expected.bin"))
    # transformers loads it as the same main model (the depth's tensors are skipped)
    model = transformers.DeepseekV3ForCausalLM.from_pretrained(out).float().eval()
    ref = transformers.DeepseekV3ForCausalLM.from_pretrained(src).float().eval()
    ids = torch.arange(SEQ).reshape(1, SEQ) % VOCAB
    assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)
    print(f"{out}: {len(tensors)} tensors")


def main():
    torch.manual_seed(0)
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 0.8,
            "mscale_all_dim": 0.6, "original_max_position_embeddings": 64, "beta_fast": 32.0,
            "beta_slow": 1.0}
    save(*tiny(12, 8, 6, 8, yarn), "hf_deepseek_v3")
    torch.manual_seed(0)
    save(*tiny(None, 4, 4, 10, {"rope_type": "default", "rope_theta": 10000.0}),
         "hf_deepseek_v3_q")
    torch.manual_seed(0)
    moe = save(*tiny(12, 8, 6, 8, {"rope_type": "default", "rope_theta": 10000.0}, layers=3,
                     dense=1, experts=8, shared=2, groups=2), "hf_deepseek_v3_moe")
    add_mtp(moe, "hf_deepseek_v3_mtp")


if __name__ == "__main__":
    main()
