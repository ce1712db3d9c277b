/* Activation buffers: one set per (stage, slot) for the microbatches a stage holds in flight
 * (less what recomputation drops: the shared recompute sets hold that), the deferred output-layer
 * weight gradients' inputs, shared backward scratch, and which linear inputs are saved in half
 * precision. */
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/model/internal.h"

bool tr_model_half_input(const tr_model *m, int id) {
    const tr_model_spec *s = &m->spec;
    if (!s->lowp || s->no_half_acts) return false;
    /* MLA reads its input norm's output in fp32 (its projections' GEMMs round it), and the
     * MTP depths read the final norm's output as their first hidden state. */
    if (id == TR_LIN_QKV && s->mla.on) return false;
    if (id == TR_MODEL_AT_HEAD) return !s->mtp_layers; /* the output layer has no adapter */
    return !(s->lora_rank && (s->lora_targets & (1u << id)));
}

int tr_model_defer_cap(const tr_model *m) {
    if (m->spec.lora_rank) return 0; /* the output layer is frozen: no weight gradient */
    for (int k = 0; k < m->n_parts; k++)
        if (m->parts[k].has_loss) return m->spec.defer_wgrad;
    return 0;
}

static int64_t aligned_floats(int64_t floats) {
    return (floats + TR_PARAM_ALIGN - 1) / TR_PARAM_ALIGN * TR_PARAM_ALIGN;
}

void tr_model_defer_sizes(const tr_model *m, int64_t *x_floats, int64_t *dy_floats) {
    int64_t rows = (int64_t)m->batch * m->spec.seq;
    int64_t nx = rows * m->spec.hidden, ndy = rows * m->spec.vocab;
    /* The input as the backward reads it (half when the head saves it so); the logits gradient
     * in half precision in mixed precision, where the weight-gradient GEMM rounds it anyway. */
    *x_floats = aligned_floats(tr_model_half_input(m, TR_MODEL_AT_HEAD) ? (nx + 1) / 2 : nx);
    *dy_floats = aligned_floats(m->spec.lowp ? (ndy + 1) / 2 : ndy);
}

/* Recomputation's plan (runtime/model/recompute.c reruns what a slot does not keep). Full
 * recomputation: the run of layers recomputed together that `layer` (of part p) belongs
 * to, as [*first, returned end); 0 when the layer keeps everything. uniform: the part's layers
 * in runs of recompute_layers (the last one shorter); block: the part's first
 * recompute_layers layers, each a run of its own. */
static int full_run(const tr_model_spec *s, const tr_model_part *p, int layer, int *first) {
    int pos = layer - p->first_layer, end = p->first_layer + p->num_layers;
    int n = s->recompute_layers;
    if (s->recompute != TR_RECOMPUTE_FULL || n <= 0 || pos < 0 || layer >= end) return 0;
    if (s->recompute_block) {
        if (pos >= n) return 0;
        *first = layer;
        return layer + 1;
    }
    *first = p->first_layer + pos / n * n;
    return *first + n < end ? *first + n : end;
}

unsigned tr_model_rc_dropped(const tr_model *m, int part, int layer, int *set) {
    const tr_model_spec *s = &m->spec;
    *set = 0;
    /* An MTP depth's layer (on the loss stage) is a run of its own under full recomputation:
     * Megatron checkpoints each depth's layer whole, whatever the method. */
    if (layer >= s->num_layers && s->recompute == TR_RECOMPUTE_FULL && s->recompute_layers > 0)
        return TR_RC_ALL & ~(unsigned)TR_RC_X_IN;
    if (s->recompute == TR_RECOMPUTE_SELECTIVE) {
        unsigned mods = s->recompute_modules, d = 0;
        if (mods & (1u << TR_RC_MOD_CORE_ATTN)) d |= TR_RC_ATTN;
        if (mods & (1u << TR_RC_MOD_MLP)) d |= TR_RC_MLP;
        if (mods & (1u << TR_RC_MOD_LAYERNORM)) d |= TR_RC_NORMS;
        if (mods & (1u << TR_RC_MOD_MLA_UP_PROJ)) d |= TR_RC_MLA_UP;
        return d;
    }
    int first = 0;
    if (!full_run(s, &m->parts[part], layer, &first)) return 0;
    /* Only the run's input is kept; each layer of the run has its own set, because the
     * backward of the run needs all of them after one rerun of its forward. */
    *set = layer - first;
    return TR_RC_ALL & ~(layer == first ? (unsigned)TR_RC_X_IN : 0u);
}

