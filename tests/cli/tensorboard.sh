# logger.tensorboard_dir: the README's main job (shortened) writes a TensorBoard event file that
# the tensorboard package reads back with the scalars of metrics.jsonl (tests/cli/tb_check.py
# also checks every record's masked CRC32C itself); tensorboard_log_interval and the
# log_*_to_tensorboard switches decide what is written. Skipped (77) without the package.
. "$(dirname "$0")/lib.sh"
python3 -c 'import tensorboard' 2>/dev/null || {
    echo "SKIP: the tensorboard Python package is not installed (pip install tensorboard)"
    exit 77
}
main=(--recipe llama_tiny_pretrain dataset.type=text dataset.data_path="$SRC/data/english_corpus.txt"
      train.train_iters=24 logger.log_interval=1 validation.eval_interval=8 validation.eval_iters=2)
rr "${main[@]}" logger.output_dir="$TMP/run" logger.tensorboard_dir="$TMP/tb" \
    logger.log_validation_ppl_to_tensorboard=true logger.log_throughput_to_tensorboard=true \
    logger.log_memory_to_tensorboard=true logger.log_timers_to_tensorboard=true \
    logger.log_world_size_to_tensorboard=true
expect_rc 0 "run with TensorBoard"
expect_in "$TMP/out" "TensorBoard events written to $TMP/tb" "the run names the event directory"
python3 "$SRC/tests/cli/tb_check.py" "$TMP/tb" "$TMP/run/metrics.jsonl" 1 \
    "lm loss,learning-rate,grad-norm,lm loss validation,lm loss validation ppl,throughput,tokens-per-second,mem-rss-bytes,mem-max-rss-bytes,iteration-time,world-size" \
    "loss-scale" || fail "events differ from metrics.jsonl"

# Every third iteration, default switches: no perplexity, throughput, memory, timers, world.
rr "${main[@]}" logger.output_dir="$TMP/run3" logger.tensorboard_dir="$TMP/tb3" \
    logger.tensorboard_log_interval=3
expect_rc 0 "run with tensorboard_log_interval=3"
python3 "$SRC/tests/cli/tb_check.py" "$TMP/tb3" "$TMP/run3/metrics.jsonl" 3 \
    "lm loss,learning-rate,grad-norm,lm loss validation" \
    "lm loss validation ppl,throughput,mem-rss-bytes,iteration-time,world-size" ||
    fail "interval 3 or the switches not honoured"

# MoE balance: the balancing and z losses of every iteration, as metrics.jsonl logs them.
rr --recipe moe_tiny_pretrain train.train_iters=6 logger.log_interval=1 validation.eval_interval=3 \
    validation.eval_iters=1 model.moe_z_loss_coeff=0.001 logger.output_dir="$TMP/runm" \
    logger.tensorboard_dir="$TMP/tbm"
expect_rc 0 "MoE run with TensorBoard"
python3 "$SRC/tests/cli/tb_check.py" "$TMP/tbm" "$TMP/runm/metrics.jsonl" 1 \
    "lm loss,load_balancing_loss,z_loss" "" || fail "MoE balance events"

# Two ranks (DP 2): only the logging rank writes, one file.
rr_mpi() { "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }
rr_mpi "${main[@]}" train.train_iters=6 validation.eval_interval=3 logger.output_dir="$TMP/run2" \
    logger.tensorboard_dir="$TMP/tb2"
expect_rc 0 "two-rank run with TensorBoard"
python3 "$SRC/tests/cli/tb_check.py" "$TMP/tb2" "$TMP/run2/metrics.jsonl" 1 \
    "lm loss,learning-rate,grad-norm" "" || fail "two-rank events"
echo OK
