#!/usr/bin/env python3
"""Loads the merged exports test_hf_import.c's test_merged_export leaves behind with transformers
and compares their logits with the LoRA / DoRA model's logits Trestle computed before the merge
(the oracle for "the exported merged model is the adapter model"). Run by hand, not in CI:

    TRESTLE_HF_KEEP_MERGED=/tmp/merged ./build/test_hf_import
    python3 tests/reference/check_merged_export.py /tmp/merged   # torch 2.15.0, transformers 5.24.0

Each subdirectory holds config.json + model.safetensors (Trestle's export), trestle_tokens.i32
[rows] and trestle_logits.f32 [rows, vocab]; the rows are sequences of the config's positions
(Trestle's seq_length). Transformers must load every tensor (a missing or unexpected one is an
error, not a warning). Exits
nonzero when a relative error (max |difference| / max |Trestle|) is above 1e-5.
"""
import os
import sys

import numpy as np
import torch
import transformers


def main(root):
    worst = 0.0
    for tag in sorted(os.listdir(root)):
        d = os.path.join(root, tag)
        if not os.path.isfile(os.path.join(d, "trestle_logits.f32")):
            continue
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, output_loading_info=True
        )
        bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if bad:
            print(f"{tag}: {bad}")
            return 1
        model.eval()
        tokens = np.fromfile(os.path.join(d, "trestle_tokens.i32"), dtype=np.int32)
        vocab = model.config.vocab_size
        ref = np.fromfile(os.path.join(d, "trestle_logits.f32"), dtype=np.float32).reshape(-1, vocab)
        cfg = model.config
        seq = getattr(cfg, "n_positions", None) or cfg.max_position_embeddings
        ids = torch.tensor(tokens, dtype=torch.long).reshape(-1, seq)
        with torch.no_grad():
            got = model(input_ids=ids).logits.reshape(-1, vocab).numpy()
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        worst = max(worst, err)
        print(f"{tag}: {type(model).__name__} logits vs Trestle's adapter model: relative {err:.3g}")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; worst {worst:.3g}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
