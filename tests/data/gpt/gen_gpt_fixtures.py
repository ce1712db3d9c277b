#!/usr/bin/env python3
"""Writes the GPT-dataset fixtures with megatron-core's own dataset builder.

Run once by hand (outputs are committed; CI never runs this):
    pip install megatron-core==0.16.1 numpy     # pulls torch (CPU is enough); the wheel ships the
                                                # compiled helpers_cpp, so nothing is compiled
    python3 tests/data/gpt/gen_gpt_fixtures.py tests/data/gpt

It writes two small indexed datasets (ds_a, ds_b) with megatron's IndexedDatasetBuilder, runs
BlendedMegatronDatasetBuilder + GPTDataset / MockGPTDataset / BlendedDataset for several configs
and records, per config <name>.txt:
    cfg <key> <value...>                     the inputs (see test_data_gpt.c for the keys)
    N <split> <len|none>                     length of the split's top-level dataset
    D|X|H <split> <part> <n> <checksum> [v]  document / sample (flattened pairs) / shuffle index
    B|C <split> <n> <checksum> [v]           blended dataset_index / dataset_sample_index
    T|L|M|P <split> <i> <values...>          tokens / labels / loss_mask / position_ids of sample i
checksum = sum((k + 1) * v) mod 2**64; values are listed in full when there are at most 3000.
"""
import os
import sys
import tempfile

import numpy
import torch

from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from megatron.core.datasets.utils import get_blend_from_list

VOCAB, EOD = 1000, 999
SPLITS = ("train", "valid", "test")


class Tokenizer:
    vocab_size = VOCAB
    eod = EOD
    unique_identifiers = {"class": "Tokenizer", "vocab_size": VOCAB, "eod": EOD}

    @property
    def pad(self):
        raise AttributeError("no pad")  # megatron then pads with -1


def write_dataset(out_dir, name, n_docs, lo, hi, seed):
    rng = numpy.random.RandomState(seed)
    b = IndexedDatasetBuilder(os.path.join(out_dir, name + ".bin"), dtype=numpy.uint16)
    for _ in range(n_docs):
        n = rng.randint(lo, hi + 1)
        doc = rng.randint(0, VOCAB - 1, size=n - 1).tolist() + [EOD]
        b.add_item(torch.tensor(doc))
        b.end_document()
    b.finalize(os.path.join(out_dir, name + ".idx"))


def checksum(values):
    return sum((k + 1) * int(v) for k, v in enumerate(values)) % (1 << 64)


def array_line(tag, head, values):
    values = numpy.asarray(values).reshape(-1).tolist()
    line = "%s %s %d %d" % (tag, head, len(values), checksum(values))
    if len(values) <= 3000:
        line += " " + " ".join(map(str, values))
    return line


