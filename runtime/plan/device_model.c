/* The device model of the planner's step time: each GPU's peak rates and bandwidths (the
 * vendors' published dense numbers) and the efficiency constants that turn them into what a
 * training step gets. The constants are estimates, named so that a measurement can replace each
 * one (docs/plan.md, "The device model").
 *
 * Peaks (dense, no sparsity): H100 SXM 989 TFLOP/s bf16, 67 fp32 (no TF32: the runtime's fp32
 * GEMMs), HBM3 3.35 TB/s, NVLink 4 450 GB/s per direction; H200 the same compute with 141 GB
 * HBM3e at 4.8 TB/s; A100 SXM 80 GB 312 bf16, 19.5 fp32, 2.04 TB/s, NVLink 3 300 GB/s; B200
 * 2250 bf16, 80 fp32 (an estimate), 180 GB HBM3e at 8 TB/s, NVLink 5 900 GB/s. Networks: one
 * 400 Gb/s NIC per GPU (50 GB/s; A100 systems 200 Gb/s). */
#include <string.h>

#include "runtime/plan/plan_internal.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Fraction of the tensor-core peak a transformer layer's large GEMMs and flash attention
 * reach in a training step (Megatron-LM reports 45-55% MFU end to end on H100 for dense
 * models; the GEMMs alone run near 70%). */
const double TR_PLAN_EFF_GEMM = 0.70;
/* Fraction of HBM bandwidth the element-wise kernels (norms, activations, RoPE, softmax
 * statistics, the optimizer) stream at. */
const double TR_PLAN_EFF_HBM = 0.80;
/* Fraction of NVLink / network bandwidth a ring collective achieves (the brief's targets:
 * NVLink > 90%, InfiniBand > 80%; taken lower, as messages of one layer are not huge). */
const double TR_PLAN_EFF_NVLINK = 0.80;
const double TR_PLAN_EFF_NET = 0.75;
/* Bytes of HBM traffic per byte of a microbatch's saved activations over forward and backward
 * (written once, read by the backward, their gradients written and read). */
const double TR_PLAN_ACT_TRAFFIC = 4.0;
/* HBM bytes the optimizer step touches per parameter it owns: fp32 parameter, gradient, m, v
 * read and written, the weight copy written. */
const double TR_PLAN_OPT_BYTES_PER_PARAM = 34.0;
/* Fractions of the communication hidden behind compute: TP with tp_comm_overlap (the brief:
 * 80%+), data-parallel buckets with overlap_grad_reduce (all but the last buckets), pipeline
 * transfers in the 1F1B steady state. Without the overlap switches nothing is hidden. */
const double TR_PLAN_TP_HIDDEN = 0.80;
const double TR_PLAN_DP_HIDDEN = 0.85;
const double TR_PLAN_PP_HIDDEN = 0.90;

static const tr_plan_gpu gpus[] = {
    /* name, memory, bf16, fp32, HBM, NVLink, net, per node, allocation, reserved */
    {"h100-80gb", 79.6 * GIB, 989.0, 67.0, 3350.0, 450.0, 50.0, 8, 256, 3.0 * GIB},
    {"h200-141gb", 139.8 * GIB, 989.0, 67.0, 4800.0, 450.0, 50.0, 8, 256, 3.0 * GIB},
    {"a100-80gb", 79.2 * GIB, 312.0, 19.5, 2039.0, 300.0, 25.0, 8, 256, 2.5 * GIB},
    {"b200", 178.0 * GIB, 2250.0, 80.0, 8000.0, 900.0, 50.0, 8, 256, 3.5 * GIB},
    /* The cpu-strict device: every buffer its own mapping of whole 4 KiB pages (the planner's
     * oracle in CI); rates of one modern server core, for scale only. */
    {"cpu", 64.0 * GIB, 0.2, 0.1, 20.0, 5.0, 1.0, 1, 4096, 0.0},
};

const tr_plan_gpu *tr_plan_gpu_find(const char *name) {
    for (size_t i = 0; name && i < sizeof gpus / sizeof gpus[0]; i++)
        if (strcmp(gpus[i].name, name) == 0) return &gpus[i];
    return NULL;
}

const char *tr_plan_gpu_names(void) {
    return "h100-80gb|h200-141gb|a100-80gb|b200|cpu";
}
