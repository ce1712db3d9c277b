#!/usr/bin/env python3
"""Loads a PEFT adapter directory that Trestle wrote (trestle_ckpt export --adapter-only) onto
its base with the `peft` package and compares the logits with those transformers computes from
the merged export of the same checkpoint (trestle_ckpt export): the two must agree (relative
1e-5) while the base alone differs, and every adapter tensor must be loaded (no missing or
unexpected keys). Run by
tests/cli/hf_convert.sh where peft is installed; pinned as make_peft_fixtures.py:

    /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0 peft==0.21.2 accelerate==1.15.0
    python3 tests/reference/check_peft_adapter.py BASE_DIR ADAPTER_DIR MERGED_DIR
"""
import sys

import peft
import torch
import transformers


def main(base_dir, adapter_dir, merged_dir):
    load = dict(dtype=torch.float32, attn_implementation="eager")
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, **load)
    model = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
    sd = peft.get_peft_model_state_dict(model)
    from safetensors.torch import load_file
    saved = load_file(adapter_dir + "/adapter_model.safetensors")
    assert set(sd) == set(saved), sorted(set(sd) ^ set(saved))
    assert all(torch.equal(sd[k], saved[k]) for k in saved)
    merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, **load).eval()
    gen = torch.Generator().manual_seed(3)
    vocab = base.config.vocab_size
    tokens = torch.randint(0, vocab, (2, base.config.max_position_embeddings), generator=gen)
    with torch.no_grad():
        a = model(input_ids=tokens).logits
        b = merged(input_ids=tokens).logits
        with model.disable_adapter():
            plain = model(input_ids=tokens).logits
    err = ((a - b).norm() / b.norm()).item()
    off = ((plain - b).norm() / b.norm()).item()
    print(f"peft on Trestle's adapters vs transformers on the merged export: logits relative "
          f"error {err:.3g} ({len(saved)} adapter tensors loaded; the base alone: {off:.3g})")
    assert err <= 1e-5, err
    assert off > 10 * err, "the adapters do not change the model: the check would show nothing"


if __name__ == "__main__":
    main(*sys.argv[1:4])
