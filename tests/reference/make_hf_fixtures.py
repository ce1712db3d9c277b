#!/usr/bin/env python3
"""Writes Hugging Face model directories for the import test (tests/unit/hf/test_hf_import.c):
a tiny random LlamaForCausalLM and GPT2LMHeadModel (the models of make_fixtures.py) saved with
save_pretrained (config.json + model.safetensors, float32), and the logits and loss transformers
computes for one batch, in the TRMFIX01 format of make_fixtures.py (tokens, targets, logits,
loss). Rerun only when the cases change (CI reads the
committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0
    /tmp/venv/bin/python tests/reference/make_hf_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import transformers

from make_fixtures import SEQ, VOCAB, tiny_gpt2_config, tiny_llama_config, write

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2


def save(model, name):
    model = model.float().eval()
    out = os.path.join(HERE, "fixtures", name)
    model.save_pretrained(out, safe_serialization=True)
    os.remove(os.path.join(out, "generation_config.json"))  # the import reads no generation settings
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
    write(os.path.join(out, "expected.bin"), [("tokens", tokens.float()),
                                              ("targets", targets.float()), ("logits", logits),
                                              ("loss", loss.reshape(1))])
    print(f"{out}: loss {loss.item():.6f}")


def main():
    torch.manual_seed(0)
    save(transformers.LlamaForCausalLM(tiny_llama_config()), "hf_llama")
    torch.manual_seed(0)
    save(transformers.GPT2LMHeadModel(tiny_gpt2_config()), "hf_gpt2")


if __name__ == "__main__":
    main()
