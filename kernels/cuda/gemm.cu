/* GEMMs through cuBLASLt and the bias helpers.
 *
 * cuBLASLt is column-major. A row-major C[m,n] is the column-major C^T[n,m], and
 * C^T = op(B)^T op(A)^T, so every row-major product here is the column-major product with the
 * operands swapped (B first), m and n swapped, and each operand keeping its own transpose flag
 * and leading dimension. */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/cuda_mixed.h"

typedef struct lt_gemm {
    cublasOperation_t opa, opb; /* column-major view: A' = B, B' = A */
    int m, n, k;                /* column-major sizes: m' = n, n' = m */
    const void *a, *b;
    int lda, ldb;
    cudaDataType_t ab_type;
    void *c;
    int ldc;
    cudaDataType_t c_type;
    cublasComputeType_t compute;
    float alpha, beta;
    const float *bias; /* per row of the column-major D, i.e. per column of the row-major C */
} lt_gemm;

/* cuBLASLt's heuristics assume 256-byte aligned pointers unless told otherwise; operands that
 * are views into flat buffers (a parameter inside the params arena, a column block) are not. */
static uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

static cublasStatus_t set_alignments(cublasLtMatmulPreference_t pref, const lt_gemm *g) {
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const void *ptr[4] = {g->a, g->b, g->c, g->c};
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++) {
        uint32_t a = alignment_of(ptr[i]);
        s = cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &a, sizeof a);
    }
    return s;
}

/* The raw cuBLASLt status, nothing logged: the caller decides whether "not supported" has a
 * fallback. */
static cublasStatus_t lt_try(tr_cuda_ctx *ctx, const lt_gemm *g) {
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = cublasLtMatmulDescCreate(&desc, g->compute, CUDA_R_32F);
    int ra = g->opa == CUBLAS_OP_N ? g->m : g->k, ca = g->opa == CUBLAS_OP_N ? g->k : g->m;
    int rb = g->opb == CUBLAS_OP_N ? g->k : g->n, cb = g->opb == CUBLAS_OP_N ? g->n : g->k;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->opa,
                                           sizeof g->opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->opb,
                                           sizeof g->opb);
    if (s == CUBLAS_STATUS_SUCCESS && g->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                               sizeof g->bias);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt);
    }
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&la, g->ab_type, ra, ca, g->lda);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&lb, g->ab_type, rb, cb, g->ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&lc, g->c_type, g->m, g->n, g->ldc);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ctx->lt_workspace_size,
                                                 sizeof ctx->lt_workspace_size);
    if (s == CUBLAS_STATUS_SUCCESS) s = set_alignments(pref, g);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, lc, lc, pref, 1, &heur, &found);
    if (s == CUBLAS_STATUS_SUCCESS && found == 0) s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(ctx->lt, desc, &g->alpha, g->a, la, g->b, lb, &g->beta, g->c, lc, g->c,
                           lc, &heur.algo, ctx->lt_workspace, ctx->lt_workspace_size, ctx->stream);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return s;
}

static tr_status lt_matmul(tr_cuda_ctx *ctx, const lt_gemm *g) {
    cublasStatus_t s = lt_try(ctx, g);
    return s == CUBLAS_STATUS_SUCCESS
               ? TR_OK
               : tr_cublas_status_of(s, "cublasLtMatmul", __FILE__, __LINE__);
}

/* Bias added after the product when cuBLASLt offers no fused epilogue for these types. */
template <typename T>
__global__ void bias_rows_kernel(T *c, const float *bias, int m, int n, int ldc) {
    int64_t total = (int64_t)m * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n, j = i % n;
        T *p = c + r * ldc + j;
        *p = (T)((float)*p + bias[j]);
    }
}

/* k == 0: BLAS semantics, beta == 0 overwrites C (NaN included) instead of scaling it. */
template <typename T> __global__ void scale_c_kernel(T *c, int m, int n, int ldc, float beta) {
    int64_t total = (int64_t)m * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n, j = i % n;
        T *p = c + r * ldc + j;
        *p = beta == 0.0f ? (T)0.0f : (T)(beta * (float)*p);
    }
}

static tr_status check_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, int lda, int ldb,
                            int ldc) {
    if (m < 0 || n < 0 || k < 0) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    if (lda < (ta == TR_TRANS ? m : k) || ldb < (tb == TR_TRANS ? k : n) || ldc < n)
        return TR_ERR_INVALID;
    /* cuBLASLt rejects a leading dimension of 0 even for an empty operand. */
    if (lda < 1 || ldb < 1) return TR_ERR_INVALID;
    return TR_OK;
}

