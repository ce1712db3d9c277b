# trestle_ckpt's Hugging Face conversions on the tiny fixtures of tests/reference/make_hf_fixtures.py:
# import an HF directory as a Trestle checkpoint and export it back (every tensor byte-identical,
# Llama and GPT-2); export a checkpoint a TP 2 x PP 2 run saved (learning rate 0, so the weights
# are the fixture's: the reader's resharding gives every tensor back byte for byte); export a
# LoRA checkpoint saved under TP 2 merged (the adapted layers change, nothing else), and refuse
# it without the peft settings rather than write the base alone; export its adapters alone as a
# PEFT adapter directory.
. "$(dirname "$0")/lib.sh"
CMP="$SRC/tests/cli/st_compare.py"
H="$SRC/tests/reference/fixtures/hf_llama"
G="$SRC/tests/reference/fixtures/hf_gpt2"
tok=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=64)
small=("${tok[@]}" model.seq_length=12 dataset.seq_length=12 train.train_iters=2
       validation.eval_iters=0 logger.log_interval=1)
cd "$TMP" || exit 1

for src in "$H" "$G"; do
    name=$(basename "$src")
    ck import --hf "$src" --out "$TMP/ck_$name"
    expect_rc 0 "import $name"
    expect_in "$TMP/err" "checkpoint: saved iteration 0 to $TMP/ck_$name" "the checkpoint is written"
    ck export "$TMP/ck_$name" --hf-out "$TMP/hf_$name" --hf-config "$src"
    expect_rc 0 "export $name"
    expect_in "$TMP/err" "export: wrote $TMP/hf_$name/config.json" "the progress lines"
    python3 "$CMP" "$src/model.safetensors" "$TMP/hf_$name/model.safetensors" >"$TMP/out" ||
        fail "$name through a Trestle checkpoint and back: $(cat "$TMP/out")"
done

mpi -np 4 "$RR" --recipe llama_tiny_pretrain --hf-model "$H" "${small[@]}" \
    model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=2 optimizer.lr=0 \
    optimizer.min_lr=0 checkpoint.save="$TMP/ck4" logger.output_dir="$TMP/l4"
expect_rc 0 "TP 2 x PP 2 run saving a checkpoint"
ck export "$TMP/ck4" --hf-out "$TMP/hf4" --recipe llama_tiny_pretrain --hf-config "$H" "${tok[@]}"
expect_rc 0 "export of the TP 2 x PP 2 checkpoint"
expect_in "$TMP/err" "loaded model, optimizer and position from $TMP/ck4/iter_0000002" "iteration 2"
python3 "$CMP" "$H/model.safetensors" "$TMP/hf4/model.safetensors" >"$TMP/out" ||
    fail "export from TP 2 x PP 2: $(cat "$TMP/out")"
ck export "$TMP/ck4" --hf-out "$TMP/hf4b" --hf-config "$H" --dtype bf16
expect_rc 0 "bf16 export"
expect_in "$TMP/hf4b/config.json" '"torch_dtype": "bfloat16"' "the bf16 config"

lora=(peft.scheme=lora peft.dim=4 peft.alpha=8)
mpi -np 2 "$RR" --recipe llama_tiny_pretrain --hf-model "$H" "${small[@]}" "${lora[@]}" \
    model.tensor_model_parallel_size=2 checkpoint.save="$TMP/ckl" logger.output_dir="$TMP/ll"
expect_rc 0 "LoRA run under TP 2 saving a checkpoint"
# A LoRA run from a Hugging Face base saves its adapters, not the frozen base.
grep -q '"decoder.layers.self_attention.linear_qkv.weight"' "$TMP"/ckl/iter_*/manifest.json &&
    fail "the LoRA checkpoint holds the frozen base"
grep -q 'linear_qkv.adapter.linear_in.weight' "$TMP"/ckl/iter_*/manifest.json ||
    fail "the LoRA checkpoint lacks its adapters"
ck export "$TMP/ckl" --hf-out "$TMP/hfl_bad" --recipe llama_tiny_pretrain --hf-config "$H" "${tok[@]}"
expect_rc 2 "a LoRA checkpoint exported without the peft settings"
expect_in "$TMP/err" "holds LoRA adapters" "the refusal says why"
[ ! -e "$TMP/hfl_bad" ] || fail "a refused export left $TMP/hfl_bad"
ck export "$TMP/ckl" --hf-out "$TMP/hfl" --recipe llama_tiny_pretrain --hf-config "$H" "${tok[@]}" \
    "${lora[@]}" checkpoint.pretrained_checkpoint="$H"
expect_rc 0 "the LoRA checkpoint exported merged"
expect_in "$TMP/err" "adapters merged on export" "the merge is announced"
python3 "$CMP" "$H/model.safetensors" "$TMP/hfl/model.safetensors" --differ q_proj k_proj v_proj \
    o_proj gate_proj up_proj down_proj >"$TMP/out" ||
    fail "the merged export: $(cat "$TMP/out")"

# The adapters alone, in PEFT's format: PEFT's names and shapes, the run's r and alpha.
ck export "$TMP/ckl" --hf-out "$TMP/hfa" --recipe llama_tiny_pretrain --hf-config "$H" "${tok[@]}" \
    "${lora[@]}" checkpoint.pretrained_checkpoint="$H" --adapter-only
expect_rc 0 "the LoRA checkpoint's adapters exported alone"
expect_in "$TMP/err" "adapters alone on export" "the adapter export is announced"
[ ! -e "$TMP/hfa/model.safetensors" ] || fail "--adapter-only wrote a model"
python3 - "$TMP/hfa" "$H" >"$TMP/out" <<'PY' || fail "the PEFT adapter files: $(cat "$TMP/out")"
import json, struct, sys
d, base = sys.argv[1], sys.argv[2]
conf = json.load(open(d + "/adapter_config.json"))
assert conf["peft_type"] == "LORA" and conf["r"] == 4 and conf["lora_alpha"] == 8, conf
assert conf["base_model_name_or_path"] == base, conf
mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
assert sorted(conf["target_modules"]) == sorted(mods), conf
raw = open(d + "/adapter_model.safetensors", "rb").read()
head = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
assert head.pop("__metadata__") == {"format": "pt"}
want = {f"base_model.model.model.layers.{i}.{'self_attn' if m[0] in 'qkvo' else 'mlp'}.{m}.lora_{s}.weight"
        for i in range(2) for m in mods for s in "AB"}
assert set(head) == want, sorted(set(head) ^ want)
assert head["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"]["shape"] == [16, 4]
assert head["base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"]["shape"] == [4, 48]
PY
# With the peft package present (not in CI, whose oracle is the committed fixture of
# tests/unit/hf/test_hf_adapter.c), peft loads the adapters onto the base and computes what the
# merged export computes through transformers.
if python3 -c "import peft, transformers" 2>/dev/null; then
    python3 "$SRC/tests/reference/check_peft_adapter.py" "$H" "$TMP/hfa" "$TMP/hfl" >"$TMP/out" 2>&1 ||
        fail "peft on the exported adapters: $(cat "$TMP/out")"
    cat "$TMP/out"
else
    echo "skipped: peft on the exported adapters (the peft package is not installed)"
fi

ck export "$TMP/ck4"
expect_rc 1 "export without --hf-out"
expect_in "$TMP/err" "usage: trestle_ckpt export" "the usage"
echo "ok"
