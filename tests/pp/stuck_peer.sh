# A rank that stops answering mid-iteration (SIGSTOP: alive, so mpirun notices nothing) must not
# hang the job: with dist.distributed_timeout_seconds=2 the other rank ends with a comm.timeout
# error naming the operation, the group and the silent peer, and mpirun returns non-zero, well
# within the 20 s guard; then the same under TP2 x DP2 with a 10 s timeout, where each of the
# three live ranks must report its own timeout. The stopped rank is killed by the pid it
# printed, whatever happens.
#   bash tests/pp/stuck_peer.sh RUN_RECIPE MPIEXEC
set -u
RR=$1
MPIEXEC=${2:-mpirun}
TMP=$(mktemp -d)
stalled_pid() { sed -n 's/^test hook: rank [0-9]* stalls (pid \([0-9]*\)).*/\1/p' "${1:-$TMP/out}"; }
cleanup() {
    for f in "$TMP/out" "$TMP/out4"; do
        [ -f "$f" ] || continue
        pid=$(stalled_pid "$f")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null
            kill -CONT "$pid" 2>/dev/null
        fi
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "--- output"
    cat "$TMP/out"
    echo "FAIL: $*"
    exit 1
}

# Pipeline parallel 2: world rank 0 (the first stage) stalls after its first forward of
# iteration 2, so the last stage waits for an activation that never comes; the report must come
# from rank 1 (every rank reports its own timeout, not only rank 0).
start=$(date +%s)
timeout -k 2 20 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
    -x TRESTLE_TEST_STALL_RANK=0 -x TRESTLE_TEST_STALL_ITER=2 \
    "$RR" --recipe llama_tiny_pretrain train.train_iters=4 validation.eval_iters=0 \
    model.seq_length=32 dataset.seq_length=32 model.pipeline_model_parallel_size=2 \
    dist.distributed_timeout_seconds=2 \
    logger.output_dir="$TMP/o" >"$TMP/out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))

[ -n "$(stalled_pid)" ] || fail "the test hook did not stop rank 0"
[ "$rc" -ne 0 ] || fail "mpirun returned 0 although a rank never answered"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung until the 20 s guard (rc $rc)"
[ "$elapsed" -lt 20 ] || fail "took $elapsed s"
# (mpirun may wake the stopped rank while ending the job, which then reports its own timeout.)
line=$(grep 'error \[comm.timeout\].*on world rank 1 ' "$TMP/out") || fail "no comm.timeout error from rank 1"
case $line in *"p2p_batch on"*) ;; *) fail "the operation is not named: $line" ;; esac
case $line in *"group pp "*) ;; *) fail "the group is not named: $line" ;; esac
case $line in *"recv from world rank 0"*) ;; *) fail "the silent peer (0) is not named: $line" ;; esac
grep -q 'fix: ' "$TMP/out" || fail "no fix hint"
echo "ok   PP2: mpirun rc $rc after $elapsed s"

# TP2 x DP2 with a 10 s timeout: world rank 3 stalls in iteration 2; every other rank must end
# with its own comm.timeout naming the group it waited in and the silent peer, well within the
# 40 s guard (10 s of timeout plus start-up on a loaded machine).
start=$(date +%s)
timeout -k 2 40 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 \
    -x TRESTLE_TEST_STALL_RANK=3 -x TRESTLE_TEST_STALL_ITER=2 \
    "$RR" --recipe llama_tiny_pretrain train.train_iters=4 validation.eval_iters=0 \
    model.seq_length=32 dataset.seq_length=32 model.tensor_model_parallel_size=2 \
    dist.distributed_timeout_seconds=10 logger.output_dir="$TMP/o4" >"$TMP/out4" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cp "$TMP/out4" "$TMP/out" # fail() shows $TMP/out
[ -n "$(stalled_pid "$TMP/out4")" ] || fail "TP2xDP2: the test hook did not stop rank 3"
[ "$rc" -ne 0 ] || fail "TP2xDP2: mpirun returned 0 although a rank never answered"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "TP2xDP2: the job hung until the guard (rc $rc)"
[ "$elapsed" -lt 35 ] || fail "TP2xDP2: took $elapsed s"
for r in 0 1 2; do
    line=$(grep "error \[comm.timeout\].*within 10.0 s on world rank $r " "$TMP/out4") ||
        fail "TP2xDP2: no comm.timeout error from rank $r"
    case $line in *"did not answer: "*[0-9]*) ;; *) fail "TP2xDP2: no silent peer: $line" ;; esac
    case $line in *"on group tp "* | *"on group dp-cp "*) ;; *) fail "TP2xDP2: group: $line" ;; esac
done
echo "ok   TP2xDP2: mpirun rc $rc after $elapsed s"
echo OK
