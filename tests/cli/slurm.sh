# srun against a real single-node Slurm: slurmctld and slurmd (Debian's slurmd, slurmctld and
# slurm-client packages) started here on free ports with a throw-away config, then
#   srun --mpi=pmix -n 2 run_recipe ...            (the world and local ranks come from Slurm)
#   sbatch --wait scripts/launch_with_sbatch.sh    (its dry run, then srun)
# Skipped (exit 77), saying why, where the daemons are not installed or do not come up.
. "$(dirname "$0")/lib.sh"
skip() {
    echo "SKIP: $*"
    exit 77
}
for b in slurmctld slurmd srun sbatch sinfo; do
    command -v $b >/dev/null || skip "$b not installed (apt-get install slurmd slurmctld slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "starting slurmd needs root"
host=$(hostname)
port=$((20000 + RANDOM % 20000))
S=$TMP/slurm
mkdir -p "$S/state" "$S/spool"
cat >"$S/slurm.conf" <<CONF
ClusterName=trestletest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=2 State=UNKNOWN
PartitionName=trestle Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$S/slurm.conf
stop() {
    local pids=()
    for p in "$S/slurmd.pid" "$S/slurmctld.pid"; do
        [ -s "$p" ] && pids+=("$(cat "$p")")
    done
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for _ in $(seq 20); do # the daemons save their state before they go
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.5
    done
    rm -rf "$TMP"
}
trap stop EXIT
slurmctld -f "$SLURM_CONF" >/dev/null 2>&1 || skip "slurmctld did not start: $(tail -2 "$S/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || skip "slurmd did not start: $(tail -2 "$S/slurmd.log" 2>/dev/null)"
up=0
for _ in $(seq 30); do
    sinfo -h -o %T 2>/dev/null | grep -qx idle && { up=1; break; }
    sleep 1
done
[ $up = 1 ] || skip "the Slurm node did not become idle: $(tail -2 "$S/slurmd.log" 2>/dev/null)"

job=(--recipe llama_tiny_pretrain train.train_iters=3 logger.log_interval=1 validation.eval_iters=0)
timeout 120 srun --mpi=pmix -n 2 "$RR" "${job[@]}" logger.output_dir="$TMP/srun" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "srun --mpi=pmix -n 2"
expect_in "$TMP/out" "world 2 = TP 1 x CP 1 x DP 2" "world from Slurm"
[ "$(grep -c '"type":"train"' "$TMP/srun/metrics.jsonl")" = 3 ] || fail "srun: metrics of rank 0"
# The same job on one rank gives the same losses: the ranks really trained together.
"$RR" "${job[@]}" logger.output_dir="$TMP/one" >/dev/null 2>&1 || fail "one-rank run"
losses() { grep -o '"loss":[^,]*' "$1"; }
[ "$(losses "$TMP/srun/metrics.jsonl")" = "$(losses "$TMP/one/metrics.jsonl")" ] ||
    python3 - "$TMP/srun/metrics.jsonl" "$TMP/one/metrics.jsonl" <<'PY' || fail "srun losses differ from one rank"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"train"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"train"' in l]
assert len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)), (a, b)
PY

RECIPE=llama_tiny_pretrain RUN_RECIPE="$RR" \
    OVERRIDES="train.train_iters=2 validation.eval_iters=0 logger.output_dir=$TMP/sbatch" \
    timeout 180 sbatch --wait --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --time=5 \
    --output="$TMP/job.out" --error="$TMP/job.err" "$SRC/scripts/launch_with_sbatch.sh" >/dev/null
rc=$?
[ $rc -eq 0 ] || { cat "$TMP/job.out" "$TMP/job.err"; fail "sbatch launch_with_sbatch.sh: exit $rc"; }
grep -q "dry run: configuration valid" "$TMP/job.out" || fail "sbatch: no dry run first"
grep -q "world 2 = TP 1 x CP 1 x DP 2" "$TMP/job.out" || fail "sbatch: world from Slurm"
[ -s "$TMP/sbatch/metrics.jsonl" ] || fail "sbatch: no metrics"
echo OK
