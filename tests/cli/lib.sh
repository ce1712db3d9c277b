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
