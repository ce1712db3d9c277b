# The catalog check CI relies on: every recipe at its minimum world and at every world size
# from 8 to 16384 where its layout fits, plus the shipped YAML recipes; zero failures.
. "$(dirname "$0")/lib.sh"

rr --validate-all --world-sizes 8,16,32,64,128,256,512,1024,2048,4096,8192,16384 "$SRC"/recipes/yaml/*.yaml
expect_rc 0 "the whole catalog"
expect_in "$TMP/out" " 0 failures" "a clean catalog"
# Every registered recipe and every YAML file was checked (the summary counts both).
n_registry=$("$RR" --list-recipes | tail -n +2 | wc -l)
n_yaml=$(ls "$SRC"/recipes/yaml/*.yaml | wc -l)
expect_in "$TMP/out" "catalog: $((n_registry + n_yaml)) recipes," "every recipe and YAML file checked"
echo OK
