#!/usr/bin/env bash
# Checkpoints through run_recipe (one rank): SIGTERM saves at the iteration it stopped and a
# resumed run ends with the uninterrupted run's loss; damaged checkpoints (flipped byte,
# truncated shard, missing shard, a manifest naming a file outside the directory) are refused
# with the diagnostic and a non-zero exit before any training; most_recent_k retention;
# exit_on_missing_checkpoint; a tracker naming a missing iteration; finetune /
# pretrained_checkpoint; unsupported ckpt_format.
# Usage: resume_cli.sh RUN_RECIPE
#        resume_cli.sh RUN_RECIPE --mpi MPIRUN_PREFIX... : only the SIGTERM check, as DP2 with
#        the distributed optimizer under mpirun, the signal sent to the last rank alone (as a
#        scheduler may deliver it): every rank must stop after the same iteration and save it.
set -u
RUN=$1
LAUNCH=()
EXTRA=()
if [[ ${2:-} == --mpi ]]; then
    LAUNCH=("${@:3}")
    EXTRA=(ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/trestle_resume_cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
BASE=(--recipe gpt_tiny_pretrain model.seq_length=32 dataset.seq_length=32
      train.micro_batch_size=1 validation.eval_iters=0 logger.log_interval=1
      scheduler.lr_warmup_iters=2 optimizer.lr=3e-3 "logger.output_dir=$WORK/out")
SMALL=("${BASE[@]}" train.global_batch_size=8)

fail() {
    echo "FAIL $1"
    [[ -n ${2:-} ]] && echo "$2"
    fails=$((fails + 1))
}
expect() { # expect NAME WANT_RC PATTERN -- CMD...
    local name=$1 want=$2 pat=$3
    shift 4
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [[ $want == nonzero && $rc -eq 0 ]] || [[ $want != nonzero && $rc -ne $want ]]; then
        fail "$name: exit $rc, expected $want" "$out"
        return
    fi
    if ! grep -qE -- "$pat" <<<"$out"; then
        fail "$name: output lacks /$pat/" "$out"
        return
    fi
    if [[ $want == nonzero ]] && grep -q "^ iteration" <<<"$out"; then
        fail "$name: trained although the load failed" "$out"
        return
    fi
    echo "ok   $name"
}
# The loss of iteration N in a log.
loss_at() { grep -E "^ iteration +$2/" "$1" | sed -E 's/.*lm loss: ([^ ]+).*/\1/'; }

# (d) SIGTERM: the run finishes its iteration, saves it, and exits 128 + 15. The signal is sent
# once iteration 2 is logged; ITERS leaves the run far more iterations than a loaded machine
# gets through before the signal lands (with 10, the run sometimes reached its last iteration
# first and the resume had nothing left to train).
ITERS=60
SIG=("${BASE[@]}" train.global_batch_size=32 "train.train_iters=$ITERS" "${EXTRA[@]}")
"${LAUNCH[@]}" "$RUN" "${SIG[@]}" "checkpoint.save=$WORK/sig" >"$WORK/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    grep -qE "^ iteration +2/" "$WORK/sig.log" && break
    sleep 0.05
done
target=$pid
if [[ ${#LAUNCH[@]} -gt 0 ]]; then # the launcher's last rank process
    target=$(pgrep -P "$pid" -f run_recipe | tail -1)
fi
kill -TERM "$target"
wait "$pid"
rc=$?
stopped=$(grep -E "^ iteration" "$WORK/sig.log" | tail -1 | sed -E 's/^ iteration +([0-9]+)\/.*/\1/')
if [[ $rc -ne 143 ]]; then
    fail "sigterm: exit $rc, expected 143" "$(cat "$WORK/sig.log")"
elif [[ $(cat "$WORK/sig/latest_checkpointed_iteration.txt") != "$stopped" ]] ||
    ! grep -q "checkpoint: saved iteration $stopped " "$WORK/sig.log"; then
    fail "sigterm: no checkpoint of iteration $stopped" "$(cat "$WORK/sig.log")"
else
    echo "ok   sigterm saves iteration $stopped"
    "${LAUNCH[@]}" "$RUN" "${SIG[@]}" "checkpoint.load=$WORK/sig" >"$WORK/resumed.log" 2>&1 ||
        fail "sigterm: the resumed run failed" "$(cat "$WORK/resumed.log")"
    "${LAUNCH[@]}" "$RUN" "${SIG[@]}" >"$WORK/whole.log" 2>&1 ||
        fail "sigterm: the uninterrupted run failed"
    first=$(grep -E "^ iteration" "$WORK/resumed.log" | head -1 | sed -E 's/^ iteration +([0-9]+)\/.*/\1/')
    a=$(loss_at "$WORK/resumed.log" $ITERS)
    b=$(loss_at "$WORK/whole.log" $ITERS)
    if [[ $first != $((stopped + 1)) || -z $a || $a != "$b" ]]; then
        fail "sigterm resume: starts at $first (want $((stopped + 1))), final loss $a vs $b"
    else
        echo "ok   resumed after SIGTERM: final loss $a equals the uninterrupted run's"
    fi
fi

if [[ ${#LAUNCH[@]} -gt 0 ]]; then
    exit $((fails > 0))
fi

# (f) most_recent_k = 2 with save_retain_interval = 3: iterations 3, 4 and 5 remain.
"$RUN" "${SMALL[@]}" train.train_iters=5 "checkpoint.save=$WORK/keep" checkpoint.save_interval=1 \
    checkpoint.most_recent_k=2 checkpoint.save_retain_interval=3 >"$WORK/keep.log" 2>&1 ||
    fail "retention run" "$(cat "$WORK/keep.log")"
kept=$(cd "$WORK/keep" && echo iter_*)
if [[ $kept == "iter_0000003 iter_0000004 iter_0000005" ]]; then
    echo "ok   most_recent_k keeps $kept"
else
    fail "most_recent_k: kept $kept"
fi

# (e) Damaged checkpoints: copies of a good one, each broken one way.
GOOD=$WORK/keep
damaged() { rm -rf "$WORK/bad" && cp -r "$GOOD" "$WORK/bad" && echo "$WORK/bad/iter_0000005"; }
LOAD=("${SMALL[@]}" train.train_iters=8 "checkpoint.load=$WORK/bad")
d=$(damaged)
printf '\x55' | dd of="$d/shard_r00000.bin" bs=1 seek=1000 conv=notrunc status=none
expect flipped_byte nonzero 'checkpoint.checksum_mismatch.*(decoder|embedding|optimizer)' -- \
    "$RUN" "${LOAD[@]}"
d=$(damaged)
truncate -s -8 "$d/shard_r00000.bin"
expect truncated nonzero 'checkpoint.file_truncated.*shard_r00000.bin' -- "$RUN" "${LOAD[@]}"
d=$(damaged)
rm "$d/shard_r00000.bin"
expect missing_shard nonzero 'checkpoint.file_missing.*shard_r00000.bin' -- "$RUN" "${LOAD[@]}"
d=$(damaged)
sed -i 's#"shard_r00000.bin"#"../shard_r00000.bin"#g' "$d/manifest.json"
cp "$d/shard_r00000.bin" "$WORK/bad/shard_r00000.bin"
expect manifest_escape nonzero 'checkpoint.(path_escape|manifest_invalid).*\.\./shard' -- \
    "$RUN" "${LOAD[@]}"
d=$(damaged)
printf '\x55' | dd of="$d/shard_r00000.bin" bs=1 seek=1000 conv=notrunc status=none
expect verify_integrity nonzero 'checkpoint.checksum_mismatch' -- "$RUN" "${LOAD[@]}" \
    checkpoint.verify_integrity=true

# Missing checkpoints: fresh start, or an error with exit_on_missing_checkpoint.
mkdir -p "$WORK/empty"
expect missing_starts_fresh 0 'starting from scratch' -- "$RUN" "${SMALL[@]}" train.train_iters=1 \
    "checkpoint.load=$WORK/empty"
expect exit_on_missing nonzero 'checkpoint.no_checkpoint' -- "$RUN" "${SMALL[@]}" \
    train.train_iters=1 "checkpoint.load=$WORK/empty" checkpoint.exit_on_missing_checkpoint=true

# A tracker naming an iteration whose directory is gone is an error, never a fresh start (which
# would later save over what is left); trestle_ckpt verify says the same.
mkdir -p "$WORK/dangling"
cp -r "$GOOD"/iter_* "$WORK/dangling/"
echo 999 >"$WORK/dangling/latest_checkpointed_iteration.txt"
DANGLING=("${SMALL[@]}" train.train_iters=1 "checkpoint.load=$WORK/dangling"
          "checkpoint.save=$WORK/dangling")
expect tracker_dangling nonzero 'checkpoint.missing_iteration.*iter_0000999.*: iter_0' -- \
    "$RUN" "${DANGLING[@]}"
out=$("$RUN" "${DANGLING[@]}" 2>&1)
grep -q 'starting from scratch' <<<"$out" && fail "tracker_dangling: started from scratch" "$out"
[[ -e $WORK/dangling/iter_0000001 ]] && fail "tracker_dangling: saved into the directory"

# Weights only: finetune restarts the iteration count; pretrained_checkpoint when load is empty.
expect finetune 0 'loaded weights.*iteration 5\)' -- "$RUN" "${SMALL[@]}" train.train_iters=2 \
    "checkpoint.load=$GOOD" checkpoint.finetune=true
expect pretrained 0 'loaded weights' -- "$RUN" "${SMALL[@]}" train.train_iters=2 \
    "checkpoint.load=$WORK/empty" "checkpoint.pretrained_checkpoint=$GOOD"
out=$("$RUN" "${SMALL[@]}" train.train_iters=2 "checkpoint.load=$GOOD" checkpoint.finetune=true 2>&1)
grep -qE "^ iteration +1/" <<<"$out" && echo "ok   finetune starts at iteration 1" ||
    fail "finetune did not restart the iteration count" "$out"

# Formats the runtime cannot write.
expect torch_format nonzero 'runtime.ckpt_format' -- "$RUN" "${SMALL[@]}" \
    train.train_iters=1 "checkpoint.save=$WORK/t" checkpoint.ckpt_format=torch

[[ $fails -eq 0 ]] && echo "all checkpoint CLI checks passed"
exit $((fails > 0))
