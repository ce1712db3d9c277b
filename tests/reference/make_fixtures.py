#!/usr/bin/env python3
"""Writes PyTorch/transformers reference values for Trestle's model and optimizer tests.

Builds a tiny LlamaForCausalLM (GQA, RMSNorm, SwiGLU, Llama-3 RoPE scaling, untied head) and a
tiny GPT2LMHeadModel (LayerNorm, tanh GeLU "gelu_new", learned positions, biases, tied head)
with fixed seeds, runs one batch, and stores, already mapped to Trestle's parameter names and
layouts (Megatron's grouped QKV rows, fc1 = [gate; up], HF GPT-2 Conv1D weights transposed):
  tokens, targets, logits, loss, every parameter (w:NAME), its gradient (g:NAME), and the
  parameters after 3 AdamW steps on the same batch (p3:NAME; no decay on biases and norms).
The C test (tests/unit/model/test_model_torch_parity.c) reads fixtures/model_<arch>.bin. Rerun only
when the cases change (CI reads the committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers
    /tmp/venv/bin/python tests/reference/make_fixtures.py

Format (little-endian): b"TRMFIX01", u32 count, then per tensor: u32 name length, the name
(UTF-8), u64 element count, that many float32 values (integer tensors stored as floats).
"""
import os
import struct

import torch
import torch.nn.functional as F
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SEQ, VOCAB = 2, 12, 64
ADAM = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(b"TRMFIX01")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors:
            data = t.detach().to(torch.float32).contiguous().reshape(-1)
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)))
            f.write(raw)
            f.write(struct.pack("<Q", data.numel()))
            f.write(data.numpy().astype("<f4").tobytes())


def grouped_qkv(q, k, v, heads, groups):
    """Rows [q; k; v] -> Megatron's per-group [q heads of the group, k, v] (works for biases)."""
    d = q.shape[0] // heads
    hpg = heads // groups
    parts = []
    for g in range(groups):
        parts.append(q[g * hpg * d:(g + 1) * hpg * d])
        parts.append(k[g * d:(g + 1) * d])
        parts.append(v[g * d:(g + 1) * d])
    return torch.cat(parts, 0)


def llama_map(get, cfg):
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    out = [("embedding.word_embeddings.weight", get("model.embed_tokens.weight"))]
    for i in range(cfg.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "input_layernorm.weight")))
        qkv = grouped_qkv(get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                          get(p + "self_attn.v_proj.weight"), h, g)
        out.append((m + "self_attention.linear_qkv.weight", qkv))
        out.append((m + "self_attention.linear_proj.weight", get(p + "self_attn.o_proj.weight")))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "post_attention_layernorm.weight")))
        fc1 = torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
        out.append((m + "mlp.linear_fc1.weight", fc1))
        out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.down_proj.weight")))
    out.append(("decoder.final_layernorm.weight", get("model.norm.weight")))
    out.append(("output_layer.weight", get("lm_head.weight")))
    return out


def gpt2_map(get, cfg):
    h, c = cfg.n_head, cfg.n_embd
    out = [("embedding.word_embeddings.weight", get("transformer.wte.weight")),
           ("embedding.position_embeddings.weight", get("transformer.wpe.weight"))]
    for i in range(cfg.n_layer):
        p, m = f"transformer.h.{i}.", f"decoder.layers.{i}."
        out.append((m + "input_layernorm.weight", get(p + "ln_1.weight")))
        out.append((m + "input_layernorm.bias", get(p + "ln_1.bias")))
        w = get(p + "attn.c_attn.weight").t()  # Conv1D stores [in, out]
        b = get(p + "attn.c_attn.bias")
        out.append((m + "self_attention.linear_qkv.weight",
                    grouped_qkv(w[:c], w[c:2 * c], w[2 * c:], h, h)))
        out.append((m + "self_attention.linear_qkv.bias",
                    grouped_qkv(b[:c], b[c:2 * c], b[2 * c:], h, h)))
        out.append((m + "self_attention.linear_proj.weight", get(p + "attn.c_proj.weight").t()))
        out.append((m + "self_attention.linear_proj.bias", get(p + "attn.c_proj.bias")))
        out.append((m + "pre_mlp_layernorm.weight", get(p + "ln_2.weight")))
        out.append((m + "pre_mlp_layernorm.bias", get(p + "ln_2.bias")))
        out.append((m + "mlp.linear_fc1.weight", get(p + "mlp.c_fc.weight").t()))
        out.append((m + "mlp.linear_fc1.bias", get(p + "mlp.c_fc.bias")))
        out.append((m + "mlp.linear_fc2.weight", get(p + "mlp.c_proj.weight").t()))
        out.append((m + "mlp.linear_fc2.bias", get(p + "mlp.c_proj.bias")))
    out.append(("decoder.final_layernorm.weight", get("transformer.ln_f.weight")))
    out.append(("decoder.final_layernorm.bias", get("transformer.ln_f.bias")))
    return out


def run(model, mapper, cfg, path):
    model = model.float()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1  # an ignored position (Megatron's loss mask / HF's ignore index)
    named = dict(model.named_parameters())

    def loss_fn():
        logits = model(input_ids=tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    logits, loss = loss_fn()
    loss.backward()
    tensors = [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
               ("loss", loss.reshape(1))]
    tensors += [("w:" + n, t) for n, t in mapper(lambda k: named[k].detach().clone(), cfg)]
    tensors += [("g:" + n, t) for n, t in mapper(lambda k: named[k].grad.clone(), cfg)]
    decay = [p for n, p in named.items() if p.ndim > 1]
    no_decay = [p for n, p in named.items() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], **ADAM)
    for _ in range(3):
        opt.step()
        opt.zero_grad()
        loss_fn()[1].backward()
    tensors += [("p3:" + n, t) for n, t in mapper(lambda k: named[k].detach(), cfg)]
    write(path, tensors)
    print(f"{path}: loss {loss.item():.6f}, {len(tensors)} tensors")


def tiny_llama_config():
    """GQA, Llama 3 rotary scaling, an untied head (also make_hf_fixtures.py's model)."""
    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8})


def tiny_gpt2_config():
    """LayerNorm, tanh GeLU, learned positions, biases, a tied head, no dropout."""
    return transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4, n_inner=None,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=None)


def main():
    torch.manual_seed(0)
    lcfg = tiny_llama_config()
    lcfg._attn_implementation = "eager"
    llama = transformers.LlamaForCausalLM(lcfg)
    run(llama, llama_map, lcfg, os.path.join(HERE, "fixtures", "model_llama.bin"))

    torch.manual_seed(0)
    gcfg = tiny_gpt2_config()
    gcfg._attn_implementation = "eager"
    gpt2 = transformers.GPT2LMHeadModel(gcfg)
    # The default GPT-2 init is tiny; widen it so every op's gradient is well above fp32 noise.
    with torch.no_grad():
        for p in gpt2.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    run(gpt2, gpt2_map, gcfg, os.path.join(HERE, "fixtures", "model_gpt2.bin"))


if __name__ == "__main__":
    main()
