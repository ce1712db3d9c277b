/* See runtime/generate/generate.h. One sequence, host memory: the linear layers through the
 * backend's GEMM, the attention of the new queries over the cache written here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/generate/generate.h"

static float *zalloc(int64_t n) {
    return calloc((size_t)(n > 0 ? n : 1), sizeof(float));
}

void tr_gen_free(tr_gen *g) {
    float *bufs[] = {g->k,   g->v,   g->cos_t, g->sin_t, g->x,    g->h,      g->qkv,   g->q,
                     g->att, g->mlp, g->act,   g->mean,  g->rstd, g->scores, g->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(g, 0, sizeof *g);
}

tr_status tr_gen_init(tr_gen *g, const tr_model *m, int max_len) {
    memset(g, 0, sizeof *g);
    const tr_model_spec *s = &m->full;
    if (m->tp.size != 1 || m->n_parts != 1 || m->parts[0].num_layers != s->num_layers ||
        s->lora_rank || !tr_device_host_visible(m->dev) || max_len < 1 ||
        (s->learned_pos && max_len > s->seq))
        return TR_ERR_INVALID;
    g->m = m;
    g->max_len = max_len;
    g->chunk = max_len;
    int64_t C = s->hidden, D = s->head_dim, q = (int64_t)s->heads * D, kv = (int64_t)s->groups * D,
            qkv = q + 2 * kv, F = s->ffn, T = max_len;
    int64_t wide = qkv > 2 * F ? qkv : 2 * F;
    int vocab = s->vocab_real ? s->vocab_real : s->vocab;
    g->k = zalloc(s->num_layers * T * kv);
    g->v = zalloc(s->num_layers * T * kv);
    g->cos_t = zalloc(T * D);
    g->sin_t = zalloc(T * D);
    g->x = zalloc(T * C);
    g->h = zalloc(T * C);
    g->qkv = zalloc(T * wide);
    g->q = zalloc(T * q);
    g->att = zalloc(T * q);
    g->mlp = zalloc(T * (C > F ? C : F));
    g->act = zalloc(T * 2 * F);
    g->mean = zalloc(T * (s->heads > 1 ? s->heads : 1));
    g->rstd = zalloc(T * (s->heads > 1 ? s->heads : 1));
    g->scores = zalloc(T);
    g->logits = zalloc(s->vocab);
    if (!g->k || !g->v || !g->cos_t || !g->sin_t || !g->x || !g->h || !g->qkv || !g->q || !g->att ||
        !g->mlp || !g->act || !g->mean || !g->rstd || !g->scores || !g->logits) {
        tr_gen_free(g);
        return TR_ERR_NOMEM;
    }
    (void)vocab;
    if (s->rope) {
        tr_status st = m->ops->rope_table(g->cos_t, g->sin_t, &s->rope_p, max_len, 0);
        if (st != TR_OK) tr_gen_free(g);
        return st;
    }
    return TR_OK;
}

static tr_status norm(const tr_gen *g, float *y, const float *x, const float *w, const float *b,
                      int rows, int dim) {
    const tr_model_spec *s = &g->m->full;
    if (s->layernorm)
        return g->m->ops->layernorm_fwd(y, g->mean, g->rstd, x, w, b, rows, dim, s->eps,
                                        s->zero_centered);
    return g->m->ops->rmsnorm_fwd(y, g->rstd, x, w, rows, dim, s->eps, s->zero_centered);
}

/* y [n, out] = x [n, in] W^T (+ b) */
static tr_status linear(const tr_gen *g, float *y, const float *x, const float *w, const float *b,
                        int n, int out, int in) {
    TR_TRY(g->m->ops->gemm(TR_NOTRANS, TR_TRANS, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out));
    return b ? g->m->ops->bias_add(y, b, n, out) : TR_OK;
}

/* Causal attention of queries at positions p0..p0+n over the cached keys 0..p0+n, written into
 * g->att [n, heads * head_dim]. */
static void attend(tr_gen *g, int layer, int p0, int n) {
    const tr_model_spec *s = &g->m->full;
    int D = s->head_dim, H = s->heads, G = s->groups, hpg = H / G;
    int64_t kvw = (int64_t)G * D;
    const float *K = g->k + (int64_t)layer * g->max_len * kvw;
    const float *V = g->v + (int64_t)layer * g->max_len * kvw;
    float scale = 1.0f / sqrtf((float)D);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const float *qh = g->q + ((int64_t)t * H + h) * D;
            int grp = h / hpg, last = p0 + t;
            float mx = -INFINITY;
            for (int j = 0; j <= last; j++) {
                const float *kj = K + (int64_t)j * kvw + (int64_t)grp * D;
                float dot = 0.0f;
                for (int c = 0; c < D; c++) dot += qh[c] * kj[c];
                g->scores[j] = dot * scale;
                if (g->scores[j] > mx) mx = g->scores[j];
            }
            double sum = 0.0;
            for (int j = 0; j <= last; j++) sum += (g->scores[j] = expf(g->scores[j] - mx));
            float *o = g->att + ((int64_t)t * H + h) * D;
            memset(o, 0, (size_t)D * sizeof *o);
            for (int j = 0; j <= last; j++) {
                float pj = (float)(g->scores[j] / sum);
                const float *vj = V + (int64_t)j * kvw + (int64_t)grp * D;
                for (int c = 0; c < D; c++) o[c] += pj * vj[c];
            }
        }
}

