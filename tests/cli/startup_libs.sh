# Inspection never loads the runtime's libraries (#24): --dry-run, --print-config, --explain,
# --validate-all and --version map no MPI, OpenBLAS, CUDA runtime, cuBLASLt or NCCL (the dynamic
# loader's own trace, LD_DEBUG=libs, lists every object it initialises); a real run does load
# the launch module and MPI with it, so the check can tell the two apart.
. "$(dirname "$0")/lib.sh"
LIBS='libmpi|libopen-pal|libopenblas|libcudart|libcublas|libnccl|trestle_launch'

inspect() {
    LD_DEBUG=libs "$RR" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -le 2 ] || { show; fail "$*: exit $rc"; }
    grep -q 'calling init' "$TMP/err" || fail "$*: no loader trace (LD_DEBUG unsupported?)"
    if grep -E "calling init: .*($LIBS)" "$TMP/err"; then
        fail "$*: loaded a runtime library"
    fi
    echo "ok   $*"
}

inspect --recipe llama3_70b_pretrain --dry-run --world-size 64
inspect --recipe llama3_70b_pretrain --dry-run --world-size 64 model.context_parallel_size=1
inspect --recipe llama32_1b_pretrain --print-config
inspect --recipe llama32_1b_pretrain --explain optimizer.lr
inspect --validate-all
inspect --version

# A launch (one rank, two iterations) goes through the module.
LD_DEBUG=libs "$RR" --recipe llama_tiny_pretrain train.train_iters=2 validation.eval_iters=0 \
    model.seq_length=32 dataset.seq_length=32 logger.output_dir="$TMP/o" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] || { show; fail "launch: exit $rc"; }
grep -Eq 'calling init: .*trestle_launch' "$TMP/err" || fail "launch: the module was not loaded"
grep -Eq 'calling init: .*libmpi' "$TMP/err" || fail "launch: MPI was not loaded"
# A CUDA build's host run opens the CUDA-free module: no CUDA library is mapped (the CUDA one is
# trestle_launch_cuda.so, for TRESTLE_DEVICE=cuda).
if grep -E 'calling init: .*(libcudart|libcublas|libnccl|trestle_launch_cuda)' "$TMP/err"; then
    fail "launch: a host run loaded a CUDA library"
fi
echo "ok   a launch loads trestle_launch.so and MPI, and no CUDA library"

# A module that cannot be opened is an internal failure with the loader's reason, not a crash.
TRESTLE_LAUNCH_MODULE="$TMP/none.so" rr --recipe llama_tiny_pretrain train.train_iters=1
[ "$rc" -eq 1 ] || { show; fail "missing module: exit $rc, expected 1"; }
grep -q 'cannot load the launch module: .*none.so' "$TMP/err" || { show; fail "missing module: no reason"; }
echo "ok   a missing module is named"
echo OK
