/* Activation buffers: one set per (stage, slot) for the microbatches a stage holds in flight,
 * shared backward scratch, and which linear inputs are saved in half precision. */
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/model/internal.h"

bool tr_model_half_input(const tr_model *m, int id) {
    const tr_model_spec *s = &m->spec;
    if (!s->lowp || s->no_half_acts) return false;
    if (id == TR_MODEL_AT_HEAD) return true; /* the output layer never has an adapter */
    return !(s->lora_rank && (s->lora_targets & (1u << id)));
}

/* Carves activation buffers out of one allocation: sizes first (base NULL), then pointers. */
typedef struct carver {
    float *base;
    int64_t used;
} carver;

static float *carve(carver *c, int64_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + TR_PARAM_ALIGN - 1) / TR_PARAM_ALIGN * TR_PARAM_ALIGN;
    return p;
}

/* n bf16/fp16 values, in whole floats of the same allocation (aligned as every buffer). */
static uint16_t *carve_half(carver *c, int64_t n) {
    return (uint16_t *)carve(c, (n + 1) / 2);
}

/* A saved norm output feeding column-parallel linear `id`: in half precision (the gathered rows
 * under sequence parallelism; the norm writes its fp32 result into shared scratch), else fp32
 * with, under sequence parallelism, its gathered rows. */
static void carve_norm_out(const tr_model *m, carver *c, int id, float **y, float **y_full,
                           uint16_t **half) {
    int64_t n = (int64_t)m->batch * m->spec.seq * m->spec.hidden;
    bool sp = m->spec.sequence_parallel;
    *y = *y_full = NULL;
    *half = NULL;
    if (tr_model_half_input(m, id)) {
        *half = carve_half(c, n);
        return;
    }
    *y = carve(c, n);
    if (sp) *y_full = carve(c, n);
}

static int part_slots(const tr_model_part *p) {
    return p->slots > 0 ? p->slots : 1;
}

static void carve_layer(const tr_model *m, carver *c, tr_layer_acts *a) {
    const tr_model_spec *s = &m->spec;
    int64_t bt = (int64_t)m->batch * s->seq, C = s->hidden;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    a->x_in = carve(c, bt * C);
    carve_norm_out(m, c, TR_LIN_QKV, &a->ln1, &a->ln1_full, &a->ln1_h);
    a->ln1_mean = carve(c, bt);
    a->ln1_rstd = carve(c, bt);
    a->q = carve(c, bt * hd);
    a->k = carve(c, bt * gd);
    a->v = carve(c, bt * gd);
    if (s->qk_norm) { /* the norms' inputs and per-head statistics */
        bool mean = s->layernorm;
        a->q_raw = carve(c, bt * hd);
        a->k_raw = carve(c, bt * gd);
        a->qn_mean = mean ? carve(c, bt * s->heads) : NULL;
        a->qn_rstd = carve(c, bt * s->heads);
        a->kn_mean = mean ? carve(c, bt * s->groups) : NULL;
        a->kn_rstd = carve(c, bt * s->groups);
    }
    a->attn = carve(c, bt * hd);
    a->lse = carve(c, (int64_t)m->batch * s->heads * s->seq);
    a->x_mid = carve(c, bt * C);
    carve_norm_out(m, c, TR_LIN_FC1, &a->ln2, &a->ln2_full, &a->ln2_h);
    a->ln2_mean = carve(c, bt);
    a->ln2_rstd = carve(c, bt);
    a->fc1 = carve(c, bt * m->fc1_dim);
    /* The MLP activation: fc2's input only (its backward reads fc1). */
    bool half = tr_model_half_input(m, TR_LIN_FC2);
    a->act = half ? NULL : carve(c, bt * s->ffn);
    a->act_h = half ? carve_half(c, bt * s->ffn) : NULL;
}

static void carve_head(const tr_model *m, carver *c, tr_slot_acts *a) {
    const tr_model_spec *s = &m->spec;
    int64_t bt = (int64_t)m->batch * s->seq, C = s->hidden;
    a->x_final = carve(c, bt * C);
    carve_norm_out(m, c, TR_MODEL_AT_HEAD, &a->lnf, &a->lnf_full, &a->lnf_h);
    a->lnf_mean = carve(c, bt);
    a->lnf_rstd = carve(c, bt);
    a->logits = carve(c, bt * s->vocab);
    a->ce_stats = carve(c, 4 * bt); /* [3, bt] stats, then bt floats of TP scratch */
    a->losses = carve(c, bt);
    a->dloss = carve(c, bt);
}