static cublasOperation_t op_of(tr_transpose t) {
    return t == TR_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* An fp32 C from A and B of type ab (fp32, or fp16 for the loss-scaled path), fp32
 * accumulation. */
static tr_status gemm_f32_out(const char *what, cudaDataType_t ab, tr_transpose ta, tr_transpose tb,
                              int m, int n, int k, float alpha, const void *a, int lda,
                              const void *b, int ldb, float beta, float *c, int ldc) {
    TR_TRY(check_gemm(ta, tb, m, n, k, lda, ldb, ldc));
    if (m == 0 || n == 0) return TR_OK;
    if (!c || (k > 0 && (!a || !b))) return TR_ERR_INVALID;
    TR_CUDA_CTX(what);
    if (k == 0) {
        scale_c_kernel<float>
            <<<tr_cuda_blocks((int64_t)m * n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
                c, m, n, ldc, beta);
        TR_CUDA_LAUNCHED();
        return TR_OK;
    }
    /* CUBLAS_COMPUTE_32F keeps full fp32 products (no TF32), the CPU table's precision; the
     * fast path for training is tr_cuda_gemm_bf16. */
    lt_gemm g = {op_of(tb),  op_of(ta),          n,     m,    k,   b, a, ldb, lda, ab, c, ldc,
                 CUDA_R_32F, CUBLAS_COMPUTE_32F, alpha, beta, NULL};
    return lt_matmul(ctx, &g);
}

tr_status tr_cuda_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc) {
    return gemm_f32_out("gemm", CUDA_R_32F, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

extern "C" tr_status tr_cuda_gemm_bf16(tr_transpose ta, tr_transpose tb, int m, int n, int k,
                                       float alpha, const uint16_t *a, int lda, const uint16_t *b,
                                       int ldb, float beta, void *c, tr_cuda_dtype c_type, int ldc,
                                       const float *bias) {
    TR_TRY(check_gemm(ta, tb, m, n, k, lda, ldb, ldc));
    if (c_type != TR_CUDA_F32 && c_type != TR_CUDA_BF16) return TR_ERR_INVALID;
    if (bias && beta != 0.0f) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    if (!c || (k > 0 && (!a || !b))) return TR_ERR_INVALID;
    TR_CUDA_CTX("gemm_bf16");
    if (k == 0 && !bias) {
        unsigned blocks = tr_cuda_blocks((int64_t)m * n, TR_CUDA_THREADS);
        if (c_type == TR_CUDA_F32)
            scale_c_kernel<float>
                <<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>((float *)c, m, n, ldc, beta);
        else
            scale_c_kernel<__nv_bfloat16>
                <<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>((__nv_bfloat16 *)c, m, n, ldc, beta);
        TR_CUDA_LAUNCHED();
        return TR_OK;
    }
    if (k == 0) return TR_ERR_INVALID; /* bias epilogue over an empty product: say so */
    lt_gemm g = {op_of(tb),
                 op_of(ta),
                 n,
                 m,
                 k,
                 b,
                 a,
                 ldb,
                 lda,
                 CUDA_R_16BF,
                 c,
                 ldc,
                 c_type == TR_CUDA_F32 ? CUDA_R_32F : CUDA_R_16BF,
                 CUBLAS_COMPUTE_32F,
                 alpha,
                 beta,
                 bias};
    cublasStatus_t s = lt_try(ctx, &g);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED && bias) {
        g.bias = NULL;
        TR_TRY(lt_matmul(ctx, &g));
        unsigned blocks = tr_cuda_blocks((int64_t)m * n, TR_CUDA_THREADS);
        if (c_type == TR_CUDA_F32)
            bias_rows_kernel<float>
                <<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>((float *)c, bias, m, n, ldc);
        else
            bias_rows_kernel<__nv_bfloat16>
                <<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>((__nv_bfloat16 *)c, bias, m, n, ldc);
        TR_CUDA_LAUNCHED();
        return TR_OK;
    }
    return s == CUBLAS_STATUS_SUCCESS
               ? TR_OK
               : tr_cublas_status_of(s, "cublasLtMatmul", __FILE__, __LINE__);
}

/* The fp16 twin of tr_cuda_gemm_bf16 for the loss-scaled path: fp16 A and B, fp32 accumulation
 * and an fp32 C (fp16 outputs would overflow where fp32 keeps the scaled values). */
extern "C" tr_status tr_cuda_gemm_f16(tr_transpose ta, tr_transpose tb, int m, int n, int k,
                                      float alpha, const uint16_t *a, int lda, const uint16_t *b,
                                      int ldb, float beta, float *c, int ldc) {
    return gemm_f32_out("gemm_f16", CUDA_R_16F, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                        ldc);
}

__global__ void bias_add_kernel(float *y, const float *bias, int rows, int cols) {
    int64_t total = (int64_t)rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

tr_status tr_cuda_bias_add(float *y, const float *bias, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!y || !bias))) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    TR_CUDA_CTX("bias_add");
    bias_add_kernel<<<tr_cuda_blocks((int64_t)rows * cols, TR_CUDA_THREADS), TR_CUDA_THREADS, 0,
                      ctx->stream>>>(y, bias, rows, cols);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!dbias || !dy))) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    TR_CUDA_CTX("bias_grad");
    return tr_cuda_colsum(ctx, dbias, NULL, dy, NULL, NULL, NULL, rows, cols);
}
