#!/usr/bin/env bash
# Train a recipe on a Slurm allocation: submit with `sbatch scripts/launch_with_sbatch.sh`, or
# override the settings below from the environment, e.g.
#   RECIPE=llama3_8b_pretrain_config OVERRIDES="train.train_iters=1000" sbatch --nodes=4 \
#       scripts/launch_with_sbatch.sh
# srun starts one run_recipe per task with PMIx (Open MPI is built with it); every rank takes
# its world, node-local rank and GPU from the launcher (docs/launchers.md). No container and no
# Python are needed: run_recipe is the whole trainer.
#SBATCH --job-name=trestle-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
#SBATCH --output=logs/train_%j.out
#SBATCH --error=logs/train_%j.err
#SBATCH --exclusive
set -euo pipefail

RECIPE=${RECIPE:-llama32_1b_pretrain_config}
MODE=${MODE:-}                  # pretrain|sft|lora|dora; read from the recipe name when empty
DATASET=${DATASET:-}            # mock|megatron-indexed|local-jsonl; the recipe's when empty
OVERRIDES=${OVERRIDES:-}        # KEY=VALUE ..., e.g. "train.train_iters=1000 optimizer.lr=2e-4"
RUN_RECIPE=${RUN_RECIPE:-$(cd "$(dirname "$0")/.." && pwd)/build/run_recipe}
SRUN_MPI=${SRUN_MPI:-pmix}      # srun's --mpi plugin (srun --mpi=list shows the built ones)

args=(--recipe "$RECIPE")
[ -n "$MODE" ] && args+=(--mode "$MODE")
[ -n "$DATASET" ] && args+=(--dataset "$DATASET")
# shellcheck disable=SC2206 # the overrides are words on purpose
[ -n "$OVERRIDES" ] && args+=($OVERRIDES)

echo "job ${SLURM_JOB_ID:-?}: ${SLURM_NNODES:-?} node(s) x ${SLURM_NTASKS_PER_NODE:-?} task(s)," \
     "recipe $RECIPE"
# Validate once for this allocation before occupying every GPU: a wrong layout fails here in
# seconds (the world comes from SLURM_NTASKS / SLURM_NTASKS_PER_NODE).
"$RUN_RECIPE" "${args[@]}" --dry-run --check-inputs
mkdir -p logs
# Threads per rank of the CPU runtime (kernels/cpu); the CUDA runtime does not use them.
export TR_CPU_THREADS=${TR_CPU_THREADS:-1}
srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 "$RUN_RECIPE" "${args[@]}"
