# Under mpirun, a world too small for the MoE grid (EP x ETP x PP does not divide it) ends every
# rank with exit code 2 and the expert-grid error is printed once, by rank 0.
. "$(dirname "$0")/lib.sh"
np=2
flags="--allow-run-as-root --oversubscribe"
args=(--recipe moe_tiny_pretrain model.expert_model_parallel_size=4 logger.output_dir="$TMP/o")

# shellcheck disable=SC2086
out=$("$MPIEXEC" $flags -np $np sh -c '"$@"; echo "rank-exit=$?"' sh "$RR" "${args[@]}" 2>&1)
exits=$(printf '%s\n' "$out" | grep -c '^rank-exit=2$')
[ "$exits" -eq $np ] || { echo "$out"; fail "$exits of $np ranks exited with code 2"; }
n=$(printf '%s\n' "$out" | grep -c 'error \[parallel.world_divisible_by_expert_size\]')
[ "$n" -eq 1 ] || { echo "$out"; fail "the expert-grid error appeared $n times, expected once"; }
[ ! -e "$TMP/o/config.yaml" ] || fail "a failed launch wrote its config"
echo OK
