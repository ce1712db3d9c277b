#!/usr/bin/env bash
# bench_hf_convert: trestle_ckpt import and export of a bf16 Llama safetensors model made here
# (default ~1 GB; MB=64 for a quick look) next to `cat FILES > /dev/null` (the ceiling of reading
# them, from the page cache once warm) and, when the safetensors Python package is present, its
# load of the same file (safetensors.torch.load_file), in the same run. Every round is printed, then the best of each and
# the ratios; import and export each against its disk ceiling (cat of what it reads + a dd write
# of what it writes, with fsync) in the same round. OLD_CK=path/to/another/trestle_ckpt adds its
# export of the same checkpoint to each round (an A/B of two builds under the same load).
# Not a ctest:  bench/hf_convert.sh BUILD_DIR [ROUNDS]   (env MB, DIR, OLD_CK)
set -u
B=${1:?usage: bench/hf_convert.sh BUILD_DIR [ROUNDS]}
ROUNDS=${2:-3}
MB=${MB:-1024}
CK="$B/trestle_ckpt"
W=$(mktemp -d "${DIR:-/tmp}/bench_hf.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
python3 - "$W/hf" "$MB" <<'PY' || exit 1
import json, os, struct, sys
import numpy as np
d, mb = sys.argv[1], int(sys.argv[2])
C, F, H, D, V = 1024, 4096, 8, 128, 8192
per_layer = 4 * C * C + 3 * C * F + 2 * C
L = max(1, (mb * 2**20 // 2 - 2 * V * C) // per_layer)
os.makedirs(d)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": H, "head_dim": D, "vocab_size": V,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "rope_scaling": None, "tie_word_embeddings": False, "hidden_act": "silu",
           "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16"},
          open(os.path.join(d, "config.json"), "w"))
t = [("model.embed_tokens.weight", [V, C])]
for i in range(L):
    p = f"model.layers.{i}."
    t += [(p + "input_layernorm.weight", [C]), (p + "self_attn.q_proj.weight", [C, C]),
          (p + "self_attn.k_proj.weight", [C, C]), (p + "self_attn.v_proj.weight", [C, C]),
          (p + "self_attn.o_proj.weight", [C, C]), (p + "post_attention_layernorm.weight", [C]),
          (p + "mlp.gate_proj.weight", [F, C]), (p + "mlp.up_proj.weight", [F, C]),
          (p + "mlp.down_proj.weight", [C, F])]
t += [("model.norm.weight", [C]), ("lm_head.weight", [V, C])]
head, at = {"__metadata__": {"format": "pt"}}, 0
for name, shape in t:
    n = int(np.prod(shape))
    head[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + 2 * n]}
    at += 2 * n
h = json.dumps(head).encode()
h += b" " * ((8 - (8 + len(h)) % 8) % 8)
rng = np.random.default_rng(0)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name, shape in t:
        x = rng.standard_normal(int(np.prod(shape)), dtype=np.float32) * 0.02
        f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
