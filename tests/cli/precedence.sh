# recipe < --config-file (in order) < convenience flag < trailing key=value, wherever the
# trailing override stands on the command line.
. "$(dirname "$0")/lib.sh"

printf 'model:\n  tensor_model_parallel_size: 2\n' >"$TMP/f1.yaml"
printf 'model:\n  tensor_model_parallel_size: 4\n' >"$TMP/f2.yaml"
tp_of() {
    rr --recipe llama32_1b_pretrain --world-size 8 --print-config "$@"
    expect_rc 0 "$*"
    yaml_get "$TMP/out" model tensor_model_parallel_size
}
recipe_tp=$(tp_of)
[ "$(tp_of --config-file "$TMP/f1.yaml")" = 2 ] || fail "file1 over recipe ($recipe_tp)"
[ "$(tp_of --config-file "$TMP/f1.yaml" --config-file "$TMP/f2.yaml")" = 4 ] || fail "file2 over file1"
[ "$(tp_of --config-file "$TMP/f2.yaml" --config-file "$TMP/f1.yaml")" = 2 ] || fail "file order"
[ "$(tp_of --config-file "$TMP/f1.yaml" --config-file "$TMP/f2.yaml" -tp 1)" = 1 ] || fail "-tp over files"
[ "$(tp_of --config-file "$TMP/f1.yaml" -tp 1 model.tensor_model_parallel_size=8)" = 8 ] ||
    fail "trailing over -tp"
[ "$(tp_of model.tensor_model_parallel_size=8 --tensor_model_parallel_size 1)" = 8 ] ||
    fail "trailing override written before the flag still wins"
[ "$(tp_of model.tensor_model_parallel_size=8 model.tensor_model_parallel_size=2)" = 2 ] ||
    fail "last trailing override wins"

# -sl moves both sequence lengths (the dataset owns it, the model follows).
rr --recipe llama32_1b_pretrain --print-config -sl 2048
expect_rc 0 "-sl"
[ "$(yaml_get "$TMP/out" dataset seq_length)" = 2048 ] || fail "-sl: dataset.seq_length"
[ "$(yaml_get "$TMP/out" model seq_length)" = 2048 ] || fail "-sl: model.seq_length"
# Both spellings of a string flag reach the same key, quoted so odd paths stay strings.
rr --recipe llama32_1b_pretrain --print-config --save_dir "$TMP/ck pt" --lr 0.0002
expect_rc 0 "--save_dir"
yaml_get "$TMP/out" checkpoint save | grep -qF "$TMP/ck pt" || fail "--save_dir with a space"
[ "$(yaml_get "$TMP/out" optimizer lr)" = 0.0002 ] || fail "--lr"
# mixed_precision.* is copied over the model's dtypes (as Megatron-Bridge does): a model dtype the
# user set is replaced, with a warning naming the key to set instead; that key then wins.
rr --recipe llama32_1b_pretrain --world-size 2 -pp 2 --print-config model.pipeline_dtype=fp32
expect_rc 0 "model.pipeline_dtype under bf16_mixed"
[ "$(yaml_get "$TMP/out" model pipeline_dtype)" = bf16 ] || fail "the preset's pipeline dtype applies"
expect_in "$TMP/err" "finalize.precision_replaces_model" "replaced model dtype is reported"
expect_in "$TMP/err" "set mixed_precision.pipeline_dtype=fp32" "the fix names the key"
rr --recipe llama32_1b_pretrain --world-size 2 -pp 2 --print-config mixed_precision.pipeline_dtype=fp32
expect_rc 0 "mixed_precision.pipeline_dtype"
[ "$(yaml_get "$TMP/out" model pipeline_dtype)" = fp32 ] || fail "mixed_precision.pipeline_dtype reaches the model"
grep -qF "precision_replaces_model" "$TMP/err" && fail "no warning when the mixed-precision key is set"
echo OK
