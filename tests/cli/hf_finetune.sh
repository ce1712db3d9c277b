# The README's fine-tuning walk-through from a Hugging Face directory, on the tiny Llama
# fixture (the README shows it for Llama 3.2 1B): import it as a Trestle checkpoint, LoRA
# fine-tune from the directory, export the adapters alone (PEFT's files) and the merged model,
# generate from the merged directory and from the LoRA checkpoint (the same greedy tokens, and
# not the base model's).
. "$(dirname "$0")/lib.sh"
CK="$(dirname "$RR")/trestle_ckpt"
GEN="$(dirname "$RR")/trestle_generate"
HF="$SRC/tests/reference/fixtures/hf_llama"
# The fixture has no tokenizer.json: mock data over a NullTokenizer of its 64 ids.
data=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=64 model.seq_length=12
      dataset.seq_length=12 validation.eval_iters=0 logger.log_interval=5)
lora=(peft.scheme=lora peft.dim=4 peft.alpha=8)
step() { # WHAT CMD...: run, keep the output, stop on failure
    what=$1
    shift
    "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "$what"
}
cd "$TMP" || exit 1
mkdir -p export

step "1. import" "$CK" import --hf "$HF" --out ckpt/base
step "2. LoRA fine-tune" "$RR" --recipe llama_tiny_pretrain --hf-model "$HF" "${data[@]}" \
    "${lora[@]}" train.train_iters=30 optimizer.lr=0.01 optimizer.min_lr=0.01 \
    checkpoint.save=ckpt/lora logger.output_dir=logs/lora
expect_in "$TMP/out" "loaded Hugging Face weights" "the base comes from the directory"
exp=(--hf-config "$HF" --recipe llama_tiny_pretrain tokenizer.tokenizer_type=NullTokenizer
     tokenizer.vocab_size=64 "${lora[@]}" checkpoint.pretrained_checkpoint="$HF")
step "3a. export the adapters" "$CK" export ckpt/lora --hf-out export/adapter --adapter-only "${exp[@]}"
[ -f export/adapter/adapter_config.json ] && [ -f export/adapter/adapter_model.safetensors ] ||
    fail "the adapter directory lacks PEFT's files"
step "3b. export the merged model" "$CK" export ckpt/lora --hf-out export/merged "${exp[@]}"
prompt="5 17 33 2 60"
step "4. generate from the merged model" "$GEN" --hf export/merged --prompt-ids "$prompt" --ids
merged=$(cat "$TMP/out")
step "generate from the LoRA checkpoint" "$GEN" --ckpt ckpt/lora "${exp[@]}" --prompt-ids "$prompt" \
    --ids
[ "$(cat "$TMP/out")" = "$merged" ] ||
    fail "the checkpoint generated $(cat "$TMP/out"), the merged export $merged"
step "generate from the base" "$GEN" --hf "$HF" --prompt-ids "$prompt" --ids
[ "$(cat "$TMP/out")" != "$merged" ] || fail "the fine-tune did not change the generated tokens"
if python3 -c "import peft, transformers" 2>/dev/null; then
    step "peft on the adapters" python3 "$SRC/tests/reference/check_peft_adapter.py" "$HF" \
        export/adapter export/merged
    cat "$TMP/out"
fi
echo "ok"
