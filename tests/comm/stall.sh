#!/bin/sh
# A rank that stops answering must not hang the job: the others end with a comm.timeout
# diagnostic naming the operation, the group and the silent peer, within the 2 s timeout, and
# mpirun returns non-zero. The stopped rank is cleaned up by its pid, whatever happens.
#   stall.sh MPIEXEC NP EXE MODE EXPECTED-TEXT...
set -u
mpiexec=$1 np=$2 exe=$3 mode=$4
shift 4
dir=$(mktemp -d)
cleanup() {
    for f in "$dir"/*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT

start=$(date +%s)
timeout -s KILL 20 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$exe" "$mode" "$dir" \
    >"$dir/out" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$dir/out"

# mpirun reaps its ranks just after it returns; give them a moment before checking.
i=0
while [ $i -lt 30 ]; do
    alive=0
    for f in "$dir"/*.pid; do
        [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=$((alive + 1))
    done
    [ $alive -eq 0 ] && break
    sleep 0.1
    i=$((i + 1))
done

status=0
if [ "$rc" -eq 0 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL: mpirun returned $rc (0: nothing failed; 137: it hung and was killed)"
    status=1
fi
if [ "$took" -gt 12 ]; then
    echo "FAIL: took $took s with a 2 s timeout"
    status=1
fi
for want in "error [comm.timeout]" "$@"; do
    if ! grep -qF -- "$want" "$dir/out"; then
        echo "FAIL: the output lacks: $want"
        status=1
    fi
done
if [ "$alive" -ne 0 ]; then
    echo "FAIL: $alive rank(s) outlived mpirun (now killed)"
    status=1
fi
[ $status -eq 0 ] && echo "OK: mpirun returned $rc after $took s with the expected diagnostic"
exit $status
