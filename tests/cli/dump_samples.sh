# --dump-samples N prints what the model trains on: for llama_tiny_pretrain's mock data, the
# documents and tokens megatron-core 0.16.1's MockGPTDataset gives for the same settings
# (tests/reference/fixtures/mock_llama_tiny_samples.txt, written by make_mock_samples.py); for
# indexed data the prefix and its document ids, for text data the tokens; the launch inputs are
# required, as for a launch.
. "$(dirname "$0")/lib.sh"
rr --recipe llama_tiny_pretrain --dump-samples 4
expect_rc 0 "mock samples"
tail -n +2 "$TMP/out" | diff - "$SRC/tests/reference/fixtures/mock_llama_tiny_samples.txt" ||
    fail "mock samples differ from megatron-core's"
expect_in "$TMP/out" "1065473 per epoch" "megatron-core's sample count"

rr --recipe llama_tiny_pretrain --dump-samples 2 dataset.data_path="$SRC/tests/data/gpt/ds_a" \
    "dataset.split='1,0,0'" model.vocab_size=1000 tokenizer.tokenizer_type=NullTokenizer \
    tokenizer.vocab_size=1000 dataset.path_to_cache="$TMP/cache"
expect_rc 0 "indexed samples"
expect_in "$TMP/out" "sample 1: $SRC/tests/data/gpt/ds_a documents" "prefix and documents"
[ "$(grep -c '^  tokens: ' "$TMP/out")" = 2 ] || { show; fail "two samples"; }

rr --recipe llama_tiny_pretrain --dump-samples 1 dataset.type=text \
    dataset.data_path="$SRC/data/english_corpus.txt"
expect_rc 0 "text samples"
expect_in "$TMP/out" "text file (no document index)" "text data"

rr --recipe llama_tiny_sft --dump-samples 1
expect_rc 2 "fine-tuning without its data"
expect_in "$TMP/err" "data.sft_needs_dataset_root" "launch inputs required"
echo OK
