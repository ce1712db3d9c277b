# model.defer_embedding_wgrad_compute has its effect under pipeline parallelism: the dry run does
# not name it (nor its comm_overlap override) as a no-effect key; without PP (or without
# gradient_accumulation_fusion) the dry run and the launch refuse it under the same rule; a
# launch at PP 2 trains with it and logs the losses and grad norms of the run without it.
. "$(dirname "$0")/lib.sh"
pp2=(--recipe gpt_tiny_pretrain model.pipeline_model_parallel_size=2)

rr "${pp2[@]}" --dry-run --world-size 2 model.defer_embedding_wgrad_compute=true \
    model.wgrad_deferral_limit=2
expect_rc 0 "PP 2 accepts it"
grep -q "model.defer_embedding_wgrad_compute\|model.wgrad_deferral_limit" "$TMP/err" &&
    { show; fail "a key with its effect is named"; }
rr "${pp2[@]}" --dry-run --world-size 2 comm_overlap.tp_comm_overlap=false \
    comm_overlap.defer_embedding_wgrad_compute=true --print-config
expect_rc 0 "the override"
grep -q "comm_overlap.defer_embedding_wgrad_compute" "$TMP/err" &&
    { show; fail "the override is named"; }
awk '/^[a-z_]+:$/ { s = $1 } s == "model:" && /defer_embedding_wgrad_compute: true/ { f = 1 }
     END { exit !f }' "$TMP/out" || { show; fail "the override is not taken"; }

# Refused alike by the dry run and the launch.
rr --recipe gpt_tiny_pretrain --dry-run model.defer_embedding_wgrad_compute=true
expect_rc 2 "PP 1: dry run"
expect_in "$TMP/err" "error [parallel.defer_embedding_wgrad]" "PP 1: the rule"
rr --recipe gpt_tiny_pretrain train.train_iters=1 model.defer_embedding_wgrad_compute=true \
    logger.output_dir="$TMP/pp1"
expect_rc 2 "PP 1: launch"
expect_in "$TMP/err" "error [parallel.defer_embedding_wgrad]" "PP 1: the launch's rule"
rr "${pp2[@]}" --dry-run --world-size 2 model.defer_embedding_wgrad_compute=true \
    model.gradient_accumulation_fusion=false
expect_rc 2 "without gradient_accumulation_fusion"
expect_in "$TMP/err" "model.defer_embedding_wgrad_compute needs model.gradient_accumulation_fusion" \
    "the fusion rule"

# A launch at PP 2: the same log as without deferral (every microbatch kept: the same sums).
launch() {
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" "${pp2[@]}" train.train_iters=3 \
        logger.log_interval=1 validation.eval_iters=0 logger.output_dir="$TMP/$1" "${@:2}" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "launch $1"
    grep -o "lm loss: [^|]*| grad norm: [^|]*" "$TMP/out" >"$TMP/$1.log"
    [ "$(wc -l <"$TMP/$1.log")" -eq 3 ] || { show; fail "launch $1 did not log 3 iterations"; }
}
launch plain
launch deferred model.defer_embedding_wgrad_compute=true
cmp -s "$TMP/plain.log" "$TMP/deferred.log" ||
    { diff "$TMP/plain.log" "$TMP/deferred.log"; fail "the deferred run logs other losses"; }
echo OK
