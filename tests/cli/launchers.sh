# mpirun on one node, and with a hostfile (here naming this machine with two slots, as a cluster
# hostfile names each node): the world and the ranks per node come from the launcher, for the
# dry run (no MPI in it) and the run; the two-rank run trains as one rank does (DP 2 = the
# serial run). docs/launchers.md; Slurm's srun and sbatch are tests/cli/slurm.sh.
. "$(dirname "$0")/lib.sh"
flags=(--allow-run-as-root --oversubscribe)
job=(--recipe llama_tiny_pretrain train.train_iters=3 logger.log_interval=1 validation.eval_iters=0)
mr() { "$MPIEXEC" "${flags[@]}" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }

mr -np 2 "$RR" "${job[@]}" --dry-run
expect_rc 0 "mpirun dry run"
[ "$(grep -c 'world 2 with 2 per node' "$TMP/out")" = 2 ] || { show; fail "world from mpirun"; }

mr -np 2 "$RR" "${job[@]}" logger.output_dir="$TMP/np2"
expect_rc 0 "mpirun -np 2"
expect_in "$TMP/out" "world 2 = TP 1 x CP 1 x DP 2" "two ranks"

printf '%s slots=2\n' "$(hostname)" >"$TMP/hostfile"
mr --hostfile "$TMP/hostfile" -np 2 "$RR" "${job[@]}" logger.output_dir="$TMP/hf"
expect_rc 0 "mpirun --hostfile"
expect_in "$TMP/out" "world 2 = TP 1 x CP 1 x DP 2" "two ranks from the hostfile"

"$RR" "${job[@]}" logger.output_dir="$TMP/one" >/dev/null 2>&1 || fail "one-rank run"
python3 - "$TMP/np2/metrics.jsonl" "$TMP/hf/metrics.jsonl" "$TMP/one/metrics.jsonl" <<'PY' ||
import json, sys
runs = [[json.loads(l)["loss"] for l in open(f) if '"train"' in l] for f in sys.argv[1:]]
one = runs[-1]
for r in runs[:-1]:
    assert len(r) == len(one) == 3 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(r, one)), runs
PY
    fail "two-rank losses differ from one rank"
echo OK
