# A failure on one rank alone is reported by that rank: a pipeline resume whose last-stage
# tensor fails its checksum ends with rank 1's own diagnostic (the tensor, the file, the
# checksums), not only rank 0's "another rank failed".
. "$(dirname "$0")/lib.sh"
common="train.train_iters=4 train.global_batch_size=4 validation.eval_iters=0 logger.log_interval=1"
rr --recipe mixtral_tiny_pretrain $common checkpoint.save="$TMP/ck" checkpoint.save_interval=2 \
    logger.output_dir="$TMP/a"
expect_rc 0 "the one-rank run"
victim=decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight
python3 - "$TMP/ck/iter_0000002" "$victim" <<'PY' || fail "could not damage the checkpoint"
import json, sys
d, name = sys.argv[1:3]
m = json.load(open(d + "/manifest.json"))
s = next(t for t in m["tensors"] if t["name"] == name)["shards"][0]
with open(d + "/" + m["files"][s["file"]]["name"], "r+b") as f:
    f.seek(s["pos"] + 16)
    f.write(b"\x7f\x7f\x7f\x7f")
PY
"$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" --recipe mixtral_tiny_pretrain $common \
    model.pipeline_model_parallel_size=2 checkpoint.load="$TMP/ck" checkpoint.ckpt_step=2 \
    logger.output_dir="$TMP/b" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 2 "the damaged resume"
expect_in "$TMP/err" "rank 1 of 2 failed:" "rank 1 reports"
expect_in "$TMP/err" "checkpoint.checksum_mismatch" "rank 1's own diagnostic"
expect_in "$TMP/err" "$victim" "the damaged tensor named"
echo OK
