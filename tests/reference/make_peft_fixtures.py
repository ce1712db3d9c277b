#!/usr/bin/env python3
"""Writes PEFT LoRA adapter directories for tests/unit/hf/test_hf_adapter.c: the `peft` package
puts a LoRA (r 4, lora_alpha 8, every linear layer of the decoder) on the tiny random
LlamaForCausalLM and Qwen3ForCausalLM of make_hf_fixtures.py, every lora_A / lora_B drawn away
from its initial value, and saves it with save_pretrained (adapter_config.json +
adapter_model.safetensors); expected.bin holds the adapted model's logits and loss for the
batch of make_hf_fixtures.py (the TRMFIX01 format of make_fixtures.py). Megatron fuses q/k/v
and gate/up into one layer with one LoRA A, so q_proj, k_proj and v_proj share their lora_A (and
gate_proj, up_proj theirs): a PEFT adapter of that form is what a fused adapter is. Rerun only
when the cases change (CI reads the committed files):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch==2.15.0 transformers==5.24.0 \
        peft==0.21.2 accelerate==1.15.0
    /tmp/venv/bin/python tests/reference/make_peft_fixtures.py
"""
import json
import os

import peft
import torch
import torch.nn.functional as F
import transformers

from make_fixtures import SEQ, VOCAB, write

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SHARED_A = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj"}


def make(base_name, out_name):
    base = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(HERE, "fixtures", base_name), dtype=torch.float32,
        attn_implementation="eager")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS,
                          bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, cfg).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for layer in model.base_model.model.model.layers:
            mods = {**{n: getattr(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj",
                                                               "o_proj")},
                    **{n: getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")}}
            for name in TARGETS:
                m = mods[name]
                a, b = m.lora_A["default"].weight, m.lora_B["default"].weight
                if name in SHARED_A:
                    a.copy_(mods[SHARED_A[name]].lora_A["default"].weight)
                else:
                    a.copy_(0.3 * (torch.rand(a.shape, generator=gen) - 0.5))
                b.copy_(0.3 * (torch.rand(b.shape, generator=gen) - 0.5))
    out = os.path.join(HERE, "fixtures", out_name)
    model.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))
    # The committed fixture names its base by the fixture's name, not this machine's path.
    path = os.path.join(out, "adapter_config.json")
    with open(path) as f:
        conf = json.load(f)
    conf["base_model_name_or_path"] = base_name
    with open(path, "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -1
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-1)
    write(os.path.join(out, "expected.bin"),
          [("tokens", tokens.float()), ("targets", targets.float()), ("logits", logits),
           ("loss", loss.reshape(1))])
    print(f"{out}: loss {loss.item():.6f}")


def main():
    make("hf_llama", "peft_llama")
    make("hf_qwen3", "peft_qwen3")


if __name__ == "__main__":
    main()
