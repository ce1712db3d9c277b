# Expert-parallel checkpoints: experts are logical per-expert tensors, each written by one rank
# of its expert-DP group, so a Mixtral-like run (8 experts) saved at iteration 3 on EP 4 (two
# experts a rank, the distributed optimizer's state assembled per buffer) resumes on EP 2 and on
# one rank with the losses of the EP 4 run straight through (fp32, 1e-5); trestle_ckpt can-load
# says so first.
. "$(dirname "$0")/lib.sh"
CK="$(dirname "$RR")/trestle_ckpt"
common="train.train_iters=6 train.global_batch_size=8 train.micro_batch_size=1 validation.eval_iters=0
logger.log_interval=1 scheduler.lr_warmup_iters=2
optimizer.clip_grad=0.05 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true"
losses() { # METRICS FIRST: the train losses from iteration FIRST on, one per line
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["type"] == "train" and r["iteration"] >= int(sys.argv[2]): print(repr(r["loss"]))' "$1" "$2"
}
same() { # A B WHAT: the two loss lists agree to 1e-5
    python3 - "$1" "$2" <<'PY' || fail "$3: $1 vs $2"
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == 3 and len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
}
mpi() { # NP ARGS...
    local np=$1
    shift
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" "$RR" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
mpi 4 --recipe mixtral_tiny_pretrain $common model.expert_model_parallel_size=4 \
    checkpoint.save="$TMP/ep4" checkpoint.save_interval=3 logger.output_dir="$TMP/a"
expect_rc 0 "the EP 4 run"
[ -d "$TMP/ep4/iter_0000003" ] || { show; fail "no checkpoint at iteration 3"; }
"$CK" info "$TMP/ep4" --step 3 --tensors >"$TMP/out" 2>"$TMP/err"
expect_in "$TMP/out" "ep=4" "the manifest records EP 4"
# one logical tensor per expert, one shard each: its one writer (the expert-DP rank 0 of its EP
# rank), and every expert of every layer there, as the one-rank run names them
for e in 0 7; do
    grep -qE "^  decoder\.layers\.1\.mlp\.experts\.local_experts\.$e\.linear_fc2\.weight f32 \[64, 64\] shards=1$" \
        "$TMP/out" || { show; fail "expert $e is not one logical tensor of one shard"; }
done
for ep in 2 1; do
    "$CK" can-load "$TMP/ep4" --step 3 --layout tp=1,pp=1,vpp=1,dp=$ep,ep=$ep,dist_opt=1 \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "can-load at EP $ep"
    expect_in "$TMP/out" "can load" "can-load at EP $ep"
    expect_in "$TMP/out" "saved as tp=1 pp=1 vpp=1 dp=4 ep=4" "can-load names the saved EP"
done
mpi 2 --recipe mixtral_tiny_pretrain $common model.expert_model_parallel_size=2 \
    checkpoint.load="$TMP/ep4" checkpoint.ckpt_step=3 logger.output_dir="$TMP/b"
expect_rc 0 "resumed on EP 2"
expect_in "$TMP/out" "iteration        4/" "it resumes at iteration 4"
same "$(losses "$TMP/a/metrics.jsonl" 4)" "$(losses "$TMP/b/metrics.jsonl" 4)" "the EP 2 resume"
rr --recipe mixtral_tiny_pretrain $common checkpoint.load="$TMP/ep4" checkpoint.ckpt_step=3 \
    logger.output_dir="$TMP/c"
expect_rc 0 "resumed on one rank"
same "$(losses "$TMP/a/metrics.jsonl" 4)" "$(losses "$TMP/c/metrics.jsonl" 4)" "the one-rank resume"
echo OK
