# --explain lists every value a key took with its origin: recipe, file:line:col, argv[i] (the
# convenience flag and the trailing override), oldest first; it still works when validation
# fails.
. "$(dirname "$0")/lib.sh"

printf '# batch\ntrain:\n  global_batch_size: 64\n' >"$TMP/f1.yaml"
args=(--recipe llama32_1b_pretrain --config-file "$TMP/f1.yaml" -gb 32 train.global_batch_size=16
      --explain train.global_batch_size)
#      argv:  1 2                   3             4              5   6   7
rr "${args[@]}"
expect_rc 0 "explain"
out="$TMP/out"
line_of() { grep -nF -- "$1" "$out" | head -1 | cut -d: -f1; }
r=$(line_of "recipe llama32_1b_pretrain")
f=$(grep -n "f1.yaml:3:[0-9]" "$out" | head -1 | cut -d: -f1)
a5=$(line_of "argv[5]")
a7=$(line_of "argv[7]")
[ -n "$r" ] || { show; fail "no recipe origin"; }
[ -n "$f" ] || { show; fail "no file:line:col origin (f1.yaml:3:N)"; }
[ -n "$a5" ] || { show; fail "no argv[5] origin for -gb"; }
[ -n "$a7" ] || { show; fail "no argv[7] origin for the trailing override"; }
[ "$r" -lt "$f" ] && [ "$f" -lt "$a5" ] && [ "$a5" -lt "$a7" ] || { show; fail "origins out of order"; }

# A config that fails validation still explains, and exits 2.
rr "${args[@]}" --world-size 3 -tp 2
expect_rc 2 "explain on an invalid config"
expect_in "$TMP/out" "argv[7]" "chain printed although validation failed"
expect_in "$TMP/err" "error" "the validation error is reported too"
# -sl is an override pair: both sequence lengths show argv[3] (the flag) in their chains.
rr --recipe llama32_1b_pretrain -sl 2048 --explain dataset.seq_length --explain model.seq_length
expect_rc 0 "-sl explained"
[ "$(grep -c 'argv\[3\]' "$TMP/out")" -eq 2 ] || { show; fail "-sl does not show in both chains"; }

# An unknown key is an error with a suggestion.
rr --recipe llama32_1b_pretrain --explain train.global_batch_sise
expect_rc 2 "explain unknown key"
expect_in "$TMP/err" "train.global_batch_size" "suggestion for a mistyped key"
echo OK
