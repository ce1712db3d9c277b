# Every kind of bad input exits 2 with a message that names the problem and a fix; --help and
# --version exit 0.
. "$(dirname "$0")/lib.sh"

rr --recipe llama32_1b_pretrain --dry-run model.num_layer=4
expect_rc 2 "unknown key"
expect_in "$TMP/err" "model.num_layer" "names the unknown key"
expect_in "$TMP/err" "model.num_layers" "suggests the right key"

rr --recipe llama32_1b_pretrain --dry-rn
expect_rc 2 "unknown flag"
expect_in "$TMP/err" "did you mean --dry-run" "suggests the right flag"
rr --recipe llama32_1b_pretrain --model.num_layers=4
expect_rc 2 "a key written as a flag"
expect_in "$TMP/err" "without dashes" "explains overrides take no dashes"
rr --recipe llama32_1b_pretrain --dry-run stray
expect_rc 2 "a word that is not an override"
expect_in "$TMP/err" "KEY=VALUE" "says what an override looks like"
rr --recipe llama32_1b_pretrain --dry-run -tp
expect_rc 2 "flag without value"
rr --recipe llama32_1b_pretrain --dry-run -tp abc
expect_rc 2 "non-numeric -tp"
expect_in "$TMP/err" "model.tensor_model_parallel_size" "a flag's bad value names its key"
rr --recipe llama32_1b_pretrain --dry-run --world-size 0
expect_rc 2 "--world-size 0"
rr --recipe llama32_1b_pretrian --dry-run
expect_rc 2 "unknown recipe"
expect_in "$TMP/err" "llama32_1b_pretrain" "suggests the right recipe"
rr --recipe llama32_1b_pretrain --dry-run --config-file "$TMP/missing.yaml"
expect_rc 2 "missing config file"
expect_in "$TMP/err" "missing.yaml" "names the missing file"
printf 'train:\n  global_batch_sizee: 4\n' >"$TMP/bad.yaml"
rr --recipe llama32_1b_pretrain --dry-run --config-file "$TMP/bad.yaml"
expect_rc 2 "unknown key in a file"
expect_in "$TMP/err" "bad.yaml:2" "points at the file and line"
rr --dry-run
expect_rc 2 "no recipe"
expect_in "$TMP/err" "--recipe" "says how to name a recipe"
rr --recipe llama32_1b_pretrain --print-groups
expect_rc 2 "--print-groups without --dry-run"
rr --recipe llama32_1b_pretrain --dry-run --diagnostics-format yaml
expect_rc 2 "unknown diagnostics format"

rr --help
expect_rc 0 "--help"
expect_in "$TMP/out" "--recipe" "usage lists --recipe"
expect_in "$TMP/out" "-tp, --tensor_model_parallel_size" "usage lists both spellings"
rr -h
expect_rc 0 "-h"
rr --version
expect_rc 0 "--version"
grep -q "^run_recipe (Trestle) [0-9]" "$TMP/out" || fail "--version: $(cat "$TMP/out")"
echo OK
