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
echo OK
