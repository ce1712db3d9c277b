# A Hugging Face model directory (the tiny Llama, GPT-2 and Qwen3 of
# tests/reference/make_hf_fixtures.py) as the
# start of a run: --hf-model takes its dimensions over the recipe's (--explain names config.json)
# and loads its weights, on one rank and under TP 2; the same directory as
# checkpoint.pretrained_checkpoint loads too; an override that contradicts config.json stops the
# launch naming both values, and a LoRA run trains its adapters on the imported base.
. "$(dirname "$0")/lib.sh"
H="$SRC/tests/reference/fixtures/hf_llama"
# The fixture has no tokenizer.json and 64 token ids: mock data over a NullTokenizer of that size.
small=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=64 model.seq_length=12
       dataset.seq_length=12 train.train_iters=3 validation.eval_iters=0 logger.log_interval=1)

rr --recipe llama_tiny_pretrain --hf-model "$H" --explain model.ffn_hidden_size
expect_rc 0 "--explain with --hf-model"
expect_in "$TMP/out" "hf_llama/config.json  48   <- in effect" "config.json's MLP width"

cd "$TMP" || exit 1
rr --recipe llama_tiny_pretrain --hf-model "$H" "${small[@]}" logger.output_dir="$TMP/one"
expect_rc 0 "one-rank run from the HF model"
expect_in "$TMP/out" "loaded Hugging Face weights from $H" "the weights load"
expect_in "$TMP/out" "model: 19616 parameters (2 layers, hidden 32)" "the HF dimensions"

rr --recipe llama_tiny_pretrain checkpoint.pretrained_checkpoint="$H" "${small[@]}" \
    model.num_layers=2 model.hidden_size=32 model.ffn_hidden_size=48 \
    model.num_attention_heads=4 model.num_query_groups=2 model.kv_channels=8
expect_rc 2 "pretrained_checkpoint=HF dir without its rotary settings"
expect_in "$TMP/err" "hf.config_mismatch" "the mismatch id"
expect_in "$TMP/err" "model.rope_scaling" "the mismatched key named"

rr --recipe llama_tiny_pretrain --hf-model "$H" "${small[@]}" model.ffn_hidden_size=64
expect_rc 2 "an override contradicting config.json"
expect_in "$TMP/err" "model.ffn_hidden_size is 64 (argv[" "the override and where it came from"
expect_in "$TMP/err" "config.json gives 48" "config.json's value"

OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" --recipe llama_tiny_pretrain \
    --hf-model "$H" "${small[@]}" model.tensor_model_parallel_size=2 \
    logger.output_dir="$TMP/tp2" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "TP 2 run from the HF model"
expect_in "$TMP/out" "loaded Hugging Face weights" "the TP 2 weights load"
# Each rank read its slice of the same weights: the first loss is the one-rank run's.
first() { python3 -c 'import json,sys
print(next(r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"))' "$1"; }
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))' \
    "$(first "$TMP/one/metrics.jsonl")" "$(first "$TMP/tp2/metrics.jsonl")" ||
    fail "TP 2's first loss $(first "$TMP/tp2/metrics.jsonl") is not the one-rank $(first "$TMP/one/metrics.jsonl")"

# TP 4 over the fixture's 2 query groups: each pair of ranks reads its group's key and value
# heads (a copy each) and its own query head; the first loss is still the one-rank run's.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$RR" --recipe llama_tiny_pretrain \
    --hf-model "$H" "${small[@]}" model.tensor_model_parallel_size=4 \
    logger.output_dir="$TMP/tp4" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "TP 4 run from the HF model (TP above its 2 query groups)"
expect_in "$TMP/out" "loaded Hugging Face weights" "the TP 4 weights load"
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))' \
    "$(first "$TMP/one/metrics.jsonl")" "$(first "$TMP/tp4/metrics.jsonl")" ||
    fail "TP 4's first loss $(first "$TMP/tp4/metrics.jsonl") is not the one-rank $(first "$TMP/one/metrics.jsonl")"

rr --recipe llama_tiny_pretrain --hf-model "$H" "${small[@]}" peft.scheme=lora peft.dim=4 \
    peft.alpha=8 logger.output_dir="$TMP/lora"
expect_rc 0 "LoRA on the imported base"
expect_in "$TMP/out" "loaded Hugging Face weights" "the LoRA base loads"
expect_in "$TMP/out" "adapter parameters train" "adapters train"
rr --recipe gpt_tiny_pretrain --hf-model "$SRC/tests/reference/fixtures/hf_gpt2" "${small[@]}" \
    logger.output_dir="$TMP/gpt2"
expect_rc 0 "GPT-2 from the HF model"
expect_in "$TMP/out" "model: 29952 parameters (2 layers, hidden 32)" "GPT-2's dimensions"
# Qwen3 (q/k norms) into the Qwen3 recipe, on one rank and under TP 2 with SP: the same first loss.
Q="$SRC/tests/reference/fixtures/hf_qwen3"
small+=(tokenizer.tokenizer_model=null train.global_batch_size=4)
rr --recipe qwen3_600m_pretrain --hf-model "$Q" "${small[@]}" logger.output_dir="$TMP/q1"
expect_rc 0 "Qwen3 from the HF model"
expect_in "$TMP/out" "loaded Hugging Face weights from $Q" "the Qwen3 weights load"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" --recipe qwen3_600m_pretrain \
    --hf-model "$Q" "${small[@]}" model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    logger.output_dir="$TMP/q2" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "Qwen3 TP 2 + SP from the HF model"
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))' \
    "$(first "$TMP/q1/metrics.jsonl")" "$(first "$TMP/q2/metrics.jsonl")" ||
    fail "Qwen3 TP 2's first loss $(first "$TMP/q2/metrics.jsonl") is not the one-rank $(first "$TMP/q1/metrics.jsonl")"
echo "ok"
