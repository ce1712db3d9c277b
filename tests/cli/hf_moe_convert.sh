# trestle_ckpt's Hugging Face conversions of the MoE architectures on the tiny fixtures of
# tests/reference/make_hf_moe_fixtures.py and make_hf_deepseek_fixtures.py: import, export back,
# every tensor byte-identical (fp32; and bf16: a bf16 export imported and exported again is the
# same file), the exported config.json read back to the same model; and the export of a
# checkpoint a PP 2 x DP 2 x EP 2 run saved (learning rate 0, no expert-bias update: the
# weights are the fixture's; each expert written once, by its owner; Qwen3-MoE's and
# DeepSeek-V3's first stage holds dense layers only) equals the one-rank export byte for byte
# (DeepSeek-V3 with MTP too: the last stage's copy of the untied embedding is not saved twice).
. "$(dirname "$0")/lib.sh"
CMP="$SRC/tests/cli/st_compare.py"
FIX="$SRC/tests/reference/fixtures"
tok=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=64)
small=("${tok[@]}" model.seq_length=12 dataset.seq_length=12 train.train_iters=2
       validation.eval_iters=0 logger.log_interval=1)
same() { # A B WHAT: every tensor byte-identical
    python3 "$CMP" "$1" "$2" >"$TMP/cmp" || fail "$3: $(cat "$TMP/cmp")"
}
cd "$TMP" || exit 1

for name in ${TR_HF_MOE_CASES:-hf_mixtral hf_qwen3_moe hf_deepseek_v3_moe hf_deepseek_v3_mtp}; do
    src="$FIX/$name"
    ck import --hf "$src" --out "$TMP/ck_$name"
    expect_rc 0 "import $name"
    ck export "$TMP/ck_$name" --hf-out "$TMP/hf_$name" --hf-config "$src"
    expect_rc 0 "export $name"
    same "$src/model.safetensors" "$TMP/hf_$name/model.safetensors" "$name there and back"
    # The exported config.json describes the same model: exporting with it gives the same file.
    ck export "$TMP/ck_$name" --hf-out "$TMP/hf2_$name" --hf-config "$TMP/hf_$name"
    expect_rc 0 "export $name with the exported config.json"
    cmp -s "$TMP/hf_$name/model.safetensors" "$TMP/hf2_$name/model.safetensors" ||
        fail "$name: the exported config.json describes another model"
    arch=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['architectures'][0])" \
        "$src/config.json")
    expect_in "$TMP/hf_$name/config.json" "\"architectures\": [\"$arch\"]" "$name's architecture"
    # bf16: the bf16 file through Trestle and back is the same bytes.
    ck export "$TMP/ck_$name" --hf-out "$TMP/b16_$name" --hf-config "$src" --dtype bf16
    expect_rc 0 "bf16 export of $name"
    # (the converter's model in fp32: the runtime builds MLA in fp32 only)
    ck import --hf "$TMP/b16_$name" --out "$TMP/ckb_$name" model.bf16=false model.params_dtype=fp32
    expect_rc 0 "import of the bf16 $name"
    ck export "$TMP/ckb_$name" --hf-out "$TMP/b16b_$name" --hf-config "$TMP/b16_$name" --dtype bf16 \
        model.bf16=false model.params_dtype=fp32
    expect_rc 0 "bf16 export of the bf16 $name"
    same "$TMP/b16_$name/model.safetensors" "$TMP/b16b_$name/model.safetensors" \
        "bf16 $name there and back"

    # PP 2 x DP 2 with EP 2 saves; its export is the one-rank export (an odd layer count split
    # unevenly).
    # With MTP and an untied embedding the last stage loads a copy of the embedding for the
    # depth and leaves it out of the checkpoint: the first stage writes the tensor.
    read -r layers < <(python3 -c "import json,sys; c = json.load(open(sys.argv[1]));
print(c['num_hidden_layers'])" "$src/config.json")
    pp=2 dp=2 split=()
    [ $((layers % 2)) -eq 1 ] &&
        split=(model.num_layers_in_first_pipeline_stage=$((layers / 2)))
    mpi -np 4 "$RR" --recipe llama_tiny_pretrain --hf-model "$src" "${small[@]}" "${split[@]}" \
        model.pipeline_model_parallel_size=$pp model.expert_model_parallel_size=2 \
        optimizer.lr=0 optimizer.min_lr=0 \
        model.moe_router_bias_update_rate=0 checkpoint.save="$TMP/ck4_$name" \
        logger.output_dir="$TMP/l4_$name"
    expect_rc 0 "PP $pp x DP $dp run of $name saving a checkpoint"
    grep -q "\"layout\": {\"tp\": 1, \"pp\": $pp, \"vpp\": 1, \"dp\": $dp," \
        "$TMP"/ck4_"$name"/iter_*/manifest.json ||
        fail "$name: the checkpoint was not saved under PP $pp x DP $dp"
    ck export "$TMP/ck4_$name" --hf-out "$TMP/hf4_$name" --hf-config "$src" "${tok[@]}"
    expect_rc 0 "export of the PP $pp x DP $dp $name checkpoint"
    cmp -s "$TMP/hf_$name/model.safetensors" "$TMP/hf4_$name/model.safetensors" ||
        fail "$name: the PP $pp x DP $dp export differs from the one-rank export"
done
echo "ok"
