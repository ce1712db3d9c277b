# Expert-TP checkpoints: an ETP rank's slices of an expert (fc1's gate and up rows, fc2's
# columns) are blocks of the expert's one logical tensor, so a Mixtral-like run (8 experts) saved
# at iteration 3 on EP 2 x ETP 2 with TP 2 + SP (world 4, the distributed optimizer's state too)
# resumes on one rank (EP 1, ETP 1) and on TP 2 + SP with whole experts (ETP 1) with the losses
# of the first run straight through (fp32, 1e-5); trestle_ckpt can-load says so first.
. "$(dirname "$0")/lib.sh"
CK="$(dirname "$RR")/trestle_ckpt"
common="train.train_iters=6 train.global_batch_size=8 train.micro_batch_size=1 validation.eval_iters=0
logger.log_interval=1 scheduler.lr_warmup_iters=2
optimizer.clip_grad=0.05 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true"
tp2="model.tensor_model_parallel_size=2 model.sequence_parallel=true"
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
mpi 4 --recipe mixtral_tiny_pretrain $common $tp2 model.expert_model_parallel_size=2 \
    model.expert_tensor_parallel_size=2 model.moe_token_dispatcher_type=alltoall \
    checkpoint.save="$TMP/etp" checkpoint.save_interval=3 \
    logger.output_dir="$TMP/a"
expect_rc 0 "the EP 2 x ETP 2 run"
[ -d "$TMP/etp/iter_0000003" ] || { show; fail "no checkpoint at iteration 3"; }
"$CK" info "$TMP/etp" --step 3 --tensors >"$TMP/out" 2>"$TMP/err"
# one logical tensor per expert: fc1 [gate; up] in four blocks (each ETP rank's slice of gate and
# of up), fc2 in two (each ETP rank's columns), every expert of every layer named as on one rank
for e in 0 7; do
    grep -qE "^  decoder\.layers\.1\.mlp\.experts\.local_experts\.$e\.linear_fc1\.weight f32 \[[0-9]+, 64\] shards=4$" \
        "$TMP/out" || { show; fail "expert $e's fc1 is not one logical tensor of four blocks"; }
    grep -qE "^  decoder\.layers\.1\.mlp\.experts\.local_experts\.$e\.linear_fc2\.weight f32 \[64, [0-9]+\] shards=2$" \
        "$TMP/out" || { show; fail "expert $e's fc2 is not one logical tensor of two blocks"; }
done
for lay in "tp=1,pp=1,vpp=1,dp=1,ep=1,dist_opt=1" "tp=2,pp=1,vpp=1,dp=1,ep=1,dist_opt=1"; do
    "$CK" can-load "$TMP/etp" --step 3 --layout "$lay" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "can-load at $lay"
    expect_in "$TMP/out" "can load" "can-load at $lay"
done
rr --recipe mixtral_tiny_pretrain $common checkpoint.load="$TMP/etp" checkpoint.ckpt_step=3 \
    logger.output_dir="$TMP/b"
expect_rc 0 "resumed on one rank"
expect_in "$TMP/out" "iteration        4/" "it resumes at iteration 4"
same "$(losses "$TMP/a/metrics.jsonl" 4)" "$(losses "$TMP/b/metrics.jsonl" 4)" "the one-rank resume"
mpi 2 --recipe mixtral_tiny_pretrain $common $tp2 model.expert_tensor_parallel_size=1 \
    checkpoint.load="$TMP/etp" checkpoint.ckpt_step=3 logger.output_dir="$TMP/c"
expect_rc 0 "resumed on TP 2 with whole experts"
same "$(losses "$TMP/a/metrics.jsonl" 4)" "$(losses "$TMP/c/metrics.jsonl" 4)" "the TP 2, ETP 1 resume"
echo OK
