# Keys without their effect: a marked key set on the command line is named by the note
# config.no_effect (a note: exit 0, also under --strict, and in JSON); a key the runtime cannot
# honour fails the dry run under its capability rule (runtime.*); a real launch on two ranks
# prints the note once.
. "$(dirname "$0")/lib.sh"
base=(--recipe llama32_1b_pretrain --dry-run --world-size 2 -tp 2 model.sequence_parallel=true)

rr "${base[@]}" comm_overlap.tp_comm_overlap_cfg=tp_preset comm_overlap.tp_comm_overlap=true \
    model.masked_softmax_fusion=false \
    model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
expect_rc 0 "a no-effect key is not an error"
expect_in "$TMP/err" "note [config.no_effect]" "the note"
expect_in "$TMP/err" "comm_overlap.tp_comm_overlap_cfg=tp_preset (argv[" "the note names the key and its origin"
expect_in "$TMP/err" "model.masked_softmax_fusion=false" "the note names every such key"
# Recomputation and TP overlap have their effect (runtime/model/recompute.c, linear.c): not named.
grep -q "model.recompute_" "$TMP/err" && { show; fail "a key with its effect is named"; }
grep -q "comm_overlap.tp_comm_overlap=" "$TMP/err" && { show; fail "a key with its effect is named"; }
[ "$(grep -c 'config.no_effect' "$TMP/err")" -eq 1 ] || { show; fail "more than one note"; }
# model.tp_comm_overlap_cfg is what finalize() derived from the key set: not named.
grep -q "model.tp_comm_overlap_cfg=" "$TMP/err" && { show; fail "a derived value is named"; }

rr "${base[@]}" --strict comm_overlap.tp_comm_overlap_cfg=tp_preset comm_overlap.tp_comm_overlap=true
expect_rc 0 "--strict leaves notes notes"
expect_in "$TMP/err" "comm_overlap.tp_comm_overlap_cfg=tp_preset" "the note under --strict"

rr "${base[@]}" --diagnostics-format json comm_overlap.tp_comm_overlap_cfg=tp_preset comm_overlap.tp_comm_overlap=true
expect_rc 0 "JSON"
python3 - "$TMP/out" <<'PY' || { show; fail "JSON note"; }
import json, sys
d = json.load(open(sys.argv[1]))
notes = [g for g in d["diagnostics"] if g["id"] == "config.no_effect"]
assert d["errors"] == 0 and len(notes) == 1, d
assert notes[0]["severity"] == "note" and "comm_overlap.tp_comm_overlap_cfg" in notes[0]["keys"], notes
assert "model.tp_comm_overlap_cfg" not in notes[0]["keys"], notes
PY

# Without the key, the note does not name it.
rr "${base[@]}"
expect_rc 0 "without the key"
grep -q "comm_overlap.tp_comm_overlap_cfg" "$TMP/err" && { show; fail "named although not set"; }

rr --recipe llama_tiny_pretrain --dry-run model.multi_latent_attention=true model.normalization=LayerNorm
expect_rc 2 "multi-latent attention with LayerNorm is refused"
expect_in "$TMP/err" "error [runtime.mla_layernorm]" "its rule id"
rr --recipe llama_tiny_pretrain --dry-run ddp.check_for_large_grads=true
expect_rc 2 "check_for_large_grads is refused"
expect_in "$TMP/err" "error [runtime.gradient_checks]" "its rule id"

# --explain says it too, for the key and for an unbuilt parameter, and not for a key with effect.
rr --recipe llama_tiny_pretrain --explain comm_overlap.tp_comm_overlap_cfg --explain model.moe_grouped_gemm \
    --explain model.num_layers
expect_rc 0 "explain"
[ "$(grep -c 'no effect in this runtime' "$TMP/out")" -eq 1 ] || { show; fail "explain: no-effect line"; }
[ "$(grep -c 'feature the runtime has not built' "$TMP/out")" -eq 1 ] || { show; fail "explain: unbuilt line"; }

# A real launch on two ranks (TP 2): the note once, from rank 0, before training.
"$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$RR" --recipe llama_tiny_pretrain \
    train.train_iters=1 model.tensor_model_parallel_size=2 comm_overlap.tp_comm_overlap=true \
    comm_overlap.tp_comm_overlap_cfg=tp_preset model.sequence_parallel=true logger.output_dir="$TMP/run" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "real launch"
[ "$(cat "$TMP/out" "$TMP/err" | grep -c 'config.no_effect')" -eq 1 ] ||
    { show; fail "the launch does not print the note exactly once"; }
expect_in "$TMP/err" "comm_overlap.tp_comm_overlap_cfg=tp_preset" "the launch's note names the key"
echo OK
