#!/bin/bash
# The README's main job (llama_tiny_pretrain on the bundled English text) alone and while a second
# process keeps every core busy (one shell busy-loop per available CPU), back to back in each
# round: wall, user and system seconds of each and the loaded/idle wall ratio. With the cores
# shared half and half the fair ratio is ~2x; threads that spin or yield instead of sleeping
# make it far worse, and their CPU time (user + sys) grows with the load. Not a ctest.
# usage: bench/stress_train.sh BUILD_DIR [ITERS (1000)] [ROUNDS (2)]
set -e
BUILD=${1:?build dir}; ITERS=${2:-1000}; ROUNDS=${3:-2}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
HOGS=()
cleanup() { for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
NCPU=$(nproc)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $NCPU CPUs available"
echo "date $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg) at start"
echo "job: run_recipe --recipe llama_tiny_pretrain dataset.type=text train.train_iters=$ITERS (README)"

# run LABEL: one job; prints and records wall/user/sys (seconds) in $WALL
run() {
    local out="$TMP/$1" t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$out.time" "$BUILD/run_recipe" --recipe llama_tiny_pretrain \
        dataset.type=text dataset.data_path="$SRC/data/english_corpus.txt" \
        train.train_iters="$ITERS" logger.log_interval=50 validation.eval_interval=200 \
        logger.output_dir="$out" > "$out.log" 2>&1 || { tail -5 "$out.log"; exit 1; }
    t1=$(date +%s.%N)
    WALL=$(echo "$t1 - $t0" | bc -l)
    read -r U S < "$out.time"
    printf "  %-34s wall %7.2f s  user %6.2f s  sys %6.2f s  (load %s)\n" "$2" "$WALL" "$U" "$S" \
        "$(cut -d' ' -f1 /proc/loadavg)"
}

RATIOS=()
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r"
    run "idle$r" "alone"
    IDLE=$WALL IU=$U IS=$S
    HOGS=()
    for _ in $(seq 1 "$NCPU"); do
        sh -c 'while :; do :; done' &
        HOGS+=($!)
    done
    sleep 1
    run "busy$r" "with $NCPU busy-loop processes"
    BUSY=$WALL BU=$U BS=$S
    for p in "${HOGS[@]}"; do kill "$p"; done
    HOGS=()
    RATIO=$(echo "$BUSY / $IDLE" | bc -l)
    RATIOS+=("$RATIO")
    printf "  loaded / alone wall: %.2fx, CPU time (user + sys): %.2fx\n" "$RATIO" \
        "$(echo "($BU + $BS) / ($IU + $IS)" | bc -l)"
done
printf "ratios:"; printf " %.2fx" "${RATIOS[@]}"; echo
