# The cpu-strict device (runtime/device/device.h, a test mode): every device buffer is PROT_NONE outside
# ops, copies and collectives, and every pointer an op or a collective gets must be device
# memory. Training through it proves the model and the loop touch their buffers only through the
# device layer, on the layouts that move data around: one rank (GPT: learned positions, biases,
# evaluation), TP 2 with sequence parallelism (microbatch of 2: the block permutations),
# PP 2 (transfer buffers, per-token loss, pipelined evaluation) and DP 2 with the distributed
# optimizer and both overlaps (sharded state, NaN check, parameter norm). Each run must equal the
# plain cpu run value for value (the ops are the same; only where memory lives differs).
# Also: an unknown TRESTLE_DEVICE, and cuda where no GPU is usable, are diagnostics (exit 2).
. "$(dirname "$0")/lib.sh"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
flags="--allow-run-as-root --oversubscribe"

# values FILE: loss, grad norm and params norm of every record, as written.
values() {
    grep -o '"\(loss\|grad_norm\|params_norm\)":[^,}]*' "$1"
}

# same NP NAME ARGS...: train on cpu and on cpu-strict, compare the metrics.
same() {
    local np=$1 name=$2
    shift 2
    for dev in cpu cpu-strict; do
        local launch=()
        [ "$np" -gt 1 ] && launch=("$MPIEXEC" $flags -np "$np" -x TRESTLE_DEVICE)
        TRESTLE_DEVICE=$dev "${launch[@]}" "$RR" "$@" train.train_iters=3 logger.log_interval=1 \
            logger.output_dir="$TMP/o_${name}_$dev" logger.metrics_path="$TMP/$name.$dev.jsonl" \
            >"$TMP/out" 2>"$TMP/err"
        rc=$?
        expect_rc 0 "$name on $dev"
    done
    grep -q 'cpu-strict, whole pages' "$TMP/err" "$TMP/out" || { show; fail "$name: strict mode did not run"; }
    [ -s "$TMP/$name.cpu.jsonl" ] || fail "$name: no metrics"
    cmp -s <(values "$TMP/$name.cpu.jsonl") <(values "$TMP/$name.cpu-strict.jsonl") || {
        diff <(values "$TMP/$name.cpu.jsonl") <(values "$TMP/$name.cpu-strict.jsonl")
        fail "$name: cpu-strict differs from cpu"
    }
}

same 1 single --recipe gpt_tiny_pretrain validation.eval_interval=2 validation.eval_iters=1 \
    logger.log_params_norm=true
# bf16: the half-precision weight copy and the half-precision saved activations (the linear
# layers' inputs) are device memory, cast and read by ops only.
same 1 single_bf16 --recipe gpt_tiny_pretrain mixed_precision.preset=bf16_mixed
same 2 tp2_sp --recipe gpt_tiny_pretrain -tp 2 model.sequence_parallel=true train.micro_batch_size=2
same 2 pp2 --recipe llama_tiny_pretrain -pp 2 model.calculate_per_token_loss=true \
    validation.eval_interval=2 validation.eval_iters=1
same 2 dp2_distopt --recipe llama_tiny_pretrain ddp.use_distributed_optimizer=true \
    ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true ddp.check_for_nan_in_grad=true \
    logger.log_params_norm=true

# Fine-tuning: packed SFT sequences (document starts and position ids staged into the activation
# slots, per-rank position rows gathered on the device) under PP 2 and under TP 2 with sequence
# parallelism, and LoRA adapters under TP 2 loading their base weights from a checkpoint.
same 2 sft_pp2 --recipe llama_tiny_sft dataset.dataset_root="$SRC/data/sft_tiny" -pp 2
same 2 sft_tp2_sp --recipe llama_tiny_sft dataset.dataset_root="$SRC/data/sft_tiny" -tp 2 \
    dataset.pad_seq_to_mult=2 \
    model.sequence_parallel=true
rr --recipe llama_tiny_pretrain train.train_iters=2 checkpoint.save="$TMP/pt" \
    checkpoint.save_interval=2 validation.eval_iters=0 logger.output_dir="$TMP/o_pt"
expect_rc 0 "pretraining for the LoRA base"
same 2 lora_tp2 --recipe llama_tiny_lora dataset.dataset_root="$SRC/data/sft_tiny" -tp 2 \
    checkpoint.pretrained_checkpoint="$TMP/pt"

# Checkpoints through the device layer: DP 2 with the distributed optimizer (moments assembled
# on the device, then staged to the host) and fp16 (the loss scaler's state). Saved and resumed
# under cpu-strict, the resumed iterations equal the uninterrupted cpu run's.
ck() {
    local dev=$1 name=$2
    shift 2
    TRESTLE_DEVICE=$dev "$MPIEXEC" $flags -np 2 -x TRESTLE_DEVICE "$RR" --recipe llama_tiny_pretrain \
        ddp.use_distributed_optimizer=true mixed_precision.preset=fp16_mixed \
        mixed_precision.initial_loss_scale=65536 train.train_iters=4 logger.log_interval=1 \
        logger.output_dir="$TMP/o_$name" logger.metrics_path="$TMP/$name.jsonl" "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "checkpoint run $name"
}
ck cpu ck_full
ck cpu-strict ck_saved checkpoint.save="$TMP/ck" checkpoint.save_interval=2
expect_in "$TMP/out" "checkpoint: saved iteration 2" "cpu-strict save"
ck cpu-strict ck_resumed checkpoint.load="$TMP/ck" checkpoint.ckpt_step=2
[ "$(grep -c '"type":"train"' "$TMP/ck_resumed.jsonl")" = 2 ] || fail "the resumed run should log iterations 3 and 4"
cmp -s <(values "$TMP/ck_full.jsonl" | tail -n "$(values "$TMP/ck_resumed.jsonl" | wc -l)") \
    <(values "$TMP/ck_resumed.jsonl") || {
    diff <(values "$TMP/ck_full.jsonl") <(values "$TMP/ck_resumed.jsonl")
    fail "a checkpoint saved and resumed under cpu-strict differs from the uninterrupted cpu run"
}

TRESTLE_DEVICE=tpu rr --recipe llama_tiny_pretrain train.train_iters=1 logger.output_dir="$TMP/o"
expect_rc 2 "unknown device"
expect_in "$TMP/err" "device.unknown" "unknown device diagnostic"
# This machine has no usable GPU (CI never has): cuda is refused, whatever the build.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    TRESTLE_DEVICE=cuda rr --recipe llama_tiny_pretrain train.train_iters=1 \
        logger.output_dir="$TMP/o"
    expect_rc 2 "cuda without a GPU"
    expect_in "$TMP/err" "device.unavailable" "cuda without a GPU diagnostic"
fi
echo OK
