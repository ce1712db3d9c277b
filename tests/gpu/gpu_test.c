#include "tests/gpu/gpu_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cuda_ops.h"

static uint64_t g_rng;

void gt_seed(void) {
    const char *env = getenv("TR_TEST_SEED");
    g_rng = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u;
    printf("random seed %llu (TR_TEST_SEED=... reproduces)\n", (unsigned long long)g_rng);
}

float gt_uniform(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull; /* PCG-style LCG step */
    uint32_t bits = (uint32_t)(g_rng >> 40);
    return lo + (hi - lo) * (float)bits / 16777216.0f;
}

void gt_fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = gt_uniform(lo, hi);
}

static void must(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA %s failed: %s\n", what, cudaGetErrorString(e));
        exit(1); /* a test binary: nothing to unwind */
    }
}

/* The ops run on the context's non-blocking stream, which does not wait for the legacy stream
 * that cudaMemcpy / cudaMemset use (a pageable upload may still be in flight when cudaMemcpy
 * returns; a memset is asynchronous), so every setup step ends with a device-wide wait. */
void gt_settle(void) {
    must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void *gt_dev_bytes(const void *h, size_t bytes) {
    void *d = NULL;
    must(cudaMalloc(&d, bytes ? bytes : 4), "cudaMalloc");
    if (h && bytes) must(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "upload");
    gt_settle();
    return d;
}

float *gt_dev(const float *h, size_t n) {
    return gt_dev_bytes(h, n * sizeof(float));
}

float *gt_dev_poison(size_t n) {
    float *d = gt_dev_bytes(NULL, n * sizeof(float));
    must(cudaMemset(d, 0xff, n * sizeof(float)), "poison"); /* 0xffffffff is a NaN */
    gt_settle();
    return d;
}

void gt_sync(void) {
    must(tr_cuda_sync() == TR_OK ? cudaSuccess : cudaErrorUnknown, "sync");
}

float *gt_host(const float *d, size_t n) {
    gt_sync();
    float *h = malloc(n * sizeof(float) + 1);
    if (!h) exit(1);
    must(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return h;
}

void gt_free(void *d) {
    cudaFree(d);
}

double gt_rel_err(const float *got, const float *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int tr_gpu_test_main(int argc, char **argv, const tr_test_case *tests, int n) {
    if (tr_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device visible\n");
        return TR_TEST_SKIPPED;
    }
    if (tr_cuda_select_device(0, NULL) != TR_OK) return 1;
    tr_cuda_ctx *ctx = NULL;
    if (tr_cuda_ctx_create(NULL, &ctx) != TR_OK) return 1;
    tr_cuda_bind(ctx);
    gt_seed();
    int rc = tr_test_main(argc, argv, tests, n);
    tr_cuda_ctx_destroy(ctx);
    return rc;
}
