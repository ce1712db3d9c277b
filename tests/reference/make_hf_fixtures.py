#!/usr/bin/env python3
"""Writes Hugging Face model directories for the import test (tests/unit/hf/test_hf_import.c):
a tiny random LlamaForCausalLM and GPT2LMHeadModel (the models of make_fixtures.py) and a tiny
random Qwen3ForCausalLM (GQA, head_dim 8 != hidden / heads, per-head q/k RMSNorm with weights
away from one, rope theta 1e6, tied head) saved with save_pretrained (config.json +
model.safetensors, float32), and the logits and loss transformers computes for one batch, in the
TRMFIX01 format of make_fixtures.py (tokens, targets, logits, loss; for Qwen3 also every
parameter's gradient, g:NAME under Trestle's names and layouts). Rerun only when the cases change
(CI reads the committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0
    /tmp/venv/bin/python tests/reference/make_hf_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import transformers

from make_fixtures import SEQ, VOCAB, grouped_qkv, tiny_gpt2_config, tiny_llama_config, write

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2


def qwen3_map(get, cfg):
    """Trestle's tensors of a tied Qwen3: Llama's layers plus the q/k norms over head_dim."""
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    out = [("embedding.word_embeddings.weight", get("model.embed_tokens.weight"))]
    for i in range(cfg.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "input_layernorm.weight")))
        qkv = grouped_qkv(get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                          get(p + "self_attn.v_proj.weight"), h, g)
        out.append((m + "self_attention.linear_qkv.weight", qkv))
        out.append((m + "self_attention.q_layernorm.weight", get(p + "self_attn.q_norm.weight")))
        out.append((m + "self_attention.k_layernorm.weight", get(p + "self_attn.k_norm.weight")))
        out.append((m + "self_attention.linear_proj.weight", get(p + "self_attn.o_proj.weight")))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "post_attention_layernorm.weight")))
        fc1 = torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
        out.append((m + "mlp.linear_fc1.weight", fc1))
        out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.down_proj.weight")))
    out.append(("decoder.final_layernorm.weight", get("model.norm.weight")))
    return out


def tiny_qwen3():
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=SEQ,
        rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        initializer_range=0.2, use_sliding_window=False)
    cfg._attn_implementation = "eager"
    model = transformers.Qwen3ForCausalLM(cfg)
    # Norm weights away from their init of one, so a norm applied without its weight shows.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
    return model, cfg


def save(model, name, mapper=None, cfg=None):
    model = model.float().eval()
    out = os.path.join(HERE, "fixtures", name)
    model.save_pretrained(out, safe_serialization=True)
    os.remove(os.path.join(out, "generation_config.json"))  # the import reads no generation settings
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1
    logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))]
    if mapper:
        loss.backward()
        named = dict(model.named_parameters())
        tensors += [("g:" + n, t) for n, t in mapper(lambda k: named[k].grad, cfg)]
    write(os.path.join(out, "expected.bin"), tensors)
    print(f"{out}: loss {loss.item():.6f}")


def main():
    torch.manual_seed(0)
    save(transformers.LlamaForCausalLM(tiny_llama_config()), "hf_llama")
    torch.manual_seed(0)
    save(transformers.GPT2LMHeadModel(tiny_gpt2_config()), "hf_gpt2")
    torch.manual_seed(0)
    model, cfg = tiny_qwen3()
    save(model, "hf_qwen3", qwen3_map, cfg)


if __name__ == "__main__":
    main()
