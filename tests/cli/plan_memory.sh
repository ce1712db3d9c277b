# The planner's bytes per rank against the runtime's: for tiny dense layouts (TP, SP, PP, VPP,
# CP, DP, the distributed optimizer, recomputation, mixed precision, MTP under PP untied, SFT
# packing, LoRA) and MoE ones (experts, shared experts, capacity, MLA and MTP, tied and untied,
# DP, PP, VPP) `run_recipe --plan --gpu cpu --json` (the cpu-strict device's page-rounded allocations) is compared with the peaks per
# memory kind the cpu-strict (MoE: cpu-count) device measured on every rank of a one-iteration
# run of the same layout; each kind must agree within 3% (docs/plan.md). The planner's numbers come from the
# runtime's sizing calls, so a drift in either shows here.
. "$(dirname "$0")/lib.sh"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
flags="--allow-run-as-root --oversubscribe"
n=0

# layout NP ARGS...: plan and measure one layout.
layout() {
    local np=$1
    shift
    n=$((n + 1))
    "$RR" "$@" --plan --gpu cpu --world-size "$np" --json >"$TMP/plan.json" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "plan $*"
    TRESTLE_DEVICE=${DEVICE:-cpu-strict} "$MPIEXEC" $flags -np "$np" -x TRESTLE_DEVICE "$RR" "$@" \
        train.train_iters=1 logger.log_interval=1 logger.output_dir="$TMP/o$n" \
        validation.eval_interval=null >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "train $*"
    python3 - "$TMP/plan.json" "$TMP/out" "$TMP/err" "$np" "$*" <<'PY' || exit 1
import json, re, sys
plan = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read() + open(sys.argv[3]).read()
np_, what = int(sys.argv[4]), sys.argv[5]
meas = {}
for m in re.finditer(r"\[rank (\d+)\] info: device memory (\w+) +peak [0-9.]+ MiB, (\d+) bytes", text):
    meas.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
if np_ == 1 and not meas:
    for m in re.finditer(r"device memory (\w+) +peak [0-9.]+ MiB, (\d+) bytes", text):
        meas.setdefault(0, {})[m.group(1)] = int(m.group(2))
if len(meas) != np_:
    sys.exit(f"FAIL: {what}: peaks of {len(meas)} ranks logged, expected {np_}")
roles = {r["pp_rank"]: r["peak"] for r in plan["ranks"]}
per_pp = np_ // plan["pp"]
worst = 0.0
for rank, kinds in sorted(meas.items()):
    pp_rank = rank // per_pp
    if pp_rank not in roles:
        continue  # a middle stage like the planned one
    for kind, got in kinds.items():
        want = roles[pp_rank][kind]
        err = abs(want - got) / max(got, 1)
        worst = max(worst, err)
        if err > 0.03:
            sys.exit(f"FAIL: {what}: rank {rank} {kind}: planned {want}, measured {got} ({100*err:.1f}%)")
print(f"ok {what}: {np_} ranks, worst {100*worst:.2f}%")
PY
}