print(f"model: {L} layers, {at / 1e9:.3f} GB of bf16 tensors")
PY
tok=(tokenizer.tokenizer_type=NullTokenizer tokenizer.vocab_size=8192)
GB=$(python3 -c "import os;print(os.path.getsize('$W/hf/model.safetensors')/1e9)")
has_st=0
# numpy has no bfloat16: the package's torch loader, when torch is present.
python3 -c "import safetensors.torch" 2>/dev/null && has_st=1
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>"$W/err" || { cat "$W/err"; exit 1; }; e=$(date +%s.%N); echo "$e - $s" | bc; }
best() { sort -g | head -1; }
: >"$W/old"; : >"$W/cat" ; : >"$W/imp"; : >"$W/exp"; : >"$W/st"; : >"$W/ddw"; : >"$W/ckcat"; : >"$W/ddx"
# import writes an fp32 checkpoint (twice the bf16 file) with fsync: its disk ceiling is reading
# the file plus writing that many bytes, timed with dd in the same round.
CKMB=$(python3 -c "import os;print(int(2 * os.path.getsize('$W/hf/model.safetensors') / 2**20))")
for r in $(seq 1 "$ROUNDS"); do
    c=$(t cat "$W/hf/model.safetensors")
    w=$(t dd if=/dev/zero of="$W/dd" bs=1M count="$CKMB" conv=fsync)
    rm -f "$W/dd"
    rm -rf "$W/ck"
    i=$(t "$CK" import --hf "$W/hf" --out "$W/ck" "${tok[@]}")
    rm -rf "$W/out"
    # export reads the fp32 checkpoint and writes the bf16 file with fsync: its disk ceiling is
    # cat of the checkpoint's files plus a dd write of the exported bytes, in the same round.
    k=$(t find "$W/ck" -type f -exec cat {} +)
    XMB=$(python3 -c "import os;print(max(1, round(os.path.getsize('$W/hf/model.safetensors') / 2**20)))")
    y=$(t dd if=/dev/zero of="$W/dd" bs=1M count="$XMB" conv=fsync)
    rm -f "$W/dd"
    x=$(t "$CK" export "$W/ck" --hf-out "$W/out" --hf-config "$W/hf" --dtype bf16 "${tok[@]}")
    # bf16 -> fp32 -> bf16 is exact: round 1 checks every exported tensor's bytes against the
    # file imported (the headers' JSON spacing differs, so not cmp).
    [ "$r" = 1 ] && { python3 - "$W/hf/model.safetensors" "$W/out/model.safetensors" <<'PY' || exit 1
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
    h.pop("__metadata__", None); return f, 8 + n, h
(a, oa, ha), (b, ob, hb) = load(sys.argv[1]), load(sys.argv[2])
assert sorted(ha) == sorted(hb), "tensor names differ"
for k, v in ha.items():
    w = hb[k]; assert (v["dtype"], v["shape"]) == (w["dtype"], w["shape"]), k
    a.seek(oa + v["data_offsets"][0]); b.seek(ob + w["data_offsets"][0])
    n = v["data_offsets"][1] - v["data_offsets"][0]
    assert a.read(n) == b.read(n), "export differs from the file imported: " + k
PY
    }
    o=-
    if [ -n "${OLD_CK:-}" ]; then
        rm -rf "$W/out_old"
        o=$(t "$OLD_CK" export "$W/ck" --hf-out "$W/out_old" --hf-config "$W/hf" --dtype bf16 "${tok[@]}")
        cmp -s "$W/out/model.safetensors" "$W/out_old/model.safetensors" ||
            { echo "OLD_CK's export differs from this build's"; exit 1; }
        rm -rf "$W/out_old"
        echo "$o" >>"$W/old"
    fi
    s=-
    # Timed inside Python: the interpreter's and torch's start are not the load's.
    [ $has_st = 1 ] && s=$(python3 -c "import time; from safetensors.torch import load_file
t = time.monotonic(); x = load_file('$W/hf/model.safetensors'); s = sum(v.sum().item() for v in x.values())
print('%.3f' % (time.monotonic() - t))")
    echo "$c" >>"$W/cat"; echo "$i" >>"$W/imp"; echo "$x" >>"$W/exp"; echo "$s" >>"$W/st"
    echo "$w" >>"$W/ddw"; echo "$k" >>"$W/ckcat"; echo "$y" >>"$W/ddx"
    printf 'round %d: cat %.3f s  dd write %.3f s  import %.3f s (%.0f%% of cat + dd)  cat ckpt %.3f s  dd write %.3f s  export %.3f s (%.0f%% of cat + dd)  safetensors %s s\n' \
        "$r" "$c" "$w" "$i" "$(echo "100 * ($c + $w) / $i" | bc -l)" "$k" "$y" "$x" \
        "$(echo "100 * ($k + $y) / $x" | bc -l)" "$s"
    [ "$o" != - ] && printf '         OLD_CK export %.3f s (this build %.2f x faster)\n' "$o" "$(echo "$o / $x" | bc -l)"
done
bc_=$(best <"$W/cat"); bi=$(best <"$W/imp"); bx=$(best <"$W/exp"); bw=$(best <"$W/ddw")
bk=$(best <"$W/ckcat"); by=$(best <"$W/ddx")
printf 'import against its disk ceiling (read the file, write %d MB with fsync): %.2f s vs %.2f s (%.0f%%)\n' \
    "$CKMB" "$bi" "$(echo "$bc_ + $bw" | bc -l)" "$(echo "100 * ($bc_ + $bw) / $bi" | bc -l)"
printf 'export against its disk ceiling (read the checkpoint, write %d MB with fsync): %.2f s vs %.2f s (%.0f%%)\n' \
    "$XMB" "$bx" "$(echo "$bk + $by" | bc -l)" "$(echo "100 * ($bk + $by) / $bx" | bc -l)"
printf 'best (%.3f GB): cat %.2f GB/s  import %.2f GB/s (%.0f%% of cat)  export %.2f GB/s (%.0f%% of cat)\n' \
    "$GB" "$(echo "$GB / $bc_" | bc -l)" "$(echo "$GB / $bi" | bc -l)" "$(echo "100 * $bc_ / $bi" | bc -l)" \
    "$(echo "$GB / $bx" | bc -l)" "$(echo "100 * $bc_ / $bx" | bc -l)"
[ -s "$W/old" ] && printf 'export: this build %.2f s, OLD_CK %.2f s (best of each)\n' "$bx" "$(best <"$W/old")"
if [ $has_st = 1 ]; then
    bs=$(best <"$W/st")
    printf 'safetensors (python, torch): %.2f GB/s; import / safetensors %.2f\n' \
        "$(echo "$GB / $bs" | bc -l)" "$(echo "$bs / $bi" | bc -l)"
else
    echo "safetensors (python): safetensors.torch not installed, not measured"
fi
