# trestle_generate on the tiny fixtures (tests/reference/make_generate_fixtures.py): greedy
# generation of 32 tokens with the KV cache gives the ids transformers' generate gave, for
# LlamaForCausalLM, Qwen3ForCausalLM and GPT2LMHeadModel directories and for a Trestle
# checkpoint imported from one; sampling is reproducible by seed, top-k 1 is greedy; a text
# prompt goes through tokenizer.json; a prompt past a learned position table, an id outside
# the vocabulary and a text prompt without a tokenizer are refused.
. "$(dirname "$0")/lib.sh"
GEN="$(dirname "$RR")/trestle_generate"
CK="$(dirname "$RR")/trestle_ckpt"
F="$SRC/tests/reference/fixtures"
gen() {
    "$GEN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
cd "$TMP" || exit 1

for m in hf_llama hf_qwen3 hf_gpt2_gen; do
    prompt=$(sed -n 1p "$F/$m/generate.txt")
    want=$(sed -n 2p "$F/$m/generate.txt")
    gen --hf "$F/$m" --prompt-ids "$prompt" --max-new-tokens 32 --ids
    expect_rc 0 "greedy generation from $m"
    [ "$(cat "$TMP/out")" = "$want" ] ||
        fail "$m: generated $(cat "$TMP/out"), transformers' generate gave $want"
done

# A Trestle checkpoint imported from the Qwen3 directory generates the same tokens.
"$CK" import --hf "$F/hf_qwen3" --out "$TMP/ck" >/dev/null 2>&1 || fail "import of hf_qwen3"
prompt=$(sed -n 1p "$F/hf_qwen3/generate.txt")
gen --ckpt "$TMP/ck" --hf-config "$F/hf_qwen3" --prompt-ids "$prompt" --ids
expect_rc 0 "generation from a Trestle checkpoint"
[ "$(cat "$TMP/out")" = "$(sed -n 2p "$F/hf_qwen3/generate.txt")" ] ||
    fail "the checkpoint generated $(cat "$TMP/out")"

# Sampling: the same seed gives the same tokens, another seed others; top-k 1 is greedy.
s=(--hf "$F/hf_qwen3" --prompt-ids "$prompt" --ids --temperature 1.5 --top-p 0.9)
gen "${s[@]}" --seed 1
a=$(cat "$TMP/out")
gen "${s[@]}" --seed 1
[ "$(cat "$TMP/out")" = "$a" ] || fail "sampling with one seed differs between runs"
gen "${s[@]}" --seed 2
[ "$(cat "$TMP/out")" != "$a" ] || fail "seeds 1 and 2 sampled the same 32 tokens"
[ "$a" != "$(sed -n 2p "$F/hf_qwen3/generate.txt")" ] || fail "sampling gave the greedy tokens"
gen --hf "$F/hf_qwen3" --prompt-ids "$prompt" --ids --temperature 2 --top-k 1 --seed 5
[ "$(cat "$TMP/out")" = "$(sed -n 2p "$F/hf_qwen3/generate.txt")" ] || fail "top-k 1 is not greedy"

# Text in and out through tokenizer.json (the fixture's 64 ids cover these characters).
gen --hf "$F/hf_llama" --tokenizer "$SRC/tests/data/tokenizer/llama3" --prompt '#$%&' \
    --max-new-tokens 4
expect_rc 0 "a text prompt"
expect_in "$TMP/out" '#$%&' "the prompt's text is printed before the new tokens"

gen --hf "$F/hf_gpt2_gen" --prompt-ids "1 2 3" --max-new-tokens 62
expect_rc 2 "past GPT-2's 64 positions"
expect_in "$TMP/err" "cannot generate 65 positions" "the refusal names the length"
gen --hf "$F/hf_llama" --prompt-ids "1 64" --max-new-tokens 2
expect_rc 2 "an id outside the vocabulary"
expect_in "$TMP/err" "generate.prompt" "the refusal"
gen --hf "$F/hf_llama" --prompt "hello"
expect_rc 2 "text without a tokenizer"
expect_in "$TMP/err" "needs a tokenizer" "the refusal says why"
gen --hf "$F/hf_llama"
expect_rc 1 "no prompt"
echo "ok"
