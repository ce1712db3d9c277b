# Pretrain -> SFT -> LoRA, as the README shows: llama_tiny_pretrain on the bundled text saves a
# checkpoint; llama_tiny_sft and llama_tiny_lora load its weights
# (checkpoint.pretrained_checkpoint) and fine-tune on the shipped JSONL set (data/sft_tiny), each
# with a falling loss (LoRA's rank-8 adapters on a 10-iteration base move it less: ~6%). A LoRA
# run resumes from its own checkpoint (adapters and optimizer state)
# with bitwise the losses of the uninterrupted run. Refusals: SFT without dataset_root, LoRA
# settings the runtime lacks.
. "$(dirname "$0")/lib.sh"
sft_data="$SRC/data/sft_tiny"

# losses FILE: the training losses of a metrics.jsonl, one per line.
losses() {
    python3 -c 'import json,sys
for r in map(json.loads, open(sys.argv[1])):
    if r["type"] == "train": print(repr(r["loss"]))' "$1"
}

# falls FILE N RATIO: N training losses whose last five average below RATIO x the first five.
falls() {
    losses "$1" | python3 -c 'import sys
l = [float(x) for x in sys.stdin]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f} over {len(l)} iterations")
sys.exit(0 if len(l) == int(sys.argv[1]) and last < float(sys.argv[2]) * first else 1)' "$2" "$3"
}

rr --recipe llama_tiny_pretrain train.train_iters=10 dataset.type=text \
    dataset.data_path="$SRC/data/english_corpus.txt" checkpoint.save="$TMP/pt" \
    checkpoint.save_interval=10 validation.eval_iters=0
expect_rc 0 "pretraining run"
[ -d "$TMP/pt/iter_0000010" ] || { show; fail "no checkpoint at iteration 10"; }

rr --recipe llama_tiny_sft dataset.dataset_root="$sft_data" \
    checkpoint.pretrained_checkpoint="$TMP/pt" train.train_iters=30 logger.log_interval=1 \
    logger.output_dir="$TMP/sft"
expect_rc 0 "SFT run"
expect_in "$TMP/out" "loaded weights from $TMP/pt/iter_0000010" "SFT: pretrained weights"
falls "$TMP/sft/metrics.jsonl" 30 0.8 || { show; fail "SFT loss did not fall"; }

lora="--recipe llama_tiny_lora dataset.dataset_root=$sft_data checkpoint.pretrained_checkpoint=$TMP/pt
      train.train_iters=30 logger.log_interval=1 validation.eval_iters=0 optimizer.lr=1e-2"
rr $lora checkpoint.save="$TMP/lora" checkpoint.save_interval=15
expect_rc 0 "LoRA run"
expect_in "$TMP/out" "loaded weights from $TMP/pt/iter_0000010" "LoRA: pretrained weights"
falls "$TMP/lora/metrics.jsonl" 30 0.97 || { show; fail "LoRA loss did not fall"; }
# Resume from iteration 15: adapters, their optimizer state and the data position come back.
rr $lora checkpoint.load="$TMP/lora" checkpoint.ckpt_step=15 logger.output_dir="$TMP/resumed"
expect_rc 0 "LoRA resume"
expect_in "$TMP/out" "iteration 15" "LoRA: resumed at iteration 15"
[ "$(losses "$TMP/lora/metrics.jsonl" | tail -15)" = "$(losses "$TMP/resumed/metrics.jsonl")" ] ||
    { show; fail "resumed LoRA losses differ from the uninterrupted run"; }

rr --recipe llama_tiny_sft logger.output_dir="$TMP/noroot"
expect_rc 2 "SFT without dataset_root"
expect_in "$TMP/err" "data.sft_needs_dataset_root" "missing dataset_root"

rr $lora peft.dropout=0.1 peft.dropout_position=post logger.output_dir="$TMP/dropout"
expect_rc 2 "LoRA with dropout after the projection"
expect_in "$TMP/err" "peft.dropout_position" "post dropout refused naming peft.dropout_position"
echo OK
