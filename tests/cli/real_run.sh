# A real run (no --dry-run) is an MPI singleton: it writes config.yaml and fingerprint.txt to
# the output directory before any work, then trains (here 2 iterations) and writes
# metrics.jsonl. The output directory falls back to checkpoint.save, then ./outputs/<recipe>.
. "$(dirname "$0")/lib.sh"
recipe=llama_tiny_pretrain
short="train.train_iters=2"

rr --recipe $recipe --dry-run $short
expect_rc 0 "dry run of $recipe"
fp=$(awk '/^fingerprint/ { print $2 }' "$TMP/out")

rr --recipe $recipe $short logger.output_dir="$TMP/out dir"
expect_rc 0 "real run"
expect_in "$TMP/out" "iteration        2/       2" "log line"
grep -q '"type":"train","iteration":2' "$TMP/out dir/metrics.jsonl" || fail "no metrics.jsonl record"
[ -s "$TMP/out dir/config.yaml" ] || fail "no config.yaml"
grep -qx '[0-9a-f]\{16\}' "$TMP/out dir/fingerprint.txt" || fail "fingerprint.txt: $(cat "$TMP/out dir/fingerprint.txt")"
# The file records the config of the run, whose output_dir differs from the dry run's.
rr --recipe $recipe --dry-run --config-file "$TMP/out dir/config.yaml"
expect_rc 0 "the written config reloads"
[ "$(awk '/^fingerprint/ { print $2 }' "$TMP/out")" = "$(cat "$TMP/out dir/fingerprint.txt")" ] ||
    fail "fingerprint.txt does not match the config it sits next to"

(cd "$TMP" && "$RR" --recipe $recipe $short checkpoint.save="$TMP/ckpt" >/dev/null 2>&1)
[ $? -eq 0 ] || fail "real run with checkpoint.save"
[ -s "$TMP/ckpt/config.yaml" ] || fail "checkpoint.save is not the fallback output directory"
(cd "$TMP" && "$RR" --recipe $recipe $short >/dev/null 2>&1)
[ $? -eq 0 ] || fail "real run with defaults"
[ "$(cat "$TMP/outputs/$recipe/fingerprint.txt")" = "$fp" ] || fail "./outputs/$recipe/fingerprint.txt is not the dry run's"

# With JSON diagnostics, stdout holds only the JSON document, in a real run too.
rr --recipe $recipe $short logger.output_dir="$TMP/json" --diagnostics-format json
expect_rc 0 "real run, JSON"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["errors"] == 0, d' "$TMP/out" ||
    { show; fail "real run: stdout is not one JSON document"; }

# An invalid config writes nothing and exits 2.
rr --recipe $recipe logger.output_dir="$TMP/bad" model.num_layers=-1
expect_rc 2 "invalid config in a real run"
[ ! -e "$TMP/bad/config.yaml" ] || fail "an invalid config was written"
# --world-size cannot contradict the MPI world of a real run.
rr --recipe $recipe logger.output_dir="$TMP/ws" --world-size 4
expect_rc 2 "--world-size 4 on a 1-rank run"
echo OK
