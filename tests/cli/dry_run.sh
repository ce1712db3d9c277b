# --dry-run prints a layout and derived values that agree with the resolved inputs: DP, the
# microbatch count, the padded vocabulary and FLOPs are recomputed here from --print-config.
. "$(dirname "$0")/lib.sh"

args=(--recipe llama32_1b_pretrain --world-size 8 -tp 2)
rr "${args[@]}" --print-config
expect_rc 0 "print-config"
cp "$TMP/out" "$TMP/config.yaml"
get() { yaml_get "$TMP/config.yaml" "$1" "$2"; }
tp=$(get model tensor_model_parallel_size)
pp=$(get model pipeline_model_parallel_size)
cp=$(get model context_parallel_size)
gbs=$(get train global_batch_size)
mbs=$(get train micro_batch_size)
seq=$(get model seq_length)
vocab=$(get model vocab_size)
div=$(get model make_vocab_size_divisible_by)
[ "$tp" = 2 ] || fail "-tp 2 gave tensor_model_parallel_size $tp"

rr "${args[@]}" --dry-run
expect_rc 0 "dry run"
expect_in "$TMP/out" "TP 2 x CP $cp x DP $((8 / (2 * cp * pp))) x PP $pp" "layout banner"
dp=$((8 / (tp * cp * pp)))
[ "$(derived world_size)" = 8 ] || fail "world_size $(derived world_size)"
[ "$(derived data_parallel_size)" = "$dp" ] || fail "data_parallel_size $(derived data_parallel_size), expected $dp"
[ "$(derived num_microbatches)" = "$((gbs / (mbs * dp)))" ] ||
    fail "num_microbatches $(derived num_microbatches), expected $gbs/($mbs*$dp)"
padded=$(derived padded_vocab_size)
[ "$vocab" != null ] && { [ "$padded" -ge "$vocab" ] || fail "padded vocab $padded < vocab $vocab"; }
[ $((padded % (div * tp))) -eq 0 ] || fail "padded vocab $padded is not a multiple of $div x $tp"
params=$(derived num_params)
# A 1B-class Llama (16 layers, hidden 2048): between 0.8 and 1.6 billion parameters.
[ "$params" -gt 800000000 ] && [ "$params" -lt 1600000000 ] || fail "num_params $params"
[ "$(derived tokens_per_iteration)" = "$((gbs * seq))" ] || fail "tokens_per_iteration"
python3 - "$(derived flops_per_token)" "$(derived flops_per_iteration)" "$((gbs * seq))" "$params" <<'PY' || fail "FLOPs"
import sys
fpt, fpi, tokens, params = map(float, sys.argv[1:])
assert abs(fpi - fpt * tokens) <= 1e-3 * fpi, (fpi, fpt * tokens)
assert 6 * params <= fpt <= 12 * params, (fpt, params)  # 6N plus attention
PY
expect_in "$TMP/out" "fingerprint " "fingerprint line"
grep -q "^fingerprint [0-9a-f]\{16\}$" "$TMP/out" || fail "fingerprint is not 16 hex digits"

# The same layout for a world that TP 2 does not divide is an error, exit 2.
rr --recipe llama32_1b_pretrain --world-size 3 -tp 2 --dry-run
expect_rc 2 "TP 2 on 3 ranks"
echo OK