def run(out_dir, name, cfg, sizes, n_show=6):
    cache = tempfile.mkdtemp()
    prefix = lambda words: [w if i % 2 == 0 and len(words) % 2 == 0 and _isnum(w) else os.path.join(out_dir, w)
                            for i, w in enumerate(words)]
    kwargs = dict(
        random_seed=cfg["seed"], sequence_length=cfg["seq_length"], tokenizer=Tokenizer(),
        reset_position_ids=cfg.get("reset_position_ids", False), reset_attention_mask=False,
        eod_mask_loss=cfg.get("eod_mask_loss", False), path_to_cache=cache,
        add_extra_token_to_sequence=cfg.get("extra", 1) == 1,
        drop_last_partial_validation_sequence=cfg.get("drop_last_valid", 1) == 1,
        mid_level_dataset_surplus=cfg.get("surplus", 0.005), create_attention_mask=False)
    lines = []
    for k in ("seed", "seq_length", "extra", "drop_last_valid", "reset_position_ids", "eod_mask_loss"):
        lines.append("cfg %s %d" % (k, int(cfg.get(k, {"extra": 1, "drop_last_valid": 1}.get(k, 0)))))
    lines.append("cfg surplus %r" % cfg.get("surplus", 0.005))
    lines.append("cfg eod %d" % EOD)
    lines.append("cfg sizes %s" % " ".join("none" if s is None else str(s) for s in sizes))
    cls = GPTDataset
    if "blend" in cfg:
        kwargs["blend"] = get_blend_from_list(prefix(cfg["blend"].split()))
        kwargs["split"] = cfg["split"]
        lines += ["cfg blend %s" % cfg["blend"], "cfg split %s" % cfg["split"]]
    elif "per_split" in cfg:
        kwargs["blend_per_split"] = [None if b is None else get_blend_from_list(prefix(b.split()))
                                     for b in cfg["per_split"]]
        for sp, b in zip(SPLITS, cfg["per_split"]):
            if b is not None:
                lines.append("cfg blend_%s %s" % (sp, b))
    else:
        cls = MockGPTDataset
        lines.append("cfg mock %d" % VOCAB)
    config = GPTDatasetConfig(**kwargs)
    datasets = BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()
    for sp, ds in zip(SPLITS, datasets):
        if ds is None:
            lines.append("N %s none" % sp)
            continue
        lines.append("N %s %d" % (sp, len(ds)))
        parts = ds.datasets if isinstance(ds, BlendedDataset) else [ds]
        for i, part in enumerate(parts):
            lines.append(array_line("D", "%s %d" % (sp, i), part.document_index))
            lines.append(array_line("X", "%s %d" % (sp, i), part.sample_index))
            lines.append(array_line("H", "%s %d" % (sp, i), part.shuffle_index))
        if isinstance(ds, BlendedDataset):
            lines.append(array_line("B", sp, ds.dataset_index))
            lines.append(array_line("C", sp, ds.dataset_sample_index))
        show = sorted(set(list(range(min(n_show, len(ds)))) + [len(ds) - 1]))
        for i in show:
            s = ds[i]
            for tag, key in (("T", "tokens"), ("L", "labels"), ("M", "loss_mask"), ("P", "position_ids")):
                lines.append("%s %s %d %s" % (tag, sp, i, " ".join(str(int(v)) for v in s[key].tolist())))
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _isnum(w):
    try:
        float(w)
        return True
    except ValueError:
        return False


def main(out_dir):
    # BlendedDataset asks torch.distributed for the rank: a one-process gloo group answers.
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29517", rank=0,
                                         world_size=1)
    write_dataset(out_dir, "ds_a", 80, 1, 40, 11)
    write_dataset(out_dir, "ds_b", 50, 5, 60, 22)
    run(out_dir, "single", dict(seed=1234, seq_length=16, blend="ds_a", split="8,1,1"), [300, 40, 12])
    run(out_dir, "single_one_epoch", dict(seed=7, seq_length=8, blend="ds_a", split="90,8,2",
                                          reset_position_ids=True, eod_mask_loss=True), [50, 3, 1])
    run(out_dir, "single_last_epoch_joined", dict(seed=3, seq_length=16, blend="ds_b", split="1"), [250, 0, 0])
    run(out_dir, "no_extra_token", dict(seed=5, seq_length=12, blend="ds_a", split="6,3,1", extra=0,
                                        drop_last_valid=0), [100, 37, 9])
    run(out_dir, "blend_weighted", dict(seed=1234, seq_length=16, blend="0.3 ds_a 0.7 ds_b",
                                        split="90,5,5"), [200, 30, 10])
    run(out_dir, "blend_unweighted", dict(seed=99, seq_length=16, blend="ds_a ds_b", split="8,1,1"),
        [100, 20, 5])
    run(out_dir, "per_split", dict(seed=1234, seq_length=16, per_split=["2 ds_a 1 ds_b", "ds_b", None]),
        [120, 25, 5])
    run(out_dir, "mock", dict(seed=1234, seq_length=64), [40, 8, 4], n_show=3)


if __name__ == "__main__":
    main(sys.argv[1])
