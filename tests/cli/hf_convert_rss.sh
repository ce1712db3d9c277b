# trestle_ckpt export streams: a checkpoint without adapters goes to the Hugging Face file a
# tensor at a time, the model never built, so its memory is a few tensors. A Llama of 48 layers
# (its largest tensor under 1/200 of the model) is imported, then exported to bf16 while the
# child's peak RSS (getrusage ru_maxrss) is read. The same export of a one-layer model of the same
# widths is the baseline (the program, the config, the reader); the difference must stay under
# 1/8 of the model's fp32 bytes (the export that loaded the model first grew by about 0.8 x; the
# one before it streamed its output, by 2.5 x).
. "$(dirname "$0")/lib.sh"
CK="$(dirname "$RR")/trestle_ckpt"
# AddressSanitizer's shadow memory and quarantine make peak RSS measure the sanitizer.
if ldd "$CK" 2>/dev/null | grep -q 'libasan'; then
    echo "SKIP: peak RSS is not the program's under AddressSanitizer"
    exit 77
fi
cd "$TMP" || exit 1
python3 - "$TMP" <<'PY' || fail "could not write the HF models"
import array, json, os, random, struct, sys
random.seed(0)
C, F, H, G, D, V = 128, 256, 4, 4, 32, 256
cache = {}
def values(n):
    if n not in cache:
        cache[n] = array.array("f", [random.uniform(-0.1, 0.1) for _ in range(n)]).tobytes()
    return cache[n]
for L in (1, 48):
    d = os.path.join(sys.argv[1], f"hf{L}")
    os.makedirs(d)
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
               "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
               "num_key_value_heads": G, "head_dim": D, "vocab_size": V,
               "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "rope_scaling": None, "tie_word_embeddings": False, "hidden_act": "silu",
               "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"},
              open(os.path.join(d, "config.json"), "w"))
    t = [("model.embed_tokens.weight", [V, C])]
    for i in range(L):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", [C]), (p + "self_attn.q_proj.weight", [H * D, C]),
              (p + "self_attn.k_proj.weight", [G * D, C]), (p + "self_attn.v_proj.weight", [G * D, C]),
              (p + "self_attn.o_proj.weight", [C, H * D]), (p + "post_attention_layernorm.weight", [C]),
              (p + "mlp.gate_proj.weight", [F, C]), (p + "mlp.up_proj.weight", [F, C]),
              (p + "mlp.down_proj.weight", [C, F])]
    t += [("model.norm.weight", [C]), ("lm_head.weight", [V, C])]
    head, at, blobs = {}, 0, []
    for name, shape in t:
        n = 1
        for s in shape: n *= s
        head[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + 4 * n]}
        at += 4 * n
        blobs.append(values(n))
    h = json.dumps(head).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs: f.write(b)
    print(at, file=open(os.path.join(d, "bytes"), "w"))
PY
tok=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=256)
peak() { # the child's peak RSS in KiB, or nothing when it failed
    python3 - "$@" <<'PY'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open("err", "w"))
if r.returncode == 0: print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
for L in 1 48; do
    "$CK" import --hf "$TMP/hf$L" --out "$TMP/ck$L" "${tok[@]}" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc 0 "import of the $L-layer model"
    k=$(peak "$CK" export "$TMP/ck$L" --hf-out "$TMP/out$L" --hf-config "$TMP/hf$L" --dtype bf16 \
        "${tok[@]}")
    [ -n "$k" ] || fail "export of the $L-layer model: $(cat "$TMP/err")"
    eval "rss$L=$k"
done
model=$(cat "$TMP/hf48/bytes")
grow=$(((rss48 - rss1) * 1024))
echo "peak RSS: 1 layer $rss1 KiB, 48 layers $rss48 KiB; growth $grow bytes for a model of $model bytes"
[ $((8 * grow)) -lt "$model" ] ||
    fail "the export's peak RSS grew by $grow bytes for a model of $model fp32 bytes (limit 1/8)"
