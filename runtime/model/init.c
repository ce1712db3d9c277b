/* Megatron's initialisation, drawn per logical element so that every TP shard and pipeline stage
 * holds exactly the values of the unsharded model. */
#include <math.h>
#include <stdlib.h>

#include "kernels/common/philox.h"
#include "runtime/device/device.h"
#include "runtime/model/adapters/dora.h"
#include "runtime/model/internal.h"
#include "runtime/model/linear.h"

/* The stream of a tensor is keyed by its name, so adding or reordering other tensors never
 * changes its values. */
static uint64_t name_key(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return h;
}

/* Box-Muller on two Philox uniforms per logical element, so a shard can initialise its slice of
 * a tensor to exactly the values the unsharded model has. */
static float normal_at(uint64_t seed, uint64_t tensor, uint64_t e) {
    uint64_t key = seed * 0x9E3779B97F4A7C15ull + tensor;
    float u1 = tr_philox_uniform(key, 2 * e), u2 = tr_philox_uniform(key, 2 * e + 1);
    double r = sqrt(-2.0 * log(1.0 - (double)u1));
    return (float)(r * cos(2.0 * 3.14159265358979323846 * (double)u2));
}

/* Position along a split dimension of local size n in the logical dimension: a plain slice, or
 * for SwiGLU's [gate; up] the rank's slice of each half. */
static int64_t logical_coord(int64_t x, int64_t n, tr_tp_shard tp, bool swiglu) {
    if (!swiglu) return (int64_t)tp.rank * n + x;
    int64_t half = n / 2;
    return x < half ? (int64_t)tp.rank * half + x
                    : half * tp.size + (int64_t)tp.rank * half + x - half;
}

/* TP larger than the query groups: the rank's query rows sit among its group's, after those of
 * the group's lower ranks; its key and value rows are the group's own. */
static int64_t kv_coord(int64_t x, const tr_param_info *p, tr_tp_shard tp) {
    int64_t group = tp.rank / p->kv_rep, sub = tp.rank % p->kv_rep;
    int64_t per_group = (int64_t)p->kv_rep * p->kv_q + p->kv_len;
    if (x < p->kv_q) return group * per_group + sub * p->kv_q + x;
    return group * per_group + (int64_t)p->kv_rep * p->kv_q + (x - p->kv_q);
}

tr_tp_shard tr_model_param_shard(const tr_model *m, const tr_param_info *p) {
    if (p->expert && m->spec.moe.etp_size > 1)
        return (tr_tp_shard){m->spec.moe.etp_rank, m->spec.moe.etp_size};
    return m->tp;
}

int64_t tr_model_logical_index(const tr_model *m, const tr_param_info *p, int64_t e) {
    int64_t r = e / p->cols, c = e % p->cols;
    tr_tp_shard sh = tr_model_param_shard(m, p);
    if (p->kv_rep > 1 && p->split_dim == 0)
        r = kv_coord(r, p, m->tp);
    else if (p->split_dim == 0)
        r = logical_coord(r, p->rows, sh, p->swiglu_split);
    if (p->kv_rep > 1 && p->split_dim == 1)
        c = kv_coord(c, p, m->tp);
    else if (p->split_dim == 1)
        c = logical_coord(c, p->cols, sh, p->swiglu_split);
    return r * p->full_cols + c;
}

int64_t tr_model_logical_run(const tr_param_info *p, int64_t e) {
    bool whole_rows = p->split_dim != 1 || (p->kv_rep <= 1 && !p->swiglu_split);
    return whole_rows ? p->cols - e % p->cols : 1;
}

tr_status tr_model_init_weights(tr_model *m, uint64_t seed) {
    const tr_model_spec *s = &m->spec;
    double scaled = s->init_std / sqrt(2.0 * s->num_layers);
    bool direct = tr_device_host_visible(m->dev);
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        /* On a device each tensor is drawn on the host and copied over. */
        float *w =
            direct ? m->params + p->offset : malloc((size_t)(p->numel ? p->numel : 1) * sizeof *w);
        if (!w) return TR_ERR_NOMEM;
        uint64_t key = name_key(p->name);
        double std = p->init == TR_INIT_SCALED_NORMAL ? scaled
                     : p->init == TR_INIT_EMBEDDING   ? s->embed_init_std
                     : p->init == TR_INIT_XAVIER      ? sqrt(2.0 / (p->full_rows + p->full_cols))
                     : p->init == TR_INIT_NORMAL02    ? 0.2
                                                      : s->init_std;
        /* kaiming_uniform_(a = sqrt(5)) on [out, in]: bound sqrt(6 / ((1 + 5) fan_in)). */
        double bound = 1.0 / sqrt((double)p->full_cols);
        for (int64_t e = 0; e < p->numel; e++) {
            uint64_t at = (uint64_t)tr_model_logical_index(m, p, e);
            if (p->init == TR_INIT_ZERO)
                w[e] = 0.0f;
            else if (p->init == TR_INIT_ONE)
                w[e] = 1.0f;
            else if (p->init == TR_INIT_KAIMING)
                w[e] = (float)(bound *
                               (2.0 * tr_philox_uniform(seed * 0x9E3779B97F4A7C15ull + key, at) -
                                1.0));
            else
                w[e] = (float)std * normal_at(seed, key, at);
        }
        if (direct) continue;
        tr_status st =
            tr_device_to_device(m->dev, m->params + p->offset, w, (size_t)p->numel * sizeof *w);
        free(w);
        TR_TRY(st);
    }
    tr_model_params_changed(m);
    return tr_model_init_dora_magnitudes(m);
}

tr_status tr_model_init_dora_magnitudes(tr_model *m) {
    if (!m->spec.lora_rank || !m->spec.lora_dora) return TR_OK;
    float *host = NULL;
    tr_status st = TR_OK;
    for (int i = 0; i < m->spec.num_layers && st == TR_OK; i++)
        for (int t = 0; t < TR_LORA_TARGETS && st == TR_OK; t++) {
            float *mag = m->p.layers[i].lora_m[t];
            if (!mag) continue;
            tr_linear l = tr_model_layer_linear(m, i, (tr_model_linear_id)t);
            float *h = realloc(host, (size_t)l.out * sizeof *h);
            if (!h) {
                st = TR_ERR_NOMEM;
                break;
            }
            host = h;
            /* The squared norms in the layer's scale buffer, square-rooted on the host: once
             * per run. */
            st = tr_dora_weight_sq(&l, l.dora_inv);
            if (st == TR_OK)
                st = tr_device_to_host(m->dev, host, l.dora_inv, (size_t)l.out * sizeof *host);
            for (int j = 0; st == TR_OK && j < l.out; j++) host[j] = sqrtf(host[j]);
            if (st == TR_OK)
                st = tr_device_to_device(m->dev, mag, host, (size_t)l.out * sizeof *host);
        }
    free(host);
    if (st == TR_OK) tr_model_params_changed(m);
    return st;
}
