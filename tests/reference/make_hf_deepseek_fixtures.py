#!/usr/bin/env python3
"""Writes tiny random DeepseekV3ForCausalLM directories for the MLA import test
(tests/unit/hf/test_hf_deepseek.c): every layer dense (first_k_dense_replace = num_hidden_layers,
so no expert exists), multi-latent attention with interleaved rotary channels (rope_interleave),
saved with save_pretrained (config.json + model.safetensors, float32), and what transformers
computes for one batch in the TRMFIX01 format of make_fixtures.py: tokens, targets, logits,
loss and every parameter's gradient (g:NAME under Trestle's names; MLA's tensors map one to one).

  hf_deepseek_v3: compressed queries (q_lora_rank), YaRN as DeepSeek-V3 configures it but with a
    short original context so the frequency ramp blends (factor 4, mscale 0.8, mscale_all_dim
    0.6), value heads narrower than query heads;
  hf_deepseek_v3_q: queries straight from the hidden state (q_proj), plain rotary, value heads
    wider than query heads.

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


def trestle_map(get, cfg, names):
    out = [("embedding.word_embeddings.weight", get("model.embed_tokens.weight"))]
    for i in range(cfg.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "input_layernorm.weight")))
        for hf, tr in MLA_NAMES.items():
            if p + hf in names:
                out.append((m + tr, get(p + hf)))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "post_attention_layernorm.weight")))
        fc1 = torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
        out.append((m + "mlp.linear_fc1.weight", fc1))
        out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.down_proj.weight")))
    out.append(("decoder.final_layernorm.weight", get("model.norm.weight")))
    out.append(("output_layer.weight", get("lm_head.weight")))
    return out


def tiny(q_lora_rank, rope, nope, v, rope_parameters):
    cfg = transformers.DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=8,
        num_hidden_layers=2, first_k_dense_replace=2, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, n_group=1, topk_group=1, num_attention_heads=4,
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
    grads = trestle_map(lambda k: named[k].grad, cfg, named)
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))] + [("g:" + n, t) for n, t in grads]
    write(os.path.join(out, "expected.bin"), tensors)
    print(f"{out}: loss {loss.item():.6f}, {len(grads)} gradients")


def main():
    torch.manual_seed(0)
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 0.8,
            "mscale_all_dim": 0.6, "original_max_position_embeddings": 64, "beta_fast": 32.0,
            "beta_slow": 1.0}
    save(*tiny(12, 8, 6, 8, yarn), "hf_deepseek_v3")
    torch.manual_seed(0)
    save(*tiny(None, 4, 4, 10, {"rope_type": "default", "rope_theta": 10000.0}),
         "hf_deepseek_v3_q")


if __name__ == "__main__":
    main()
