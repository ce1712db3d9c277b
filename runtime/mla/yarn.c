/* MLA's sizes and tables: the tensors a layer holds, the buffers it needs, the attention head
 * size and softmax scale, and the rotary tables with YaRN's frequency blend and temperature
 * (Megatron-Core's YarnRotaryEmbedding; DeepSeek-V3's rope_scaling). */
#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/mla/mla.h"

int tr_mla_tensors(const tr_mla_spec *s, int heads, int hidden, tr_mla_tensor *out) {
    int n = 0, qd = s->qk_dim + s->rope_dim;
    if (s->q_lora_rank > 0) {
        out[n++] = (tr_mla_tensor){
            "self_attention.linear_q_down_proj.weight", s->q_lora_rank, hidden, false, false, 0};
        if (s->norms)
            out[n++] = (tr_mla_tensor){
                "self_attention.q_layernorm.weight", 1, s->q_lora_rank, false, true, 1};
        out[n++] = (tr_mla_tensor){
            "self_attention.linear_q_up_proj.weight", heads * qd, s->q_lora_rank, true, false, 2};
    } else {
        out[n++] = (tr_mla_tensor){
            "self_attention.linear_q_proj.weight", heads * qd, hidden, true, false, 2};
    }
    out[n++] = (tr_mla_tensor){"self_attention.linear_kv_down_proj.weight",
                               s->kv_lora_rank + s->rope_dim,
                               hidden,
                               false,
                               false,
                               3};
    if (s->norms)
        out[n++] = (tr_mla_tensor){
            "self_attention.kv_layernorm.weight", 1, s->kv_lora_rank, false, true, 4};
    out[n++] = (tr_mla_tensor){"self_attention.linear_kv_up_proj.weight",
                               heads * (s->qk_dim + s->v_dim),
                               s->kv_lora_rank,
                               true,
                               false,
                               5};
    return n;
}

float **tr_mla_field(tr_mla_weights *w, int field) {
    float **f[TR_MLA_MAX_TENSORS] = {&w->q_down,  &w->q_norm,  &w->q_up,
                                     &w->kv_down, &w->kv_norm, &w->kv_up};
    return field >= 0 && field < TR_MLA_MAX_TENSORS ? f[field] : NULL;
}

int tr_mla_attn_dim(const tr_mla_spec *s) {
    int qd = s->qk_dim + s->rope_dim;
    return qd > s->v_dim ? qd : s->v_dim;
}

void tr_mla_carve_acts(const tr_mla_spec *s, int heads, int64_t rows, unsigned parts,
                       tr_mla_acts *a, tr_mla_carve_fn carve, void *ctx) {
    int64_t hp = (int64_t)heads * tr_mla_attn_dim(s), qr = s->q_lora_rank, kr = s->kv_lora_rank;
    if (parts & TR_MLA_ACTS_LATENT) {
        a->qc = a->qcn = a->qc_rstd = a->kvn = a->kv_rstd = NULL;
        if (qr > 0) {
            a->qc = carve(ctx, rows * qr);
            if (s->norms) {
                a->qcn = carve(ctx, rows * qr);
                a->qc_rstd = carve(ctx, rows);
            }
        }
        a->kvc = carve(ctx, rows * (kr + s->rope_dim));
        a->kvl = carve(ctx, rows * kr);
        if (s->norms) {
            a->kvn = carve(ctx, rows * kr);
            a->kv_rstd = carve(ctx, rows);
        }
    }
    if (parts & TR_MLA_ACTS_QKV) {
        a->q = carve(ctx, rows * hp);
        a->k = carve(ctx, rows * hp);
        a->v = carve(ctx, rows * hp);
    }
    if (parts & TR_MLA_ACTS_OUT) {
        a->o = carve(ctx, rows * hp);
        a->lse = carve(ctx, rows * heads);
    }
}

void tr_mla_share_acts(tr_mla_acts *a, const tr_mla_acts *from, unsigned parts) {
    if (parts & TR_MLA_ACTS_LATENT) {
        a->qc = from->qc, a->qcn = from->qcn, a->qc_rstd = from->qc_rstd;
        a->kvc = from->kvc, a->kvl = from->kvl, a->kvn = from->kvn, a->kv_rstd = from->kv_rstd;
    }
    if (parts & TR_MLA_ACTS_QKV) a->q = from->q, a->k = from->k, a->v = from->v;
    if (parts & TR_MLA_ACTS_OUT) a->o = from->o, a->lse = from->lse;
}

