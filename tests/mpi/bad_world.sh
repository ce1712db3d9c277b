#!/bin/sh
# A layout the world cannot hold must end every rank with exit code 2 and print its diagnostic
# (parallel.world_divisible_by_tp_cp_pp) once, not once per rank. Each rank runs under `sh -c`
# so that its own exit code is visible; a second, plain launch checks that mpirun passes the 2 on.
#   bad_world.sh MPIEXEC NP EXE ARGS...
set -u
mpiexec=$1 np=$2 exe=$3
shift 3
flags="--allow-run-as-root --oversubscribe"

out=$("$mpiexec" $flags -np "$np" sh -c '"$@"; echo "rank-exit=$?"' sh "$exe" "$@" 2>&1)
echo "$out"
exits=$(printf '%s\n' "$out" | grep -c '^rank-exit=2$')
msgs=$(printf '%s\n' "$out" | grep -c 'error \[parallel\.world_divisible_by_tp_cp_pp\]')
if [ "$exits" -ne "$np" ]; then
    echo "FAIL: $exits of $np ranks exited with code 2"
    exit 1
fi
if [ "$msgs" -ne 1 ]; then
    echo "FAIL: the diagnostic appeared $msgs times, expected once"
    exit 1
fi

"$mpiexec" $flags -np "$np" "$exe" "$@" >/dev/null 2>&1
rc=$?
if [ "$rc" -ne 2 ]; then
    echo "FAIL: mpirun returned $rc, expected 2"
    exit 1
fi
echo "OK: every rank exited 2, one diagnostic, mpirun returned 2"