unsigned tr_model_moe_rc(const tr_model_spec *s, const tr_model_part *p, int layer, int *set) {
    *set = 0;
    if (s->recompute == TR_RECOMPUTE_FULL) {
        int first;
        if (layer >= s->num_layers) return s->recompute_layers > 0 ? TR_MOE_RC_ALL : 0u;
        if (!full_run(s, p, layer, &first)) return 0;
        *set = layer - first;
        return TR_MOE_RC_ALL;
    }
    if (s->recompute != TR_RECOMPUTE_SELECTIVE) return 0;
    unsigned mods = s->recompute_modules, rc = 0;
    if (mods & (1u << TR_RC_MOD_MOE)) return TR_MOE_RC_ALL;
    if (mods & (1u << TR_RC_MOD_MOE_ACT)) rc |= TR_MOE_RC_ACT;
    if (mods & (1u << TR_RC_MOD_SHARED_EXPERTS) && s->moe.shared_ffn > 0) rc |= TR_MOE_RC_SHARED;
    return rc;
}

int tr_model_rc_sets(const tr_model *m) {
    const tr_model_spec *s = &m->spec;
    int most = 0;
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        int n = p->num_layers + (p->has_loss && s->mtp_layers ? 1 : 0); /* depths: set 0 */
        if (n > most) most = n;
    }
    if (s->recompute == TR_RECOMPUTE_SELECTIVE) return s->recompute_modules && most ? 1 : 0;
    if (s->recompute != TR_RECOMPUTE_FULL || s->recompute_layers <= 0) return 0;
    int n = s->recompute_block ? 1 : s->recompute_layers;
    return n < most ? n : most;
}