void tr_mla_carve_scratch(const tr_mla_spec *s, int heads, int64_t rows, int seq,
                          tr_mla_scratch *sc, tr_mla_carve_fn carve, void *ctx) {
    int64_t hp = (int64_t)heads * tr_mla_attn_dim(s), half = s->rope_dim / 2;
    int64_t lat = s->q_lora_rank > s->kv_lora_rank ? s->q_lora_rank : s->kv_lora_rank;
    *sc = (tr_mla_scratch){0};
    sc->cos = carve(ctx, (int64_t)seq * half);
    sc->sin = carve(ctx, (int64_t)seq * half);
    sc->cos_tok = carve(ctx, rows * half);
    sc->sin_tok = carve(ctx, rows * half);
    sc->qf = carve(ctx, rows * heads * (s->qk_dim + s->rope_dim));
    sc->kvf = carve(ctx, rows * heads * (s->qk_dim + s->v_dim));
    sc->pe = carve(ctx, rows * heads * s->rope_dim);
    sc->kpe = carve(ctx, rows * s->rope_dim);
    sc->lat = carve(ctx, rows * lat);
    sc->lat2 = carve(ctx, rows * lat);
    sc->dkvc = carve(ctx, rows * (s->kv_lora_rank + s->rope_dim));
    sc->dout = carve(ctx, rows * hp);
    sc->dq = carve(ctx, rows * hp);
    sc->dk = carve(ctx, rows * hp);
    sc->dv = carve(ctx, rows * hp);
}

/* YaRN's attention temperature: 0.1 m ln(s) + 1 for a scale s > 1. */
static double yarn_mscale(double scale, double m) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

float tr_mla_softmax_scale(const tr_mla_spec *s) {
    double m = s->yarn ? yarn_mscale(s->factor, s->mscale_all_dim) : 1.0;
    return (float)(m * m / sqrt((double)(s->qk_dim + s->rope_dim)));
}

double tr_mla_rope_mscale(const tr_mla_spec *s) {
    if (!s->yarn) return 1.0;
    return yarn_mscale(s->factor, s->mscale) / yarn_mscale(s->factor, s->mscale_all_dim);
}

/* The pair index at which `rotations` full turns fit the original context. */
static double correction_dim(double rotations, double dim, double base, double max_pos) {
    return dim * log(max_pos / (rotations * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

double tr_mla_inv_freq(const tr_mla_spec *s, int i) {
    double dim = s->rope_dim;
    double extra = 1.0 / pow(s->rope_base, 2.0 * i / dim);
    if (!s->yarn) return extra;
    double inter = extra / s->factor;
    double low = floor(correction_dim(s->beta_fast, dim, s->rope_base, s->original_max_position));
    double high = ceil(correction_dim(s->beta_slow, dim, s->rope_base, s->original_max_position));
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    double ramp = (i - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    double keep = 1.0 - ramp; /* the extrapolated (unscaled) share */
    return inter * (1.0 - keep) + extra * keep;
}

tr_status tr_mla_rope_tables(const tr_mla_spec *s, int seq, tr_device *dev, tr_mla_scratch *sc) {
    int half = s->rope_dim / 2;
    size_t n = (size_t)seq * (size_t)half;
    float *c = malloc(2 * n * sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    double ms = tr_mla_rope_mscale(s);
    for (int i = 0; i < half; i++) {
        /* the frequency rounded to fp32 first, as both frameworks keep inv_freq */
        float f = (float)tr_mla_inv_freq(s, i);
        for (int t = 0; t < seq; t++) {
            float ang = (float)t * f;
            c[(size_t)t * half + i] = (float)(cos((double)ang) * ms);
            c[n + (size_t)t * half + i] = (float)(sin((double)ang) * ms);
        }
    }
    tr_status st = tr_device_to_device(dev, sc->cos, c, n * sizeof *c);
    if (st == TR_OK) st = tr_device_to_device(dev, sc->sin, c + n, n * sizeof *c);
    free(c);
    return st;
}
