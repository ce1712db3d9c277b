# Shared helpers for the CLI tests. Every test script is run as
#   bash tests/cli/<name>.sh RUN_RECIPE SOURCE_DIR [MPIEXEC]
# and sources this file, which leaves RR, SRC, MPIEXEC and a scratch directory TMP.
set -u
RR=$1
SRC=$2
MPIEXEC=${3:-mpirun}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

# rr ARGS...: run run_recipe; stdout in $TMP/out, stderr in $TMP/err, exit code in $rc.
rr() {
    "$RR" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# ck ARGS...: run trestle_ckpt (built beside run_recipe), outputs and exit code as rr's.
ck() {
    "$(dirname "$RR")/trestle_ckpt" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# mpi ARGS...: mpirun as root, oversubscribed, one thread a rank; outputs and exit code as rr's.
mpi() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        "$MPIEXEC" --allow-run-as-root --oversubscribe "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

show() {
    echo "--- stdout"
    cat "$TMP/out"
    echo "--- stderr"
    cat "$TMP/err"
}

expect_rc() {
    [ "$rc" -eq "$1" ] || {
        show
        fail "$2: exit code $rc, expected $1"
    }
}

expect_in() { # FILE TEXT WHAT
    grep -qF -- "$2" "$1" || {
        show
        fail "$3: '$2' not found"
    }
}

# yaml_get FILE SECTION KEY: the value of section.key in a resolved dump (--print-config).
yaml_get() {
    awk -v s="$2" -v k="$3" '/^[^ ]/ { sec = $0; sub(/:$/, "", sec) }
        sec == s && $1 == k ":" { sub(/^[^:]*: /, ""); print; exit }' "$1"
}

# derived NAME: the value printed for NAME in the dry-run report in $TMP/out.
derived() {
    awk -v k="$1" '$1 == k { print $2; exit }' "$TMP/out"
}

# expect_bad_launch NP RULE_ID ARGS...: under mpirun with NP ranks, run_recipe ARGS must end every
# rank with exit code 2, print the RULE_ID error exactly once (rank 0 only), write no config,
# and make mpirun itself return 2. ARGS must set logger.output_dir="$TMP/o".
expect_bad_launch() {
    local np=$1 id=$2
    shift 2
    local flags="--allow-run-as-root --oversubscribe" out exits n
    # shellcheck disable=SC2086
    out=$("$MPIEXEC" $flags -np "$np" sh -c '"$@"; echo "rank-exit=$?"' sh "$RR" "$@" 2>&1)
    exits=$(printf '%s\n' "$out" | grep -c '^rank-exit=2$')
    [ "$exits" -eq "$np" ] || { echo "$out"; fail "$exits of $np ranks exited with code 2"; }
    n=$(printf '%s\n' "$out" | grep -c "error \[$id\]")
    [ "$n" -eq 1 ] || { echo "$out"; fail "error [$id] appeared $n times, expected once"; }
    [ ! -e "$TMP/o/config.yaml" ] || fail "a failed launch wrote its config"
    # shellcheck disable=SC2086
    "$MPIEXEC" $flags -np "$np" "$RR" "$@" >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "mpirun returned $rc, expected 2"
}