int tr_model_rc_run(const tr_model *m, int part, int layer, int *first) {
    return full_run(&m->spec, &m->parts[part], layer, first);
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

static float *carve_cb(void *c, int64_t n) {
    return carve(c, n);
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

/* A layer's tensors, group by group (TR_RC_*): carved for it, or, for the groups in `drop`,
 * those of the shared recompute set sc (left NULL without sc: a set carves only the groups some
 * layer drops into it). */
static void carve_layer(const tr_model *m, carver *c, tr_layer_acts *a, const tr_layer_acts *sc,
                        unsigned drop) {
    const tr_model_spec *s = &m->spec;
    int64_t bt = (int64_t)m->batch * s->seq, C = s->hidden;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    tr_layer_acts none = {0};
    const tr_layer_acts *from = sc ? sc : &none;
    if (drop & TR_RC_X_IN)
        a->x_in = from->x_in;
    else
        a->x_in = carve(c, bt * C);
    if (s->mla.on) { /* MLA keeps its own attention operands, its output with the attention's */
        unsigned shared = (drop & TR_RC_REST ? TR_MLA_ACTS_LATENT : 0u) |
                          (drop & TR_RC_MLA_UP ? TR_MLA_ACTS_QKV : 0u) |
                          (drop & TR_RC_ATTN ? TR_MLA_ACTS_OUT : 0u);
        tr_mla_share_acts(&a->mla, &from->mla, shared);
        tr_mla_carve_acts(&s->mla, s->heads, bt, TR_MLA_ACTS_ALL & ~shared, &a->mla, carve_cb, c);
    }
    if (drop & TR_RC_REST) {
        a->q = from->q, a->k = from->k, a->v = from->v, a->x_mid = from->x_mid;
        a->q_raw = from->q_raw, a->k_raw = from->k_raw;
        a->qn_mean = from->qn_mean, a->qn_rstd = from->qn_rstd;
        a->kn_mean = from->kn_mean, a->kn_rstd = from->kn_rstd;
    } else if (s->mla.on) {
        a->x_mid = carve(c, bt * C);
    } else {
        a->q = carve(c, bt * hd);
        a->k = carve(c, bt * gd);
        a->v = carve(c, bt * gd);
        a->x_mid = carve(c, bt * C);
        if (s->qk_norm) { /* the q/k norms' inputs and per-head statistics */
            bool mean = s->layernorm;
            a->q_raw = carve(c, bt * hd);
            a->k_raw = carve(c, bt * gd);
            a->qn_mean = mean ? carve(c, bt * s->heads) : NULL;
            a->qn_rstd = carve(c, bt * s->heads);
            a->kn_mean = mean ? carve(c, bt * s->groups) : NULL;
            a->kn_rstd = carve(c, bt * s->groups);
        }
    }
    if (drop & TR_RC_NORMS) {
        a->ln1 = from->ln1, a->ln1_full = from->ln1_full, a->ln1_h = from->ln1_h;
        a->ln1_mean = from->ln1_mean, a->ln1_rstd = from->ln1_rstd;
        a->ln2 = from->ln2, a->ln2_full = from->ln2_full, a->ln2_h = from->ln2_h;
        a->ln2_mean = from->ln2_mean, a->ln2_rstd = from->ln2_rstd;
    } else {
        carve_norm_out(m, c, TR_LIN_QKV, &a->ln1, &a->ln1_full, &a->ln1_h);
        a->ln1_mean = carve(c, bt);
        a->ln1_rstd = carve(c, bt);
        carve_norm_out(m, c, TR_LIN_FC1, &a->ln2, &a->ln2_full, &a->ln2_h);
        a->ln2_mean = carve(c, bt);
        a->ln2_rstd = carve(c, bt);
    }
    if (drop & TR_RC_ATTN) {
        a->attn = from->attn, a->lse = from->lse;
    } else {
        a->attn = carve(c, bt * hd);
        a->lse = s->mla.on ? NULL : carve(c, (int64_t)m->batch * s->heads * s->seq);
    }
    if (drop & TR_RC_MLP) {
        a->fc1 = from->fc1, a->act = from->act, a->act_h = from->act_h;
    } else {
        a->fc1 = carve(c, bt * m->fc1_dim);
        /* The MLP activation: fc2's input only (its backward reads fc1). */
        bool half = tr_model_half_input(m, TR_LIN_FC2);
        a->act = half ? NULL : carve(c, bt * s->ffn);
        a->act_h = half ? carve_half(c, bt * s->ffn) : NULL;
    }
}

/* The groups some layer of the model (an MTP depth's included) drops into recompute set `set`. */
static unsigned set_groups(const tr_model *m, int set) {
    unsigned used = 0;
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        int n = p->num_layers + (p->has_loss ? m->spec.mtp_layers : 0);
        for (int i = 0; i < n; i++) {
            int at, layer = i < p->num_layers ? p->first_layer + i
                                              : m->spec.num_layers + i - p->num_layers;
            unsigned d = tr_model_rc_dropped(m, k, layer, &at);
            if (at == set) used |= d;
        }
    }
    return used;
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
    tr_mtp_acts scratch = {0};              /* a sizing pass has no MTP records */
    for (int d = 0; d < s->mtp_layers; d++) /* MTP: each depth's layer and its own tensors */
        tr_mtp_carve_acts(bt, (int)C, s->vocab, s->layernorm, s->sequence_parallel,
                          a->mtp ? &a->mtp[d] : &scratch, carve_cb, c);
}

/* The output layer's inputs and logits gradients of the microbatches whose weight gradients
 * wait for the drain (runtime/model/defer_wgrad.c): activations too, kept past their slot. */
static void carve_deferred(tr_model *m, carver *c) {
    m->defer_cap = tr_model_defer_cap(m);
    m->defer_x = m->defer_dy = NULL;
    if (m->defer_cap <= 0) return;
    int64_t xf, dyf;
    tr_model_defer_sizes(m, &xf, &dyf);
    m->defer_x = carve(c, m->defer_cap * xf);
    m->defer_dy = carve(c, m->defer_cap * dyf);
}

/* Every (part, slot) gets its own layers' (and head's) activations, but for what they
 * recompute, which lives in the shared recompute sets; scratch is shared. */
static void carve_acts(tr_model *m, carver *c) {
    const tr_model_spec *s = &m->spec;
    int64_t bt = (int64_t)m->batch * s->seq, C = s->hidden;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    /* A sizing pass of a shape (tr_model_act_sizes) has no slot or set records: the pointers go
     * to a scratch record, the sizes are the same. */
    tr_layer_acts scratch_layer = {0};
    tr_slot_acts scratch_slot = {0};
    for (int r = 0; r < m->n_rc_sets; r++)
        carve_layer(m, c, m->rc_sets ? &m->rc_sets[r] : &scratch_layer, NULL,
                    TR_RC_ALL & ~set_groups(m, r));
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        /* a sizing pass carves one slot: every slot of a part takes the same floats (carve
         * only adds rounded sizes) */
        int n_carved = m->slot_acts ? part_slots(p) : part_slots(p) > 0;
        int64_t slot_from = c->used;
        for (int slot = 0; slot < n_carved; slot++) {
            tr_slot_acts *a = m->slot_acts ? &m->slot_acts[m->slot_start[k] + slot] : &scratch_slot;
            for (int i = 0; i < p->num_layers; i++) {
                int at;
                unsigned drop = tr_model_rc_dropped(m, k, p->first_layer + i, &at);
                tr_layer_acts *la = a->layers ? &a->layers[i] : &scratch_layer;
                carve_layer(m, c, la, drop && m->rc_sets ? &m->rc_sets[at] : NULL, drop);
            }
            if (p->has_loss) {
                for (int d = 0; d < s->mtp_layers; d++) {
                    int at;
                    unsigned drop = tr_model_rc_dropped(m, k, s->num_layers + d, &at);
                    tr_layer_acts *la = a->layers ? &a->layers[p->num_layers + d] : &scratch_layer;
                    carve_layer(m, c, la, drop && m->rc_sets ? &m->rc_sets[at] : NULL, drop);
                }
                carve_head(m, c, a);
            }
        }
        if (!m->slot_acts && n_carved) c->used += (c->used - slot_from) * (part_slots(p) - 1);
    }
    carve_deferred(m, c);
    m->sp_full = s->sequence_parallel ? carve(c, bt * C) : NULL;
    m->sp_perm = s->sequence_parallel ? carve(c, bt * C) : NULL;
    int64_t big = m->fc1_dim > m->qkv_dim ? m->fc1_dim : m->qkv_dim;
    if (big < C) big = C;
    m->rope_cos = carve(c, (int64_t)tr_model_pos_rows(s) * (s->head_dim / 2 + 1));
    m->rope_sin = carve(c, (int64_t)tr_model_pos_rows(s) * (s->head_dim / 2 + 1));
    m->dx = carve(c, bt * C);
    m->dtmp = carve(c, bt * C);
    m->dbig = carve(c, bt * big);
    m->dact = carve(c, bt * s->ffn);
    m->dq = carve(c, bt * hd);
    m->dk = carve(c, bt * gd);
    m->dv = carve(c, bt * gd);
    if (s->mla.on) tr_mla_carve_scratch(&s->mla, s->heads, bt, s->seq, &m->mla_sc, carve_cb, c);
    m->dq_raw = s->qk_norm ? carve(c, bt * hd) : NULL;
    m->dk_raw = s->qk_norm ? carve(c, bt * gd) : NULL;
    m->loss_dev = carve(c, 1);
    if (s->mtp_layers) tr_mtp_carve_scratch(bt, (int)C, s->mtp_layers, &m->mtp_sc, carve_cb, c);
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
        if (layer >= m->spec.num_layers && p->has_loss) return part_slots(p); /* an MTP depth's */
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
            int n = p->num_layers + (p->has_loss ? m->spec.mtp_layers : 0);
            a->layers = calloc((size_t)(n > 0 ? n : 1), sizeof *a->layers);
            if (!a->layers) return TR_ERR_NOMEM;
            if (p->has_loss && m->spec.mtp_layers > 0 &&
                !(a->mtp = calloc((size_t)m->spec.mtp_layers, sizeof *a->mtp)))
                return TR_ERR_NOMEM;
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
    m->acts = calloc((size_t)(m->spec.num_layers + m->spec.mtp_layers), sizeof *m->acts);
    if (!m->acts) return st;
    if ((st = alloc_slots(m)) != TR_OK) return st;
    /* A deferred output-layer gradient must not land in an embedding reported final already. */
    int defer = tr_model_defer_cap(m);
    if (defer < 0 || (defer && m->spec.tied && !m->has_tied_copy)) return TR_ERR_INVALID;
    m->n_rc_sets = tr_model_rc_sets(m);
    if (m->n_rc_sets > 0 && !(m->rc_sets = calloc((size_t)m->n_rc_sets, sizeof *m->rc_sets)))
        return TR_ERR_NOMEM;
    carver c = {0};
    carve_acts(m, &c);
    m->act_numel = c.used;
    st = tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, (size_t)c.used * sizeof(float),
                         (void **)&m->act_buf);
    if (st != TR_OK) return st;
    c = (carver){m->act_buf, 0};
    carve_acts(m, &c);
    if (m->spec.mtp_layers) /* the losses logged accumulate from zero */
        st = tr_device_memset0(m->dev, m->mtp_sc.sum, (size_t)m->spec.mtp_layers * sizeof(float));
    return st;
}

