# A rank that stops answering mid-iteration must not hang the job (#23). Four cases, each with
# dist.distributed_timeout_seconds=10: PP2 and TP2 x DP2, the faulty rank stopped with SIGSTOP
# (alive, so mpirun notices nothing: the others end through the timeout, or through mpirun's
# stop once the first of them has exited) or killed with
# SIGKILL (mpirun notices and sends the others SIGTERM: they end through the stop signal). Every
# other rank must print its own comm.timeout error naming the operation, the group and the peer
# it waited for, exit non-zero, and the job must be over within 15 s of the fault (the hook
# prints the time it struck; a stopped rank's cases add the kill wait beyond mpirun's default). For the kill cases mpirun is given 6 s between its SIGCONT,
# SIGTERM and SIGKILL (odls_base_sigkill_timeout; a batch system's kill wait is longer; a loaded
# machine needs more than 3 s to report): with
# its default of 1 s the ranks are killed before they can report.
# The stopped rank is killed by the pid it printed, whatever happens.
#   bash tests/pp/stuck_peer.sh RUN_RECIPE MPIEXEC
set -u
RR=$1
MPIEXEC=${2:-mpirun}
TMP=$(mktemp -d)
stalled_pid() { sed -n 's/^test hook: rank [0-9]* [a-z]* (pid \([0-9]*\)).*/\1/p' "$1"; }
cleanup() {
    for f in "$TMP"/*.out; do
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
    cat "$out"
    echo "FAIL: $*"
    exit 1
}

# fault NAME SIGNAL NP STALL_RANK "LIVE RANKS" LAYOUT...
fault() {
    name=$1 sig=$2 np=$3 bad=$4 live=$5
    shift 5
    out=$TMP/$name.out
    # A stopped rank's peers time out one after another, each from the moment it began waiting:
    # the first to exit makes mpirun stop the rest, and a rank still waiting then ends through
    # the stop signal (1 s of grace, then its report), so it needs a kill wait above that. Kept
    # short, as the stopped rank takes all of it before it dies.
    wait_s=4
    [ "$sig" = KILL ] && wait_s=6
    timeout -k 2 60 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" \
        --mca odls_base_sigkill_timeout "$wait_s" \
        -x TRESTLE_TEST_STALL_RANK="$bad" -x TRESTLE_TEST_STALL_ITER=2 \
        -x TRESTLE_TEST_STALL_SIGNAL="$sig" \
        "$RR" --recipe llama_tiny_pretrain train.train_iters=4 validation.eval_iters=0 \
        model.seq_length=32 dataset.seq_length=32 "$@" dist.distributed_timeout_seconds=10 \
        logger.output_dir="$TMP/$name" >"$out" 2>&1
    rc=$?
    end=$(date +%s.%N)
    [ -n "$(stalled_pid "$out")" ] || fail "$name: the test hook did not strike rank $bad"
    struck=$(sed -n 's/^test hook: .* at \([0-9.]*\)$/\1/p' "$out")
    [ "$rc" -ne 0 ] || fail "$name: mpirun returned 0 although rank $bad never answered"
    [ "$rc" -ne 124 ] || fail "$name: the job hung until the 60 s guard"
    took=$(awk -v a="$struck" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    # The stopped rank spends all of mpirun's kill wait before it dies: beyond the default 1 s,
    # that is the launcher's time, not the run's.
    limit=15
    [ "$sig" = STOP ] && limit=$((15 + wait_s - 1))
    awk -v t="$took" -v l="$limit" 'BEGIN { exit !(t < l) }' ||
        fail "$name: over $took s after the fault (limit $limit s)"
    for r in $live; do
        line=$(grep "error \[comm.timeout\].* on world rank $r " "$out") ||
            fail "$name: no comm.timeout error from rank $r"
        # STOP: the timeout, or the stop signal mpirun sent once a peer had ended by its own.
        case $sig:$line in
        STOP:*"within 10.0 s"* | *"after a stop signal"*) ;;
        *) fail "$name: rank $r: ended neither by the timeout nor by mpirun's stop: $line" ;;
        esac
        case $line in
        *"group pp "*"recv from world rank $bad"* | *"group pp "*"send to world rank $bad"*) ;;
        *"on group tp "*"did not answer: "*[0-9]* | *"on group dp-cp "*"did not answer: "*[0-9]*) ;;
        *) fail "$name: rank $r: the group or the silent peer is not named: $line" ;;
        esac
    done
    echo "ok   $name: every other rank reported; mpirun rc $rc, $took s after the fault"
}

fault pp2_stop STOP 2 0 "1" model.pipeline_model_parallel_size=2
fault pp2_kill KILL 2 0 "1" model.pipeline_model_parallel_size=2
fault tp2dp2_stop STOP 4 3 "0 1 2" model.tensor_model_parallel_size=2
fault tp2dp2_kill KILL 4 3 "0 1 2" model.tensor_model_parallel_size=2
echo OK
