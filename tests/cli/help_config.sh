# --help-config SECTION prints exactly the rows docs/config-reference.md has for that section;
# one key and the list of sections work too; unknown names get a suggestion.
. "$(dirname "$0")/lib.sh"
ref="$SRC/docs/config-reference.md"

for section in model train checkpoint; do
    rr --help-config $section
    expect_rc 0 "--help-config $section"
    awk -v h="## $section" '$0 == h { on = 1 } on && /^## / && $0 != h { exit } on' "$ref" >"$TMP/doc"
    [ -s "$TMP/doc" ] || fail "no section $section in $ref"
    diff <(grep '^|' "$TMP/out") <(grep '^|' "$TMP/doc") >/dev/null ||
        fail "--help-config $section differs from $ref (regenerate the docs with trestle_gen_docs)"
done
rr --help-config model.tensor_model_parallel_size
expect_rc 0 "one key"
[ "$(grep -c '^| `model' "$TMP/out")" -eq 1 ] || fail "one key: $(cat "$TMP/out")"
rr --help-config
expect_rc 0 "sections"
expect_in "$TMP/out" "optimizer" "section list"
rr --help-config modle
expect_rc 2 "unknown section"
expect_in "$TMP/err" "did you mean model" "section suggestion"
rr --help-config model.tensor_parallel_size
expect_rc 2 "unknown key"
expect_in "$TMP/err" "model.tensor_model_parallel_size" "key suggestion"
echo OK