static int64_t n_slots_of(const tr_model *m) {
    int64_t n = 0;
    for (int k = 0; k < m->n_parts; k++) n += part_slots(&m->parts[k]);
    return n;
}

tr_status tr_model_act_sizes(const tr_model *shape, tr_model_act_size *out) {
    tr_model m = *shape;
    m.slot_acts = NULL;
    m.rc_sets = NULL;
    m.n_rc_sets = tr_model_rc_sets(&m);
    int defer = tr_model_defer_cap(&m);
    if (defer < 0 || (defer && m.spec.tied && !m.has_tied_copy)) return TR_ERR_INVALID;
    carver c = {0};
    carve_acts(&m, &c);
    int64_t bt = (int64_t)m.batch * m.spec.seq;
    out->act_bytes = c.used * (int64_t)sizeof(float);
    out->tok_bytes = 4 * n_slots_of(&m) * bt * (int64_t)sizeof(int32_t);
    out->rc_sets = m.n_rc_sets;
    out->defer_cap = defer;
    return TR_OK;
}

void tr_model_free_acts(tr_model *m, tr_device *dev) {
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->act_buf);
    free(m->acts);
    free(m->rc_sets);
    if (m->slot_acts)
        for (int k = 0; k < m->n_parts; k++)
            for (int slot = 0; slot < part_slots(&m->parts[k]); slot++) {
                free(m->slot_acts[m->slot_start[k] + slot].layers);
                free(m->slot_acts[m->slot_start[k] + slot].mtp);
            }
    free(m->slot_acts);
    free(m->slot_start);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->tok_buf);
}