T="--recipe llama_tiny_pretrain"
G="--recipe gpt_tiny_pretrain"
layout 1 $T
layout 1 $G
layout 1 $T mixed_precision.preset=bf16_mixed
layout 1 $T model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
layout 1 $T model.recompute_granularity=selective
layout 2 $T -tp 2
layout 2 $G -tp 2 model.sequence_parallel=true train.micro_batch_size=2
layout 2 $T -tp 2 model.sequence_parallel=true mixed_precision.preset=bf16_mixed
layout 2 $T -pp 2
layout 2 $G -pp 2
layout 2 $T -pp 2 mixed_precision.preset=bf16_mixed
layout 2 $T -pp 2 model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=1
layout 2 $T -pp 2 model.mtp_num_layers=1 model.share_embeddings_and_output_weights=false
layout 2 $T
layout 2 $T ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 2 $T ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true
layout 2 $G ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true mixed_precision.preset=bf16_mixed
layout 4 $T -tp 2 -pp 2
layout 4 $T -tp 2 -pp 2 model.sequence_parallel=true
layout 4 $T -pp 2 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 4 $T -tp 2 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 4 $T -pp 4 model.num_layers=8 -vp 2 train.global_batch_size=8
layout 2 $T -pp 2 model.num_layers=4 -vp 2 train.global_batch_size=8 model.recompute_granularity=selective
# Context parallelism: the exchange's buffers (tr_cp_buffer_bytes) and the global positions a
# CP rank's rows carry, over TP/SP, PP, DP and the distributed optimizer.
layout 2 $T -cp 2
layout 4 $T -cp 4
layout 2 $G -cp 2
layout 4 $T -cp 2 -tp 2 model.sequence_parallel=true
layout 4 $T -cp 2 -pp 2
layout 4 $T -cp 2 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 2 $T -cp 2 model.cp_comm_type=allgather
layout 2 $T -cp 2 model.cp_comm_type=a2a mixed_precision.preset=bf16_mixed
# Mixture of experts: the MoE layer runs on host-visible devices only, so these run on cpu-count
# (the cpu device with cpu-strict's page accounting); the layers' states and scratch
# (tr_moe_buffer_bytes, dropless: every token's top-k expert rows) are activations there.
DEVICE=cpu-count
M="--recipe moe_tiny_pretrain"
layout 1 $M
layout 1 --recipe mixtral_tiny_pretrain
layout 1 --recipe qwen3_moe_tiny_pretrain
layout 1 --recipe deepseek_tiny_pretrain
layout 1 $M mixed_precision.preset=bf16_mixed
layout 1 $M model.moe_expert_capacity_factor=1.0 model.moe_pad_expert_input_to_capacity=true
layout 1 $M model.moe_shared_expert_intermediate_size=64
layout 2 $M
layout 2 $M -pp 2
layout 2 --recipe deepseek_tiny_pretrain -pp 2 model.num_layers=4 model.moe_layer_freq=[0,1,1,1]
# untied: the last stage's copy of the word embedding for the depth's lookup
layout 2 --recipe deepseek_tiny_pretrain -pp 2 model.num_layers=4 model.moe_layer_freq=[0,1,1,1] \
    model.share_embeddings_and_output_weights=false
layout 2 $M ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 4 $M -pp 2 model.num_layers=4 -vp 2 train.global_batch_size=8
# Expert parallelism: each rank's experts, and the exchange's buffers at the dropless worst case
# (every rank's rows could come to one: EP x T x top-k); MoE under TP with SP.
layout 2 $M model.expert_model_parallel_size=2
layout 4 --recipe mixtral_tiny_pretrain model.expert_model_parallel_size=2 ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
layout 2 $M -tp 2 model.sequence_parallel=true model.expert_tensor_parallel_size=1
# Expert TP: each rank's slices of its experts, and the gathered rows at the worst case (ETP x
# a rank's receivable rows), alone on TP 2 + SP and with EP 2 (the distributed optimizer).
layout 2 $M -tp 2 model.sequence_parallel=true model.expert_tensor_parallel_size=2
layout 4 --recipe mixtral_tiny_pretrain -tp 2 model.sequence_parallel=true model.expert_model_parallel_size=2 model.expert_tensor_parallel_size=2 model.moe_token_dispatcher_type=alltoall ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
# Recomputation shares the recomputed MoE layers' states in one recompute state per set.
layout 1 $M model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
layout 2 --recipe deepseek_tiny_pretrain -pp 2 model.num_layers=4 model.moe_layer_freq=[0,1,1,1] \
    model.recompute_granularity=selective model.recompute_modules=[moe_act,shared_experts] \
    model.moe_grouped_gemm=true
layout 4 $M -pp 2 model.num_layers=4 -vp 2 train.global_batch_size=8 \
    model.recompute_granularity=selective model.recompute_modules=[moe]
unset DEVICE
# Fine-tuning: packed sequences (the position buffers) and LoRA's adapters over a frozen base
# loaded from a checkpoint.
rr --recipe llama_tiny_pretrain train.train_iters=1 checkpoint.save="$TMP/pt" \
    checkpoint.save_interval=1 validation.eval_iters=0 logger.output_dir="$TMP/pt_o"
expect_rc 0 "base checkpoint"
S="--recipe llama_tiny_sft dataset.dataset_root=$SRC/data/sft_tiny checkpoint.pretrained_checkpoint=$TMP/pt"
L="--recipe llama_tiny_lora dataset.dataset_root=$SRC/data/sft_tiny checkpoint.pretrained_checkpoint=$TMP/pt"
layout 1 $S
layout 2 $S -pp 2
layout 1 $L
layout 2 $L -tp 2
layout 2 $L ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true
[ "$n" -ge 40 ] || fail "only $n layouts"
echo "cli_plan_memory: $n layouts within 3%"
