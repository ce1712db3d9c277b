# Pipeline parallelism trains in mixed precision from the command line: a tiny Llama with
# -pp 2 and bf16_mixed (pipeline_dtype bf16, so the stages exchange bf16 activations and
# gradients) must finish, with no runtime.pp_mismatch, a falling loss and a finite validation
# loss (the forward-only pass sends bf16 too); on the cpu-strict device the same losses.
#   bash tests/pp/pp_lowp_cli.sh RUN_RECIPE MPIEXEC
set -u
RR=$1
MPIEXEC=${2:-mpirun}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() {
    echo "--- output"
    cat "$TMP/out"
    echo "FAIL: $*"
    exit 1
}

# run DEVICE: the training run on cpu or cpu-strict (every device buffer unreadable by the host
# outside ops, copies and communication: the packing and widening must go through the op table).
run() {
    timeout -k 2 120 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 -x TRESTLE_DEVICE \
        "$RR" --recipe llama_tiny_pretrain -pp 2 mixed_precision.preset=bf16_mixed \
        train.train_iters=20 logger.log_interval=1 validation.eval_iters=1 \
        validation.eval_interval=20 model.seq_length=32 dataset.seq_length=32 \
        logger.output_dir="$TMP/o_$1" logger.metrics_path="$TMP/$1.jsonl" >"$TMP/out" 2>&1
}
TRESTLE_DEVICE=cpu run cpu
rc=$?
grep -q 'pp_mismatch' "$TMP/out" && fail "runtime.pp_mismatch"
[ "$rc" -eq 0 ] || fail "mpirun returned $rc"
python3 - "$TMP/cpu.jsonl" <<'PY' || fail "the loss did not fall"
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
train = [r["loss"] for r in rows if r["type"] == "train"]
evals = [r["loss"] for r in rows if r["type"] != "train" and "loss" in r]
first, last = sum(train[:5]) / 5, sum(train[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f} over {len(train)} iterations; validation {evals}")
ok = len(train) == 20 and all(map(math.isfinite, train)) and last < 0.9 * first
ok = ok and len(evals) >= 1 and all(map(math.isfinite, evals))
sys.exit(0 if ok else 1)
PY
TRESTLE_DEVICE=cpu-strict run cpu-strict || fail "cpu-strict run failed"
grep -q 'cpu-strict, whole pages' "$TMP/out" || fail "strict mode did not run"
losses() { python3 -c 'import json,sys
for r in map(json.loads, open(sys.argv[1])):
    if "loss" in r: print(r["type"], repr(r["loss"]))' "$1"; }
cmp -s <(losses "$TMP/cpu.jsonl") <(losses "$TMP/cpu-strict.jsonl") || fail "cpu-strict differs from cpu"
echo "OK"
