#!/usr/bin/env bash
# trestle_ckpt end to end: info, verify (ok and corrupt), can-load (identical, resharded,
# impossible), and usage errors. Usage: tool.sh TRESTLE_CKPT MAKE_FIXTURE
set -u
TOOL=$1
MAKE=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/trestle_ckpt_tool.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
expect() { # expect NAME WANT_RC PATTERN -- CMD...
    local name=$1 want=$2 pat=$3
    shift 4
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [[ $rc -ne $want ]]; then
        echo "FAIL $name: exit $rc, expected $want"; echo "$out"; fails=$((fails + 1)); return
    fi
    if ! grep -qE -- "$pat" <<<"$out"; then
        echo "FAIL $name: output lacks /$pat/"; echo "$out"; fails=$((fails + 1)); return
    fi
    echo "ok   $name"
}

"$MAKE" "$WORK/ck" 2 2 1 1 0 40 || exit 1
"$MAKE" "$WORK/ck" 2 2 1 1 0 50 || exit 1

expect info 0 'layout: +tp=2 pp=2 vpp=1 dp=1 cp=1 ep=1 dist_opt=0 \(world 4\)' -- "$TOOL" info "$WORK/ck"
expect info_iteration 0 '^iteration: +50$' -- "$TOOL" info "$WORK/ck"
expect info_kinds 0 '^optimizer +2 +2 ' -- "$TOOL" info "$WORK/ck"
expect info_step 0 '^iteration: +40$' -- "$TOOL" info "$WORK/ck" --step 40
expect info_iter_dir 0 'decoder.layers.self_attention.linear_qkv.weight f32 \[8, 24, 8\] shards=4' \
    -- "$TOOL" info "$WORK/ck/iter_0000050" --tensors
expect verify_ok 0 '^ok: 8 tensors' -- "$TOOL" verify "$WORK/ck"

expect can_load_same 0 'can load: 8 identical, 0 resharded, 0 impossible' \
    -- "$TOOL" can-load "$WORK/ck" --layout tp=2,pp=2
expect can_load_tp1pp4 0 'reshard +decoder.layers.self_attention.linear_proj.weight' \
    -- "$TOOL" can-load "$WORK/ck" --layout tp=1,pp=4
expect can_load_keys 0 'can load: [0-9]+ identical, [1-9][0-9]* resharded, 0 impossible' \
    -- "$TOOL" can-load "$WORK/ck" model.tensor_model_parallel_size=4 ddp.use_distributed_optimizer=true dp=2
expect can_load_impossible 2 'impossible +decoder.layers.self_attention.linear_qkv.weight: dimension 1 \(24\) does not split into 5' \
    -- "$TOOL" can-load "$WORK/ck" --layout tp=5
expect can_load_uneven_pp 0 'reshard +decoder.layers.input_layernorm.weight: 8 layers over 3 stages is an uneven split' \
    -- "$TOOL" can-load "$WORK/ck" --layout pp=3
expect can_load_bad_key 1 'unknown key' -- "$TOOL" can-load "$WORK/ck" --layout tq=2
expect can_load_no_layout 1 'needs --layout' -- "$TOOL" can-load "$WORK/ck"
expect unknown_command 1 "unknown command 'frobnicate'" -- "$TOOL" frobnicate "$WORK/ck"
expect help 0 '^usage: trestle_ckpt info' -- "$TOOL" --help
expect missing_dir 2 'no_checkpoint' -- "$TOOL" info "$WORK/nothing-here" --step 3

# Corrupt one byte of rank 3's shard file: verify names the tensor and the file, exit 2.
f="$WORK/ck/iter_0000050/shard_r00003.bin"
printf '\x7f' | dd of="$f" bs=1 seek=5 conv=notrunc status=none
expect verify_corrupt 2 "checksum_mismatch.*tensor '[^']+' in file shard_r00003.bin" -- "$TOOL" verify "$WORK/ck"
# The older checkpoint is untouched.
expect verify_older 0 '^ok: ' -- "$TOOL" verify "$WORK/ck" --step 40

[[ $fails -eq 0 ]] && echo "all tool checks passed" || { echo "$fails tool check(s) failed"; exit 1; }
