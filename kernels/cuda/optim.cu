/* AdamW and SGD over flat fp32 ranges, one thread per element with the CPU's expressions: the
 * bias corrections are computed once on the host in double, exactly as the CPU does. */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/optim_kernels.cuh"

tr_status tr_cuda_adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                        const tr_adamw_params *p) {
    if (!p || n < 0 || p->step < 1 || (n && (!param || !grad || !m || !v))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("adamw");
    float bc1 = (float)(1.0 - pow(p->beta1, (double)p->step));
    float bc2 = (float)(1.0 - pow(p->beta2, (double)p->step));
    adamw_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        param, grad, m, v, n, p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, bc1, bc2,
        p->grad_scale != 0.0f ? p->grad_scale : 1.0f);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                      const tr_sgd_params *p) {
    if (!p || n < 0 || (n && (!param || !grad || (p->momentum != 0.0f && !momentum_buf))))
        return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("sgd");
    sgd_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        param, grad, momentum_buf, n, p->lr, p->momentum, p->weight_decay, p->nesterov);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
