# MoE checkpoints: the DeepSeek-like recipe (a dense first layer, so its MLP tensors are one
# logical tensor per layer and per expert; the expert bias, a frozen tensor, saved with the
# weights) saved at iteration 3 resumes to 6 with the losses of the run straight through,
# bitwise; the Mixtral-like recipe saved on one rank resumes on two pipeline stages with the
# same losses (fp32, 1e-5); and the DeepSeek-like recipe untied, with the last stage's copy of
# the embedding, from one rank to two stages and back.
. "$(dirname "$0")/lib.sh"
common="train.train_iters=6 train.global_batch_size=4 validation.eval_iters=0 logger.log_interval=1"
losses() { # METRICS FIRST: the train losses from iteration FIRST on, one per line
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["type"] == "train" and r["iteration"] >= int(sys.argv[2]): print(repr(r["loss"]))' "$1" "$2"
}
close() { # WHAT A B: the losses from iteration 4 on within 1e-5
    python3 - "$(losses "$2" 4)" "$(losses "$3" 4)" <<'PY' || fail "$1"
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == 3 and len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
}
rr --recipe deepseek_tiny_pretrain $common checkpoint.save="$TMP/ds" checkpoint.save_interval=3 \
    logger.output_dir="$TMP/ds_a"
expect_rc 0 "the straight run"
[ -d "$TMP/ds/iter_0000003" ] || { show; fail "no checkpoint at iteration 3"; }
rr --recipe deepseek_tiny_pretrain $common checkpoint.load="$TMP/ds" checkpoint.ckpt_step=3 \
    logger.output_dir="$TMP/ds_b"
expect_rc 0 "the resumed run"
expect_in "$TMP/out" "iteration        4/" "it resumes at iteration 4"
[ "$(losses "$TMP/ds_a/metrics.jsonl" 4)" = "$(losses "$TMP/ds_b/metrics.jsonl" 4)" ] ||
    fail "resumed losses differ: $(losses "$TMP/ds_a/metrics.jsonl" 4) vs $(losses "$TMP/ds_b/metrics.jsonl" 4)"
# The bias moved (aux-loss-free balancing) and came back: a resume that lost it would route
# otherwise (checked above); here, that it is in the checkpoint at all.
grep -rqa "mlp.router.expert_bias" "$TMP/ds/iter_0000003" || fail "no expert bias in the checkpoint"

rr --recipe mixtral_tiny_pretrain $common checkpoint.save="$TMP/mx" checkpoint.save_interval=3 \
    logger.output_dir="$TMP/mx_a"
expect_rc 0 "the one-rank run"
"$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" --recipe mixtral_tiny_pretrain $common \
    model.pipeline_model_parallel_size=2 checkpoint.load="$TMP/mx" checkpoint.ckpt_step=3 \
    logger.output_dir="$TMP/mx_b" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "resumed on two pipeline stages"
close "the PP 2 resume differs from the one-rank run" "$TMP/mx_a/metrics.jsonl" \
    "$TMP/mx_b/metrics.jsonl"

# DeepSeek-like with MTP and an untied embedding: under PP the last stage holds a copy of the
# word embedding for the depth, which checkpoints leave to the first stage's tensor. Saved on one
# rank and resumed on two stages (the copy, and its optimizer state, loaded from that tensor),
# and saved on two stages and resumed on one, each against the run straight through (1e-5).
ds=(--recipe deepseek_tiny_pretrain $common model.num_layers=4 model.moe_layer_freq=[0,1,1,1]
    model.share_embeddings_and_output_weights=false checkpoint.save_interval=3)
pp2() { mpi -np 2 "$RR" "$@" model.pipeline_model_parallel_size=2; }
# roundtrip SAVER LOADER NAME WHAT: SAVER runs straight through (saving at 3), LOADER resumes
roundtrip() {
    "$1" "${ds[@]}" checkpoint.save="$TMP/$3" logger.output_dir="$TMP/${3}_a"
    expect_rc 0 "$4: the run straight through"
    "$2" "${ds[@]}" checkpoint.load="$TMP/$3" checkpoint.ckpt_step=3 logger.output_dir="$TMP/${3}_b"
    expect_rc 0 "$4: the resumed run"
    close "$4: the resumed losses differ" "$TMP/${3}_a/metrics.jsonl" "$TMP/${3}_b/metrics.jsonl"
}
roundtrip rr pp2 u1 "untied, one rank to two stages"
roundtrip pp2 rr u2 "untied, two stages to one rank"
# the last stage's copy (and its optimizer state) is not saved: the first stage's tensor is
grep -q "embedding.word_embeddings" "$TMP/u2/iter_0000003/rank_00000.json" ||
    fail "no word embedding in the first stage's checkpoint part"
! grep -q "word_embeddings" "$TMP/u2/iter_0000003/rank_00001.json" ||
    fail "the last stage saved its copy of the word embedding"
echo OK
