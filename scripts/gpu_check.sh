#!/usr/bin/env bash
# One command for a fresh GPU machine (an H200 with CUDA, CMake and PyTorch, no network, none of
# our Debian libraries): build with the bundle from scripts/gpu_bundle.sh, run the GPU tests,
# then the checks that need the training runtime's CUDA path, then the llama32_1b_pretrain
# benchmark beside the same step in PyTorch. Parts that cannot run yet print "SKIPPED: <why>".
# Budget: about 8 minutes in all (each stage has its own timeout).
#
# Usage (device tool, from the repo root; carry ".gpu_bundle/debs"):
#   scripts/gpu_check.sh [--quick]      --quick: tests only, no benchmarks
# Logs go to $OUT (the device tool's output folder) or ./gpu_check_out.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG=${OUT:-$ROOT/gpu_check_out}
mkdir -p "$LOG"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
stage() { printf '\n=== %s (t=%ss)\n' "$1" "$(elapsed)"; }
SUMMARY=()
note() { SUMMARY+=("$1"); echo "$1"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
nvcc --version | tail -1
cmake --version | head -1
NPROC=$(nproc)

# --- the bundle: our Debian libraries unpacked under .gpu_bundle/root, used in place ----------
stage "bundle"
B=$ROOT/.gpu_bundle/root
if [ ! -d "$B/usr" ] && ls .gpu_bundle/debs/*.deb >/dev/null 2>&1; then
  scripts/gpu_bundle.sh --unpack || { echo "bundle unpack failed"; exit 1; }
fi
CMAKE_BUNDLE_ARGS=()
if [ -d "$B/usr" ]; then
  L=$B/usr/lib/x86_64-linux-gnu
  export PATH=$B/usr/bin:$PATH
  export LD_LIBRARY_PATH=$L:$L/openblas-pthread:$L/openmpi/lib:$L/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$B/usr            # Open MPI finds its plugins and help files from here
  export PMIX_INSTALL_PREFIX=$L/pmix2 PMIX_MCA_pcompress_base_silence_warning=1
  export PKG_CONFIG_PATH=$L/pkgconfig:$B/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$B     # the .pc files say /usr; prefix them with the bundle
  export OMPI_MCA_plm_rsh_agent=       # no ssh on a one-node run
  CMAKE_BUNDLE_ARGS=(
    -DPKG_CONFIG_EXECUTABLE=$B/usr/bin/pkgconf
    -DXXHASH_LIB=$L/libxxhash.so -DXXHASH_INCLUDE=$B/usr/include
    -DOPENBLAS_LIB=$L/openblas-pthread/libopenblas.so
    -DCBLAS_INCLUDE=$B/usr/include/x86_64-linux-gnu/openblas-pthread
    -DPCRE2_LIB=$L/libpcre2-8.so
    -DMPI_C_COMPILER=$B/usr/bin/mpicc -DMPIEXEC_EXECUTABLE=$B/usr/bin/mpirun)
  echo "using the bundle in $B"
else
  echo "no .gpu_bundle: using the system's libraries"
fi
# NCCL: the toolkit's, else the copy PyTorch's wheels bring (nvidia-nccl-cu13: no libnccl.so link,
# so name the file).
if ! ls /usr/local/cuda/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* >/dev/null 2>&1; then
  NCCL_DIR=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
  NCCL_SO=$(ls "$NCCL_DIR"/lib/libnccl.so* 2>/dev/null | head -1)
  if [ -n "$NCCL_SO" ] && [ -f "$NCCL_DIR/include/nccl.h" ]; then
    CMAKE_BUNDLE_ARGS+=(-DTRESTLE_NCCL_LIB="$NCCL_SO" -DTRESTLE_NCCL_INCLUDE="$NCCL_DIR/include")
    export LD_LIBRARY_PATH=$NCCL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "NCCL from the Python wheel: $NCCL_SO"
  fi
fi
# Running as root in a VM/container: Open MPI needs to be told that is fine; shared memory
# without the cross-process copy (ptrace) mechanism that sandboxes refuse; TCP/shared memory only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp

# --- build ------------------------------------------------------------------------------------
stage "build"
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
# Warnings are CI's business (its compiler, -Werror); a newer gcc here must not stop the check,
# hence -w for C and no -Werror in CUDA sources.
if ! timeout 240 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-w \
       -DTRESTLE_CUDA_WERROR=OFF -DTRESTLE_CUDA_ARCHITECTURES=90 "${CMAKE_BUNDLE_ARGS[@]}" \
       >"$LOG/cmake.log" 2>&1; then
  tail -30 "$LOG/cmake.log"; echo "FAILED: cmake"; exit 1
fi
grep -q "TRESTLE_NCCL_LIB:FILEPATH=.*nccl" "$BUILD/CMakeCache.txt" && echo "NCCL: found" ||
  echo "NCCL: not found (host-staged MPI path only)"
# Only what the checks run: the CUDA tests and run_recipe (the rest is the CPU suite's business).
if ! timeout 300 cmake --build "$BUILD" -j"$NPROC" --target test_cuda_ops test_cuda_host \
       comm_gpu_check bench_cuda_ops test_model_device run_recipe >"$LOG/build.log" 2>&1; then
  grep -E "error|Error" "$LOG/build.log" | head -30; echo "FAILED: build"; exit 1
fi
echo "built in $(elapsed)s"

# --- GPU tests: each CUDA op vs the CPU op, arenas, comm on one GPU ---------------------------
stage "CUDA ops vs CPU ops (relative L2 error, fresh random inputs)"
timeout 300 "$BUILD/test_cuda_ops" 2>&1 | tee "$LOG/ops.log"
OPS_RC=${PIPESTATUS[0]}
case $OPS_RC in
  0) note "ops vs CPU: PASS" ;;
  77) note "SKIPPED: ops vs CPU: no GPU visible" ;;
  *) note "ops vs CPU: FAIL (rc $OPS_RC)" ;;
esac
stage "ctest -L gpu (comm: host-staged MPI on one GPU, NCCL)"
(cd "$BUILD" && timeout 300 ctest -L "gpu|cuda" --output-on-failure 2>&1 | tee "$LOG/ctest_gpu.log" | tail -25)
SKIPS=$(grep -c '(Skipped)' "$LOG/ctest_gpu.log")
note "ctest gpu: $(grep -E 'tests passed|tests failed' "$LOG/ctest_gpu.log" | tail -1), $SKIPS skipped"

if [ "$QUICK" = 0 ]; then
  stage "CUDA op timings at llama32_1b shapes"
  timeout 120 "$BUILD/bench_cuda_ops" "${PEAK_TFLOPS:-989}" 2>&1 | tee "$LOG/op_timings.log"
fi

# --- parts that need the training runtime's CUDA path -----------------------------------------
# TRESTLE_DEVICE=cuda runs the model on the GPU (runtime/device.h; runtime/device_cuda.c calls
# tr_ops_cuda()). The gate below stays for trees without that path.
RUNTIME_CUDA=0
grep -lq "tr_ops_cuda" runtime/*.c 2>/dev/null && RUNTIME_CUDA=1
RR=$BUILD/run_recipe
# The training log's per-iteration "lm loss: X" values, one per line.
losses() { grep -o 'lm loss: *[0-9.eE+-]*' "$1" | awk '{print $3}'; }
# compare A B LIMIT: side by side, the largest relative difference, PASS/FAIL against LIMIT (fp32
# on both sides; only summation orders differ, which grows slowly over 20 steps).
compare() {
  paste <(losses "$1") <(losses "$2") |
    awk -v lim="$3" -v a="$4" -v b="$5" '
      {d = ($1 - $2) / ($1 < 0 ? -$1 : $1); if (d < 0) d = -d; if (d > m) m = d; n++
       printf "iter %2d  %s %s  %s %s\n", NR, a, $1, b, $2}
      END {if (n < 20) {printf "FAIL: only %d iterations to compare\n", n; exit 1}
           printf "max relative difference %.3g (limit %g): %s\n", m, lim, m <= lim ? "PASS" : "FAIL"
           exit m <= lim ? 0 : 1}'
}
TINY=(--recipe llama32_1b_pretrain model.num_layers=2 model.hidden_size=256
      model.ffn_hidden_size=704 model.num_attention_heads=8 model.num_query_groups=4
      -sl 256 -mb 2 -gb 4 -ms 20 train.eval_iters=0 logger.log_interval=1)

stage "tiny model, 20 iterations: loss curve CUDA vs CPU"
if [ "$RUNTIME_CUDA" = 1 ]; then
  TRESTLE_DEVICE=cpu timeout 120 "$RR" "${TINY[@]}" >"$LOG/tiny_cpu.log" 2>&1
  TRESTLE_DEVICE=cuda timeout 120 "$RR" "${TINY[@]}" >"$LOG/tiny_cuda.log" 2>&1 ||
    tail -15 "$LOG/tiny_cuda.log"
  grep "device memory" "$LOG/tiny_cuda.log"
  if compare "$LOG/tiny_cpu.log" "$LOG/tiny_cuda.log" 1e-3 cpu cuda; then
    note "tiny model CUDA vs CPU, 20 iterations: PASS"
  else
    note "FAILED: tiny model CUDA vs CPU (see tiny_cpu.log, tiny_cuda.log)"
  fi
else
  note "SKIPPED: tiny-model loss curve CUDA vs CPU: the training runtime has no CUDA path yet (no runtime/*.c calls tr_ops_cuda)"
fi

stage "TP=2 on one GPU through the host-staged MPI path vs TP=1"
if [ "$RUNTIME_CUDA" = 1 ]; then
  TRESTLE_DEVICE=cuda timeout 150 mpirun --oversubscribe -np 2 -x TRESTLE_DEVICE "$RR" \
    "${TINY[@]}" -tp 2 dist.distributed_backend=mpi >"$LOG/tp2.log" 2>&1 || tail -15 "$LOG/tp2.log"
  if compare "$LOG/tiny_cuda.log" "$LOG/tp2.log" 1e-3 tp1 tp2; then
    note "TP=2 on one GPU (staged MPI) vs TP=1: PASS"
  else
    note "FAILED: TP=2 vs TP=1 on one GPU (see tp2.log)"
  fi
else
  note "SKIPPED: TP=2 vs TP=1 on one GPU: needs the runtime's CUDA path (the comm side, gpu_comm_staged_*, ran above)"
fi

[ "$QUICK" = 1 ] && { printf '\n=== summary (t=%ss)\n' "$(elapsed)"; printf '%s\n' "${SUMMARY[@]}"; exit 0; }

# --- benchmark: llama32_1b_pretrain, bf16, seq 4096, MBS 1, GBS 8, 20 timed iterations --------
stage "benchmark: Trestle llama32_1b_pretrain (bf16, seq 4096, mbs 1, gbs 8, 20 iters)"
TRESTLE_TPS=""
if [ "$RUNTIME_CUDA" = 1 ]; then
  TRESTLE_DEVICE=cuda timeout 240 "$RR" --recipe llama32_1b_pretrain -sl 4096 -mb 1 -gb 8 \
    -ms 23 mixed_precision=bf16_mixed logger.log_interval=1 >"$LOG/bench_trestle.log" 2>&1
  # Throughput of the last 20 iterations (3 warm-up), as the training log reports it.
  TRESTLE_TPS=$(grep -o 'tokens/s: *[0-9.]*' "$LOG/bench_trestle.log" | tail -20 |
                awk '{s+=$2; n++} END {if (n) printf "%.0f", s/n}')
  # TFLOP/s per device as the log counts it (3x forward matmuls + causal attention), MFU against
  # the dense bf16 peak, and the arenas' peaks (logged at the end of training).
  TRESTLE_TF=$(grep -o 'throughput per device (TFLOP/s): *[0-9.]*' "$LOG/bench_trestle.log" |
               tail -20 | awk '{s+=$NF; n++} END {if (n) printf "%.1f", s/n}')
  TRESTLE_MFU=$(awk -v t="${TRESTLE_TF:-0}" -v p="${PEAK_TFLOPS:-989}" 'BEGIN {printf "%.1f", 100 * t / p}')
  grep "device memory" "$LOG/bench_trestle.log" || tail -10 "$LOG/bench_trestle.log"
  note "Trestle: ${TRESTLE_TPS:-?} tokens/s, ${TRESTLE_TF:-?} TFLOP/s, MFU ${TRESTLE_MFU}%, $(grep -o 'device memory peak total.*' "$LOG/bench_trestle.log" || echo 'no peak logged')"
else
  note "SKIPPED: Trestle llama32_1b benchmark: the training runtime has no CUDA path yet"
fi

stage "benchmark: PyTorch (HF LlamaForCausalLM, bf16 autocast, SDPA, torch.compile if it works)"
cat >"$LOG/bench_torch.py" <<'EOF'
# The same step as llama32_1b_pretrain: Llama 3.2 1B shapes, seq 4096, 8 micro-batches of 1
# (global batch 8), fp32 master weights with bf16 autocast (Megatron's bf16 mixed precision),
# fused AdamW, grad-norm clip 1.0. 20 timed iterations after warm-up; prints one RESULT line.
import os, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SEQ, MBS, GBS, ITERS, WARM = 4096, 1, 8, 20, 3
cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                  num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                  max_position_embeddings=SEQ, rope_theta=500000.0, tie_word_embeddings=True)
torch.manual_seed(0)
dev = "cuda"
try:
    model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
except (AttributeError, TypeError, ValueError):
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
model = model.to(dev)
print("attention:", getattr(model.config, "_attn_implementation", "?"), file=sys.stderr)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                        fused=True)
n_params = sum(p.numel() for p in model.parameters())
fwd = model
if os.environ.get("TORCH_COMPILE", "1") == "1":
    try:
        fwd = torch.compile(model)
    except Exception as e:  # noqa: BLE001
        print("torch.compile unavailable:", e, file=sys.stderr)
data = torch.randint(0, cfg.vocab_size, (GBS, SEQ), device=dev)

def step():
    opt.zero_grad(set_to_none=True)
    for i in range(GBS // MBS):
        x = data[i * MBS:(i + 1) * MBS]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fwd(input_ids=x, labels=x)  # the model shifts the labels itself
        (out.loss / (GBS // MBS)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return out.loss

compiled = fwd is not model
try:
    for _ in range(WARM):
        step()
except Exception as e:  # noqa: BLE001
    if not compiled:
        raise
    print("torch.compile failed, eager instead:", str(e)[:200], file=sys.stderr)
    fwd, compiled = model, False
    for _ in range(WARM):
        step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(ITERS):
    loss = step()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / ITERS
tokens = GBS * SEQ
# Model FLOPs per token: 6 per parameter (forward + backward) plus causal attention scores and
# values (6 * layers * seq * hidden, half of the full 12 for the causal mask).
L, H = cfg.num_hidden_layers, cfg.hidden_size
flops = tokens * (6 * n_params + 6 * L * SEQ * H)
peak = float(os.environ.get("PEAK_TFLOPS", "989"))  # H100/H200 SXM dense bf16
tf = flops / dt / 1e12
print(f"RESULT tokens_per_s={tokens / dt:.0f} tflops={tf:.1f} mfu={100 * tf / peak:.1f} "
      f"peak_mem_gib={torch.cuda.max_memory_allocated() / 2**30:.1f} step_s={dt:.3f} "
      f"compiled={int(compiled)} loss={loss.item():.3f} params={n_params / 1e9:.2f}B")
EOF
TORCH_TPS=""
if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
  timeout 300 python3 "$LOG/bench_torch.py" 2>"$LOG/bench_torch.err" | tee "$LOG/bench_torch.out"
  TORCH_TPS=$(grep -o 'tokens_per_s=[0-9]*' "$LOG/bench_torch.out" | cut -d= -f2)
  [ -n "$TORCH_TPS" ] || tail -5 "$LOG/bench_torch.err"
  note "PyTorch: $(grep RESULT "$LOG/bench_torch.out" || echo 'no result (see bench_torch.err)')"
else
  note "SKIPPED: PyTorch benchmark: torch with CUDA or transformers is not importable here"
fi
if [ -n "$TRESTLE_TPS" ] && [ -n "$TORCH_TPS" ]; then
  note "ratio Trestle / PyTorch tokens/s: $(awk -v a="$TRESTLE_TPS" -v b="$TORCH_TPS" 'BEGIN {printf "%.2f", a / b}')"
else
  note "SKIPPED: Trestle / PyTorch ratio: needs both benchmarks"
fi

printf '\n=== summary (t=%ss)\n' "$(elapsed)"
printf '%s\n' "${SUMMARY[@]}"
