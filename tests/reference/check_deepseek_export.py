#!/usr/bin/env python3
"""Loads a directory Trestle exported (trestle_ckpt export) with transformers and compares its
logits with a fixture's: written for DeepseekV3ForCausalLM (make_hf_deepseek_fixtures.py), it
reads any architecture AutoModelForCausalLM knows (the MoE fixtures of make_hf_moe_fixtures.py
too). Run by hand (torch 2.15.0, transformers 5.24.0):

    build/trestle_ckpt import --hf tests/reference/fixtures/hf_deepseek_v3 --out /tmp/ck
    build/trestle_ckpt export /tmp/ck --hf-out /tmp/out --hf-config tests/reference/fixtures/hf_deepseek_v3
    python3 tests/reference/check_deepseek_export.py /tmp/out tests/reference/fixtures/hf_deepseek_v3
"""
import os
import struct
import sys

import numpy as np
import torch
import transformers


def read(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"TRMFIX01"
        out = {}
        for _ in range(struct.unpack("<I", f.read(4))[0]):
            name = f.read(struct.unpack("<I", f.read(4))[0]).decode()
            count = struct.unpack("<Q", f.read(8))[0]
            out[name] = np.frombuffer(f.read(4 * count), dtype="<f4")
    return out


def main():
    exported, fixture = sys.argv[1], sys.argv[2]
    model = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    e = read(os.path.join(fixture, "expected.bin"))
    tokens = torch.tensor(e["tokens"].reshape(2, -1).astype("int64"))
    logits = model(input_ids=tokens).logits.detach().numpy().reshape(-1)
    err = np.abs(logits - e["logits"]).max() / np.abs(e["logits"]).max()
    print(f"{exported}: logits relative error {err:.3g} against {fixture}")
    sys.exit(0 if err <= 1e-5 else 1)


if __name__ == "__main__":
    main()
