/* Shared by the three files of the test_cuda_ops executable: the op tables under test, random
 * inputs, the RoPE tables, the error limits (test_cuda_ops.c explains them), and the large-shape
 * cases of test_cuda_ops_large.c and the attention cases of test_cuda_ops_attention.c. */
#ifndef TR_CUDA_OPS_TEST_H
#define TR_CUDA_OPS_TEST_H

#include "kernels/ops.h"
#include "tests/gpu/gpu_test.h"

#define EXACTISH 1e-6
#define FP32     1e-5
#define FP32_BWD 1e-4
#define TC_BF16  2e-2
#define TC_F16   5e-3

extern const tr_ops *cpu, *gpu;

/* n fresh uniform floats in [lo, hi) on the host. */
float *rnd(size_t n, float lo, float hi);
/* The Llama 3 RoPE tables (base 500000, the given factor, rot channels, T positions from
 * offset) built by both op tables: *cs, *sn by the CPU's, *dcs, *dsn by the GPU's. */
void rope_tables(int rot, double factor, int T, int offset, float **cs, float **sn, float **dcs,
                 float **dsn);

void test_ce_vocab_128k(void);
void test_ce_past_2g(void);
void test_norms_dim_8192(void);
void test_norm_past_2g(void);
void test_flat_past_2g(void);
void test_rope_head_dim_128(void);
void test_in_place(void);

/* tests/gpu/test_cuda_ops_attention.c */
void test_attention_bf16(void);
void test_attention_tc(void);
void test_attention(void);

#endif
