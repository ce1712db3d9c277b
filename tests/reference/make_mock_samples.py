#!/usr/bin/env python3
"""Writes what megatron-core's MockGPTDataset gives as the first training samples of
llama_tiny_pretrain's data settings (seed 1234, 64 tokens, vocabulary 256 with end-of-document 0:
the byte-level tokenizer; split forced to 1,1,1; Megatron's sample counts for 200 iterations of
8 samples, evaluation every 100 for 4 iterations), in run_recipe --dump-samples' format, for
tests/cli/dump_samples.sh. Run by hand (the output is committed):
    pip install --no-deps megatron-core==0.16.1    # next to torch 2.15.0 (CPU is enough), numpy 2.4.6
    python3 tests/reference/make_mock_samples.py > tests/reference/fixtures/mock_llama_tiny_samples.txt
"""
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset


class ByteTokenizer:
    vocab_size = 256
    eod = 0
    pad = -1
    unique_identifiers = {"class": "ByteTokenizer"}


N = 4
config = GPTDatasetConfig(random_seed=1234, sequence_length=64, split="9999,8,2",
                          tokenizer=ByteTokenizer(), reset_position_ids=False,
                          reset_attention_mask=False, eod_mask_loss=False)
train = BlendedMegatronDatasetBuilder(MockGPTDataset, [200 * 8, (200 // 100 + 1) * 4 * 8, 4 * 8],
                                      lambda: True, config).build()[0]
for i in range(N):
    j = train.shuffle_index[i]
    first, last = train.sample_index[j][0], train.sample_index[j + 1][0]
    if train.sample_index[j + 1][1] + 1 == 0:
        last -= 1
    docs = " ".join(str(int(train.document_index[k])) for k in range(first, last + 1))
    s = train[i]
    tokens = s["tokens"].tolist() + [s["labels"][-1].item()]
    print(f"sample {i}: mock documents {docs}")
    print("  tokens: " + " ".join(str(t) for t in tokens))
