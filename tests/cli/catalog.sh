# --validate-all checks every recipe for the --world-sizes; a YAML recipe that breaks a rule
# fails it (exit 2) with the file, the world and the rule id, as text or as JSON. Recipes the
# runtime cannot train are listed under their capability rules without failing the catalog.
. "$(dirname "$0")/lib.sh"

rr --validate-all --world-sizes 8,16
expect_rc 0 "the catalog"
grep -q "^catalog: [1-9][0-9]* recipes, [1-9][0-9]* (recipe, world size) checks" "$TMP/out" ||
    { show; fail "no summary"; }
expect_in "$TMP/out" " 0 failures" "a clean catalog"
# What this runtime cannot train is listed under the capability rule's id, not failed; the dry
# run of that recipe fails with the same id, as its launch does.
expect_in "$TMP/out" "qwen3_30b_a3b_lora @ world 4: not trained by this runtime: runtime.moe_peft" \
    "a capability refusal"
grep -q "refusals by the runtime" "$TMP/out" || { show; fail "no refusal count"; }
if grep -q "^llama_tiny_pretrain @ .*not trained" "$TMP/out"; then show; fail "llama_tiny refused"; fi
if grep -q "^moe_tiny_pretrain @ .*not trained" "$TMP/out"; then show; fail "moe_tiny refused"; fi
# (token dropping on part of each sequence: TP 2 with SP and a capacity factor)
MOE_TP_CAP="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1 model.moe_expert_capacity_factor=1.0"
rr --recipe moe_tiny_pretrain $MOE_TP_CAP --world-size 2 --dry-run
expect_rc 2 "the dry run of a recipe the runtime cannot train"
expect_in "$TMP/err" "error [runtime.moe_tp]" "the dry run names the rule"
rr --recipe moe_tiny_pretrain $MOE_TP_CAP --world-size 2 --dry-run --config-only
expect_rc 0 "the same recipe under Megatron's rules alone"

# 32 heads and 8 query groups cannot be split over TP 3.
printf 'base_recipe: llama32_1b_pretrain\nmodel:\n  tensor_model_parallel_size: 3\n' >"$TMP/tp3.yaml"
rr --validate-all --world-sizes 8 "$TMP/tp3.yaml"
expect_rc 2 "a broken YAML recipe"
expect_in "$TMP/err" "tp3.yaml @ world 3: parallel.heads_divisible_by_tp" "failure line"
rr --validate-all --world-sizes 8 "$TMP/tp3.yaml" --diagnostics-format json
expect_rc 2 "a broken YAML recipe, JSON"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(g["id"] == "parallel.heads_divisible_by_tp" for g in d["diagnostics"]), d' "$TMP/out" ||
    { show; fail "JSON failure ids"; }
rr --validate-all --world-sizes 8,x
expect_rc 2 "a bad world size"
echo OK