/* One layer over the n new rows of g->x: the attention block, then the MLP, each residual. */
static tr_status layer_step(tr_gen *g, int layer, int p0, int n) {
    const tr_model *m = g->m;
    const tr_model_spec *s = &m->full;
    const tr_layer_views *p = &m->p.layers[layer];
    int C = s->hidden, D = s->head_dim, H = s->heads, G = s->groups, hpg = H / G, F = s->ffn;
    int qw = H * D, kvw = G * D, qkvw = qw + 2 * kvw;
    TR_TRY(norm(g, g->h, g->x, p->ln1_w, p->ln1_b, n, C));
    TR_TRY(linear(g, g->qkv, g->h, p->qkv_w, p->qkv_b, n, qkvw, C));
    /* Megatron's grouped rows: per group its hpg query heads, then its key, then its value. */
    float *K = g->k + ((int64_t)layer * g->max_len + p0) * kvw;
    float *V = g->v + ((int64_t)layer * g->max_len + p0) * kvw;
    for (int t = 0; t < n; t++)
        for (int grp = 0; grp < G; grp++) {
            const float *row = g->qkv + (int64_t)t * qkvw + (int64_t)grp * (hpg + 2) * D;
            memcpy(g->q + ((int64_t)t * H + (int64_t)grp * hpg) * D, row,
                   (size_t)hpg * D * sizeof(float));
            memcpy(K + (int64_t)t * kvw + (int64_t)grp * D, row + (int64_t)hpg * D,
                   (size_t)D * sizeof(float));
            memcpy(V + (int64_t)t * kvw + (int64_t)grp * D, row + (int64_t)(hpg + 1) * D,
                   (size_t)D * sizeof(float));
        }
    /* The ops write out of place: g->att is the scratch, copied back. */
    size_t qb = (size_t)n * qw * sizeof(float), kb = (size_t)n * kvw * sizeof(float);
    if (s->qk_norm) {
        TR_TRY(norm(g, g->att, g->q, p->qn_w, p->qn_b, n * H, D));
        memcpy(g->q, g->att, qb);
        TR_TRY(norm(g, g->att, K, p->kn_w, p->kn_b, n * G, D));
        memcpy(K, g->att, kb);
    }
    if (s->rope) {
        int half = s->rope_p.rot_dim / 2;
        const float *ct = g->cos_t + (int64_t)p0 * half, *st = g->sin_t + (int64_t)p0 * half;
        TR_TRY(m->ops->rope_fwd(g->att, g->q, ct, st, 1, n, H, D, s->rope_p.rot_dim));
        memcpy(g->q, g->att, qb);
        TR_TRY(m->ops->rope_fwd(g->att, K, ct, st, 1, n, G, D, s->rope_p.rot_dim));
        memcpy(K, g->att, kb);
    }
    attend(g, layer, p0, n);
    TR_TRY(linear(g, g->h, g->att, p->proj_w, p->proj_b, n, C, qw));
    TR_TRY(m->ops->add(g->x, g->h, (int64_t)n * C));
    TR_TRY(norm(g, g->h, g->x, p->ln2_w, p->ln2_b, n, C));
    if (s->swiglu) {
        TR_TRY(linear(g, g->act, g->h, p->fc1_w, p->fc1_b, n, 2 * F, C));
        TR_TRY(m->ops->swiglu_fwd(g->mlp, g->act, n, F));
    } else {
        TR_TRY(linear(g, g->act, g->h, p->fc1_w, p->fc1_b, n, F, C));
        TR_TRY(m->ops->gelu_fwd(g->mlp, g->act, (int64_t)n * F, s->gelu_tanh));
    }
    TR_TRY(linear(g, g->h, g->mlp, p->fc2_w, p->fc2_b, n, C, F));
    return m->ops->add(g->x, g->h, (int64_t)n * C);
}

tr_status tr_gen_step(tr_gen *g, const int32_t *ids, int n) {
    const tr_model *m = g->m;
    const tr_model_spec *s = &m->full;
    int C = s->hidden, vocab = s->vocab_real ? s->vocab_real : s->vocab, p0 = g->len;
    if (n < 1 || p0 + n > g->max_len) return TR_ERR_INVALID;
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= vocab) return TR_ERR_INVALID;
    TR_TRY(m->ops->embedding_fwd(g->x, ids, m->p.word_emb, n, C, 0, s->vocab));
    if (s->learned_pos) TR_TRY(m->ops->add(g->x, m->p.pos_emb + (int64_t)p0 * C, (int64_t)n * C));
    for (int l = 0; l < s->num_layers; l++) TR_TRY(layer_step(g, l, p0, n));
    g->len += n;
    const float *last = g->x + (int64_t)(n - 1) * C;
    TR_TRY(norm(g, g->h, last, m->p.final_w, m->p.final_b, 1, C));
    /* Only the real vocabulary: Trestle's padding rows are never sampled. */
    return linear(g, g->logits, g->h, m->p.out_w, NULL, 1, vocab, C);
}
