# Under mpirun, a layout the world cannot hold ends every rank with exit code 2 and the error is
# printed once (by rank 0), not once per rank.
. "$(dirname "$0")/lib.sh"
np=3
flags="--allow-run-as-root --oversubscribe"
args=(--recipe llama_tiny_pretrain model.tensor_model_parallel_size=2 logger.output_dir="$TMP/o")

# shellcheck disable=SC2086
out=$("$MPIEXEC" $flags -np $np sh -c '"$@"; echo "rank-exit=$?"' sh "$RR" "${args[@]}" 2>&1)
exits=$(printf '%s\n' "$out" | grep -c '^rank-exit=2$')
[ "$exits" -eq $np ] || { echo "$out"; fail "$exits of $np ranks exited with code 2"; }
errors=$(printf '%s\n' "$out" | grep -c 'error \[')
"$RR" "${args[@]}" --dry-run --world-size $np >/dev/null 2>"$TMP/single"
expected=$(grep -c 'error \[' "$TMP/single")
[ "$expected" -ge 1 ] || fail "the dry run for $np ranks reports no error"
[ "$errors" -eq "$expected" ] || { echo "$out"; fail "$errors error lines, expected $expected (once, not per rank)"; }
[ ! -e "$TMP/o/config.yaml" ] || fail "a failed launch wrote its config"

# shellcheck disable=SC2086
"$MPIEXEC" $flags -np $np "$RR" "${args[@]}" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "mpirun returned $rc, expected 2"

# A world that fits: every rank gets through validation and group creation, then exit 3.
# shellcheck disable=SC2086
out=$("$MPIEXEC" $flags -np 2 sh -c '"$@"; echo "rank-exit=$?"' sh "$RR" "${args[@]}" 2>&1)
[ "$(printf '%s\n' "$out" | grep -c '^rank-exit=3$')" -eq 2 ] || { echo "$out"; fail "TP 2 on 2 ranks"; }
[ "$(printf '%s\n' "$out" | grep -c 'parallel layout: world 2')" -eq 1 ] || { echo "$out"; fail "banner once"; }
echo OK