/* Every (part, slot) gets its own layers' (and head's) activations; scratch is shared. */
static void carve_acts(tr_model *m, carver *c) {
    const tr_model_spec *s = &m->spec;
    int64_t bt = (int64_t)m->batch * s->seq, C = s->hidden;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        for (int slot = 0; slot < part_slots(p); slot++) {
            tr_slot_acts *a = &m->slot_acts[m->slot_start[k] + slot];
            for (int i = 0; i < p->num_layers; i++) carve_layer(m, c, &a->layers[i]);
            if (p->has_loss) carve_head(m, c, a);
        }
    }
    m->sp_full = s->sequence_parallel ? carve(c, bt * C) : NULL;
    m->sp_perm = s->sequence_parallel ? carve(c, bt * C) : NULL;
    int64_t big = m->fc1_dim > m->qkv_dim ? m->fc1_dim : m->qkv_dim;
    if (big < C) big = C;
    m->rope_cos = carve(c, (int64_t)s->seq * (s->head_dim / 2 + 1));
    m->rope_sin = carve(c, (int64_t)s->seq * (s->head_dim / 2 + 1));
    m->dx = carve(c, bt * C);
    m->dtmp = carve(c, bt * C);
    m->dbig = carve(c, bt * big);
    m->dact = carve(c, bt * s->ffn);
    m->dq = carve(c, bt * hd);
    m->dk = carve(c, bt * gd);
    m->dv = carve(c, bt * gd);
    m->dq_raw = s->qk_norm ? carve(c, bt * hd) : NULL;
    m->dk_raw = s->qk_norm ? carve(c, bt * gd) : NULL;
    m->loss_dev = carve(c, 1);
    m->lora_u = s->lora_rank ? carve(c, bt * s->lora_rank) : NULL;
    m->lora_du = s->lora_rank ? carve(c, bt * s->lora_rank) : NULL;
    int64_t widest = C > s->ffn ? C : s->ffn;
    if (hd > widest) widest = hd;
    /* The adapter's dropped-out input, and (sequence parallelism) a column layer's whole-sequence
     * input gradient before this rank's rows of it are taken. */
    bool lora_x = s->lora_rank && (s->lora_dropout > 0.0f || s->sequence_parallel);
    m->lora_x = lora_x ? carve(c, bt * widest) : NULL;
    int kv_rep = tr_model_kv_replicas(&m->full, m->tp);
    int64_t kv_cols = C > s->lora_rank ? C : s->lora_rank;
    m->kv_scratch = kv_rep > 1 ? carve(c, m->full.groups * 2 * s->head_dim * kv_cols) : NULL;
}

int tr_model_layer_slots(const tr_model *m, int layer) {
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        if (layer >= p->first_layer && layer < p->first_layer + p->num_layers) return part_slots(p);
    }
    return 0;
}

static tr_status alloc_slots(tr_model *m) {
    int n_slots = 0;
    m->slot_start = calloc((size_t)m->n_parts, sizeof *m->slot_start);
    if (!m->slot_start) return TR_ERR_NOMEM;
    for (int k = 0; k < m->n_parts; k++) {
        m->slot_start[k] = n_slots;
        n_slots += part_slots(&m->parts[k]);
    }
    m->slot_acts = calloc((size_t)n_slots, sizeof *m->slot_acts);
    int64_t bt = (int64_t)m->batch * m->spec.seq;
    if (!m->slot_acts) return TR_ERR_NOMEM;
    /* Per slot: ids, targets, document starts, position ids. */
    TR_TRY(tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS,
                           (size_t)(4 * n_slots) * (size_t)bt * sizeof *m->tok_buf,
                           (void **)&m->tok_buf));
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        for (int slot = 0; slot < part_slots(p); slot++) {
            int at = m->slot_start[k] + slot;
            tr_slot_acts *a = &m->slot_acts[at];
            a->layers = calloc((size_t)(p->num_layers > 0 ? p->num_layers : 1), sizeof *a->layers);
            if (!a->layers) return TR_ERR_NOMEM;
            if (p->has_embedding) a->ids = m->tok_buf + (int64_t)(4 * at) * bt;
            if (p->has_loss) a->targets = m->tok_buf + (int64_t)(4 * at + 1) * bt;
            a->doc_start = m->tok_buf + (int64_t)(4 * at + 2) * bt;
            a->pos_ids = m->tok_buf + (int64_t)(4 * at + 3) * bt;
        }
    }
    return TR_OK;
}

tr_status tr_model_alloc_acts(tr_model *m) {
    tr_status st = TR_ERR_NOMEM;
    m->acts = calloc((size_t)m->spec.num_layers, sizeof *m->acts);
    if (!m->acts) return st;
    if ((st = alloc_slots(m)) != TR_OK) return st;
    carver c = {0};
    carve_acts(m, &c);
    m->act_numel = c.used;
    st = tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, (size_t)c.used * sizeof(float),
                         (void **)&m->act_buf);
    if (st != TR_OK) return st;
    c = (carver){m->act_buf, 0};
    carve_acts(m, &c);
    return TR_OK;
}

void tr_model_free_acts(tr_model *m, tr_device *dev) {
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->act_buf);
    free(m->acts);
    if (m->slot_acts)
        for (int k = 0; k < m->n_parts; k++)
            for (int slot = 0; slot < part_slots(&m->parts[k]); slot++)
                free(m->slot_acts[m->slot_start[k] + slot].layers);
    free(m->slot_acts);
    free(m->slot_start);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->tok_buf);
}
