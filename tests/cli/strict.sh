# A config whose only problems are warnings passes (exit 0) and prints them; --strict makes the
# same warnings errors (exit 2). STRICT_WARNING_OVERRIDE holds the arguments (space-separated)
# that make validate() warn.
. "$(dirname "$0")/lib.sh"
read -r -a warn <<<"${STRICT_WARNING_OVERRIDE:?}"
# The recipe without its one warning (a save interval but no save directory).
base=(--recipe llama32_1b_pretrain --dry-run checkpoint.save_interval=null)

rr "${base[@]}" "${warn[@]}"
expect_rc 0 "warning alone"
expect_in "$TMP/err" "warning" "the warning is printed"
rr "${base[@]}" --strict "${warn[@]}"
expect_rc 2 "--strict"
grep -q "^error" "$TMP/err" || grep -q ": error" "$TMP/err" || { show; fail "--strict: no error line"; }
rr "${base[@]}" --strict --diagnostics-format json "${warn[@]}"
expect_rc 2 "--strict, JSON"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["errors"] >= 1 and d["warnings"] == 0, d' "$TMP/out" ||
    fail "--strict JSON counts"
# Without the warning's cause, --strict passes.
rr "${base[@]}" --strict --world-size 8
expect_rc 0 "--strict on a clean config"
echo OK
