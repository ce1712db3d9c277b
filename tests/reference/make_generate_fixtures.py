#!/usr/bin/env python3
"""Writes the token ids transformers' greedy `generate` gives on the tiny random Hugging Face
fixtures, for trestle_generate's test (tests/cli/hf_generate.sh): 32 new tokens after a fixed
prompt, with a KV cache (transformers' default), for the LlamaForCausalLM and Qwen3ForCausalLM
of make_hf_fixtures.py (RoPE reaches past their max_position_embeddings) and for a
GPT2LMHeadModel with 64 learned positions made here (the fixture's 12 are too few for 36
tokens), saved like the others (save_pretrained, float32). The end-of-text token is switched off
so that the 32 tokens are the argmax at every step. Each DIR/generate.txt holds the prompt's ids
on its first line and the 32 generated ids on its second. Rerun only when the cases change (CI
reads the committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0
    /tmp/venv/bin/python tests/reference/make_generate_fixtures.py
"""
import os

import torch
import transformers

from make_fixtures import VOCAB, tiny_gpt2_config

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [5, 17, 33, 2, 60]
NEW = 32


def generate(model, out):
    model = model.float().eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        got = model.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                             pad_token_id=0, use_cache=True)
    new = got[0, len(PROMPT):].tolist()
    assert len(new) == NEW, new
    with open(os.path.join(out, "generate.txt"), "w") as f:
        f.write(" ".join(map(str, PROMPT)) + "\n" + " ".join(map(str, new)) + "\n")
    print(out, new)


def main():
    load = dict(dtype=torch.float32, attn_implementation="eager")
    for name in ("hf_llama", "hf_qwen3"):
        d = os.path.join(HERE, "fixtures", name)
        generate(transformers.AutoModelForCausalLM.from_pretrained(d, **load), d)
    torch.manual_seed(0)
    cfg = tiny_gpt2_config()
    cfg.n_positions = 64
    cfg.initializer_range = 0.3  # away from near-uniform logits, so the tokens vary
    cfg._attn_implementation = "eager"
    model = transformers.GPT2LMHeadModel(cfg)
    out = os.path.join(HERE, "fixtures", "hf_gpt2_gen")
    model.float().save_pretrained(out, safe_serialization=True)
    os.remove(os.path.join(out, "generation_config.json"))
    generate(model, out)
    assert VOCAB == model.config.vocab_size


if __name__ == "__main__":
    main()
