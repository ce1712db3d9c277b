# Under mpirun, a layout the world cannot hold ends every rank with exit code 2 and the error is
# printed once (by rank 0), not once per rank: a dense layout that does not divide the world, and
# a world too small for the MoE grid (EP x ETP x PP must divide it too).
. "$(dirname "$0")/lib.sh"

expect_bad_launch 3 parallel.world_divisible_by_model_size \
    --recipe llama_tiny_pretrain model.tensor_model_parallel_size=2 logger.output_dir="$TMP/o"
expect_bad_launch 2 parallel.world_divisible_by_expert_size \
    --recipe moe_tiny_pretrain model.expert_model_parallel_size=4 logger.output_dir="$TMP/o"

# A world that fits a layout the training runtime cannot run yet (context parallelism over
# a2a+p2p): the capability rule refuses it in validation on every rank, before any group
# exists, reported once.
expect_bad_launch 2 runtime.context_parallel \
    --recipe llama_tiny_pretrain model.context_parallel_size=2 "model.cp_comm_type=[a2a+p2p]" \
    "model.hierarchical_context_parallel_sizes=[2,1]" \
    logger.output_dir="$TMP/o"
flags="--allow-run-as-root --oversubscribe"

# Data parallel on the same world trains: every rank exits 0, rank 0 alone logs.
args=(--recipe llama_tiny_pretrain train.train_iters=2 validation.eval_iters=0
      logger.log_interval=1 logger.output_dir="$TMP/dp")
# shellcheck disable=SC2086
out=$("$MPIEXEC" $flags -np 2 sh -c '"$@"; echo "rank-exit=$?"' sh "$RR" "${args[@]}" 2>&1)
[ "$(printf '%s\n' "$out" | grep -c '^rank-exit=0$')" -eq 2 ] || { echo "$out"; fail "DP 2 on 2 ranks"; }
[ "$(printf '%s\n' "$out" | grep -c 'metrics written to')" -eq 1 ] || { echo "$out"; fail "one log"; }
echo OK
