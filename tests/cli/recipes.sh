# --list-recipes shows every recipe with mode, minimum GPUs and parameters taken from the
# resolved model; --describe-recipe resolves one.
. "$(dirname "$0")/lib.sh"

rr --list-recipes
expect_rc 0 "--list-recipes"
line=$(grep '^llama32_1b_pretrain ' "$TMP/out")
[ -n "$line" ] || { show; fail "llama32_1b_pretrain not listed"; }
set -- $line
[ "$2" = pretrain ] || fail "mode: $line"
[ "$3" -ge 1 ] || fail "min GPUs: $line"
case "$4" in [01].*B | 1B) ;; *) fail "params of a 1B model: $4" ;; esac
[ "$(grep -c '?' "$TMP/out")" -eq 0 ] || { grep '?' "$TMP/out"; fail "a recipe did not resolve"; }
[ "$(grep -c '_' "$TMP/out")" -ge 2 ] || fail "fewer than 2 recipes"

rr --describe-recipe llama32_1b_pretrain
expect_rc 0 "--describe-recipe"
expect_in "$TMP/out" "model.num_layers" "settings"
expect_in "$TMP/out" "num_params" "derived values"
rr --describe-recipe llama32_1b_pretrian
expect_rc 2 "unknown recipe"
expect_in "$TMP/err" "did you mean llama32_1b_pretrain" "suggestion"
# Megatron-Bridge's names: a hardware name of a long-context variant resolves, an FP8 variant is
# refused by name, at --describe-recipe and at --dry-run alike.
rr --describe-recipe llama3_8b_pretrain_16gpu_h100_bf16_16k_config
expect_rc 0 "hardware name of the 16k variant"
expect_in "$TMP/out" "llama3_8b_16k_pretrain" "the variant it aliases"
for cmd in --describe-recipe --recipe; do
    if [ "$cmd" = --recipe ]; then rr --recipe llama3_8b_low_precision_pretrain_config --dry-run
    else rr --describe-recipe llama3_8b_pretrain_2gpu_h100_fp8cs_config; fi
    expect_rc 2 "FP8 recipe ($cmd)"
    expect_in "$TMP/err" "recipe.low_precision" "FP8 refusal id ($cmd)"
    expect_in "$TMP/err" "FP8 and FP4 are out of scope" "FP8 refusal message ($cmd)"
done
echo OK
