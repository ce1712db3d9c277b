/* The MoE ops on the CPU: router top-k and its backward (a token at a time through
 * kernels/common/moe_route.h, the body the CUDA kernel shares), and the permutation of token
 * rows into expert rows and back (kernels/ops.h states the contracts). */
#include <string.h>

#include "kernels/common/moe_perm.h"
#include "kernels/common/moe_route.h"
#include "kernels/cpu/cpu_ops.h"

tr_status tr_cpu_moe_topk(int32_t *idx, float *prob, const float *logits, const tr_route_desc *d) {
    if (!tr_route_valid(d)) return TR_ERR_INVALID;
    if (d->tokens && (!idx || !prob || !logits)) return TR_ERR_INVALID;
    float wf[3 * TR_ROUTE_MAX_EXPERTS];
    int32_t wi[3 * TR_ROUTE_MAX_EXPERTS];
    int E = d->experts, k = d->topk;
    for (int t = 0; t < d->tokens; t++)
        tr_route_token(d, logits + (int64_t)t * E, idx + (int64_t)t * k, prob + (int64_t)t * k, wf,
                       wi);
    return TR_OK;
}

tr_status tr_cpu_moe_topk_bwd(float *dlogits, const float *dprob, const float *logits,
                              const int32_t *idx, const tr_route_desc *d) {
    if (!tr_route_valid(d)) return TR_ERR_INVALID;
    if (d->tokens && (!dlogits || !dprob || !logits || !idx)) return TR_ERR_INVALID;
    float wf[3 * TR_ROUTE_MAX_EXPERTS];
    int E = d->experts, k = d->topk;
    for (int t = 0; t < d->tokens; t++)
        tr_route_token_bwd(d, logits + (int64_t)t * E, idx + (int64_t)t * k, dprob + (int64_t)t * k,
                           dlogits + (int64_t)t * E, wf);
    return TR_OK;
}

tr_status tr_cpu_moe_permute(float *xp, const float *x, const int32_t *row_a, int rows, int tokens,
                             int topk, int dim) {
    if (!tr_moe_permute_check(xp, x, row_a, rows, tokens, topk, dim)) return TR_ERR_INVALID;
    if (!rows || !dim) return TR_OK;
    int64_t n_a = (int64_t)tokens * topk;
    for (int r = 0; r < rows; r++) {
        float *dst = xp + (int64_t)r * dim;
        int64_t a = tr_moe_assign_of(row_a, r, n_a);
        if (a < 0)
            memset(dst, 0, (size_t)dim * sizeof(float));
        else
            memcpy(dst, x + a / topk * dim, (size_t)dim * sizeof(float));
    }
    return TR_OK;
}

tr_status tr_cpu_moe_permute_bwd(float *dx, const float *dxp, const int32_t *pos, int rows,
                                 int tokens, int topk, int dim) {
    if (!tr_moe_gather_check(dx, dxp, NULL, pos, rows, tokens, topk, dim, 0)) return TR_ERR_INVALID;
    if (!tokens || !dim) return TR_OK;
    for (int t = 0; t < tokens; t++) {
        float *d = dx + (int64_t)t * dim;
        memset(d, 0, (size_t)dim * sizeof(float));
        for (int j = 0; j < topk; j++) {
            int r = tr_moe_row_of(pos, (int64_t)t * topk + j, rows);
            if (r < 0) continue;
            const float *g = dxp + (int64_t)r * dim;
            for (int c = 0; c < dim; c++) d[c] += g[c];
        }
    }
    return TR_OK;
}

tr_status tr_cpu_moe_unpermute(float *y, const float *ye, const float *prob, const int32_t *pos,
                               int rows, int tokens, int topk, int dim) {
    if (!tr_moe_gather_check(y, ye, prob, pos, rows, tokens, topk, dim, 1)) return TR_ERR_INVALID;
    if (!tokens || !dim) return TR_OK;
    for (int t = 0; t < tokens; t++) {
        float *yt = y + (int64_t)t * dim;
        memset(yt, 0, (size_t)dim * sizeof(float));
        for (int j = 0; j < topk; j++) {
            int64_t a = (int64_t)t * topk + j;
            int r = tr_moe_row_of(pos, a, rows);
            if (r < 0) continue;
            float p = prob[a];
            const float *e = ye + (int64_t)r * dim;
            for (int c = 0; c < dim; c++) yt[c] += p * e[c];
        }
    }
    return TR_OK;
}

tr_status tr_cpu_moe_unpermute_bwd(float *dye, float *dprob, const float *dy, const float *ye,
                                   const float *prob, const int32_t *row_a, const int32_t *pos,
                                   int rows, int tokens, int topk, int dim) {
    if (!tr_moe_unpermute_bwd_check(dye, dprob, dy, ye, prob, row_a, pos, rows, tokens, topk, dim))
        return TR_ERR_INVALID;
    int64_t n_a = (int64_t)tokens * topk;
    for (int r = 0; r < rows && dim; r++) {
        float *d = dye + (int64_t)r * dim;
        int64_t a = tr_moe_assign_of(row_a, r, n_a);
        if (a < 0) {
            memset(d, 0, (size_t)dim * sizeof(float));
            continue;
        }
        const float *g = dy + a / topk * dim;
        for (int c = 0; c < dim; c++) d[c] = prob[a] * g[c];
    }
    for (int64_t a = 0; a < n_a; a++) {
        int r = tr_moe_row_of(pos, a, rows);
        double dot = 0.0;
        if (r >= 0) {
            const float *g = dy + a / topk * dim, *e = ye + (int64_t)r * dim;
            for (int c = 0; c < dim; c++) dot += (double)g[c] * e[c];
        }
        dprob[a] = (float)dot;
    }
    return TR_OK;
}
