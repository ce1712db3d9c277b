/* Forward pass of one microbatch: embedding, pre-norm transformer layers, final norm, output
 * layer and the vocab-parallel cross entropy (stats, then loss), all through the op table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context_parallel/cp.h"
#include "runtime/device/device.h"
#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

tr_status tr_model_norm_fwd(const tr_model *m, float *y, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int rows) {
    const tr_model_spec *s = &m->spec;
    if (s->layernorm)
        return m->ops->layernorm_fwd(y, mean, rstd, x, w, b, rows, s->hidden, s->eps,
                                     s->zero_centered);
    return m->ops->rmsnorm_fwd(y, rstd, x, w, rows, s->hidden, s->eps, s->zero_centered);
}

/* Megatron's fused QKV rows are grouped: per KV group, its (heads/groups) query heads, then
 * its key head, then its value head. Attention wants q [B,T,H,D], k and v [B,T,G,D]. As the
 * fused row is G groups of (qd + 2D) floats and q's row G pieces of qd (k's and v's G of D),
 * (row, group) flattens to one index over rows * G: three strided copies, whatever G. */
tr_status tr_model_qkv_split(const tr_model *m, const float *qkv, float *q, float *k, float *v,
                             int64_t rows) {
    const tr_model_spec *s = &m->spec;
    int64_t D = s->head_dim, G = s->groups, qd = (s->heads / s->groups) * D, ld = qd + 2 * D;
    TR_TRY(m->ops->copy_2d(q, qd, qkv, ld, rows * G, qd));
    TR_TRY(m->ops->copy_2d(k, D, qkv + qd, ld, rows * G, D));
    return m->ops->copy_2d(v, D, qkv + qd + D, ld, rows * G, D);
}

tr_status tr_model_qkv_merge(const tr_model *m, float *qkv, const float *q, const float *k,
                             const float *v, int64_t rows) {
    const tr_model_spec *s = &m->spec;
    int64_t D = s->head_dim, G = s->groups, qd = (s->heads / s->groups) * D, ld = qd + 2 * D;
    TR_TRY(m->ops->copy_2d(qkv, ld, q, qd, rows * G, qd));
    TR_TRY(m->ops->copy_2d(qkv + qd, ld, k, D, rows * G, D));
    return m->ops->copy_2d(qkv + qd + D, ld, v, D, rows * G, D);
}

/* dst = src for n floats of device memory. */
tr_status tr_model_copy(const tr_model *m, float *dst, const float *src, int64_t n) {
    if (dst == src) return TR_OK;
    return tr_device_copy(m->dev, dst, src, (size_t)n * sizeof(float));
}

tr_attn_desc tr_model_attn_desc(const tr_model *m) {
    const tr_model_spec *s = &m->spec;
    return (tr_attn_desc){.batch = m->batch,
                          .seq = s->seq,
                          .heads = s->heads,
                          .groups = s->groups,
                          .head_dim = s->head_dim,
                          .scale = 1.0f / sqrtf((float)s->head_dim),
                          .causal = 1,
                          .doc_start = m->doc_start,
                          /* the mixed-precision contract of the GEMMs, so CUDA uses tensor cores */
                          .lowp = s->lowp,
                          /* built by runtime/model/positions.c from document boundaries */
                          .doc_start_trusted = 1};
}

/* Layer `layer`'s attention: with attention dropout in training, the mask coordinates that make
 * every layout draw the single-rank run's mask (the global layer and microbatch round, this TP
 * rank's first global head). */
tr_attn_desc tr_model_layer_attn_desc(const tr_model *m, int layer) {
    tr_attn_desc d = tr_model_attn_desc(m);
    if (m->spec.attention_dropout > 0.0f && m->training) {
        d.dropout = m->spec.attention_dropout;
        d.dropout_seed = m->dropout_seed;
        d.dropout_round = m->dropout_round;
        d.dropout_layer = layer;
        d.head_offset = m->tp.rank * m->spec.heads;
        d.heads_total = m->full.heads;
    }
    return d;
}

tr_mla_run tr_model_mla_run(const tr_model *m, int layer) {
    const tr_model_spec *s = &m->spec;
    return (tr_mla_run){.ops = m->ops,
                        .s = &s->mla,
                        .comm = m->comm,
                        .group = m->tp_group,
                        .tp = m->tp.size,
                        .hidden = s->hidden,
                        .heads = s->heads,
                        .batch = m->batch,
                        .seq = s->seq,
                        .eps = s->eps,
                        .zero_centered = s->zero_centered,
                        .lowp = s->lowp,
                        .attn = tr_model_layer_attn_desc(m, layer),
                        .pos_ids = m->pos_ids,
                        .sc = &m->mla_sc};
}

/* Dropout site `site` of the current microbatch: a disjoint Philox counter range per site and
 * per microbatch, so backward regenerates exactly the forward mask. */
uint64_t tr_model_dropout_offset(const tr_model *m, int site) {
    uint64_t n =
        (uint64_t)m->batch * (uint64_t)tr_model_pos_rows(&m->spec) * (uint64_t)m->spec.hidden;
    /* 0 embedding, 1 + 2i and 2 + 2i layer i (MTP depths' layers after the decoder's), then
     * each MTP depth's embedding */
    uint64_t layers = (uint64_t)(m->spec.num_layers + m->spec.mtp_layers);
    uint64_t sites = 2u * layers + 1u + (uint64_t)m->spec.mtp_layers;
    return (m->dropout_round * sites + (uint64_t)site) * n;
}

tr_status tr_model_dropout(const tr_model *m, float *y, const float *x, int site, bool forward) {
    float p = m->spec.hidden_dropout;
    if (p <= 0.0f || !m->training) return TR_OK;
    uint64_t base = tr_model_dropout_offset(m, site);
    int64_t h = m->spec.hidden, T = m->spec.seq, S = tr_model_pos_rows(&m->spec);
    int cp = m->spec.cp > 1 ? m->spec.cp : 1, cp_rank = m->cp ? m->cp->rank : 0;
    if (!m->spec.sequence_parallel && cp == 1) {
        int64_t n = (int64_t)m->batch * T * h;
        return forward ? m->ops->dropout_fwd(y, x, n, p, m->dropout_seed, base)
                       : m->ops->dropout_bwd(y, x, n, p, m->dropout_seed, base);
    }
    /* This rank's rows of each sequence (its chunk under SP; its runs of consecutive tokens of
     * the whole sequence under CP) draw the bits the whole sequence would. */
    int64_t Tl = m->spec.sequence_parallel ? T / m->tp.size : T;
    int64_t first = m->spec.sequence_parallel ? (int64_t)m->tp.rank * Tl : 0;
    for (int b = 0; b < m->batch; b++)
        for (int64_t t = first; t < first + Tl;) {
            int64_t run = tr_cp_run(cp, (int)T, (int)t, (int)(first + Tl));
            int64_t g = tr_cp_global_pos(cp, cp_rank, (int)T, (int)t);
            uint64_t off = base + (uint64_t)(((int64_t)b * S + g) * h);
            int64_t at = ((int64_t)b * Tl + t - first) * h;
            TR_TRY(forward ? m->ops->dropout_fwd(y + at, x + at, run * h, p, m->dropout_seed, off)
                           : m->ops->dropout_bwd(y + at, x + at, run * h, p, m->dropout_seed, off));
            t += run;
        }
    return TR_OK;
}

static tr_status dropout_fwd(const tr_model *m, float *x, int site) {
    return tr_model_dropout(m, x, x, site, true);
}

/* The input of a column-parallel layer: the norm output, gathered over the sequence chunks with
 * sequence parallelism. */
static tr_status region_input(const tr_model *m, const float *local, float *full,
                              const float **in) {
    *in = local;
    if (!m->spec.sequence_parallel) return TR_OK;
    *in = full;
    return tr_tp_seq_gather(m, local, full, m->spec.hidden);
}

/* The input of a column-parallel layer saved in half precision: the norm output (rows of this
 * rank, in the shared scratch `local`), gathered in fp32 with sequence parallelism, then cast
 * once into `saved`, which the layer's forward and weight-gradient GEMMs read. */
static tr_status region_input_half(const tr_model *m, const float *local, uint16_t *saved) {
    const float *full;
    TR_TRY(region_input(m, local, m->sp_full, &full));
    int64_t n = (int64_t)m->batch * m->spec.seq * m->spec.hidden;
    return m->ops->cast_lowp((tr_lowp)m->spec.lowp, saved, full, n);
}

tr_status tr_model_norm_input(const tr_model *m, float *y, float *y_full, uint16_t *half,
                              float *mean, float *rstd, const float *x, const float *w,
                              const float *b, const float **in) {
    int lrows = tr_tp_local_rows(m);
    *in = NULL;
    if (half) {
        TR_TRY(tr_model_norm_fwd(m, m->dtmp, mean, rstd, x, w, b, lrows));
        return region_input_half(m, m->dtmp, half);
    }
    TR_TRY(tr_model_norm_fwd(m, y, mean, rstd, x, w, b, lrows));
    return region_input(m, y, y_full, in);
}

/* A norm of the layer feeding column-parallel linear l: into the saved fp32 output (and its
 * gathered rows), or with a half-precision input through the scratch dtmp into `half`. */
static tr_status norm_to_linear(tr_model *m, const tr_linear *l, float *y, float *y_full,
                                uint16_t *half, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, float *out) {
    int rows = m->batch * m->spec.seq;
    if (!half && (l->overlap & TR_TPO_AG)) { /* the gather goes with the GEMM */
        TR_TRY(tr_model_norm_fwd(m, y, mean, rstd, x, w, b, tr_tp_local_rows(m)));
        return tr_linear_fwd_gather(m->ops, l, y, y_full, out, rows);
    }
    const float *in;
    TR_TRY(tr_model_norm_input(m, y, y_full, half, mean, rstd, x, w, b, &in));
    if (half) return tr_linear_fwd_half(m->ops, l, half, out, rows);
    return tr_linear_fwd(m->ops, l, in, out, rows);
}

tr_status tr_model_core_attn_fwd(const tr_model *m, int layer, const tr_layer_acts *a) {
    tr_attn_desc ad = tr_model_layer_attn_desc(m, layer);
    if (m->cp) return tr_cp_attn_fwd(m->cp, a->attn, a->lse, a->q, a->k, a->v, &ad);
    return m->ops->attention_fwd(a->attn, a->lse, a->q, a->k, a->v, &ad);
}

/* The MLP activation: saved as it is, or (half precision) through the backward's scratch dact,
 * which is free during a forward and before the backward of fc2. */
tr_status tr_model_mlp_act_fwd(const tr_model *m, const tr_layer_acts *a) {
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq;
    float *act = a->act_h ? m->dact : a->act;
    if (s->swiglu)
        TR_TRY(m->ops->swiglu_fwd(act, a->fc1, rows, s->ffn));
    else
        TR_TRY(m->ops->gelu_fwd(act, a->fc1, (int64_t)rows * s->ffn, s->gelu_tanh));
    if (!a->act_h) return TR_OK;
    return m->ops->cast_lowp((tr_lowp)s->lowp, a->act_h, act, (int64_t)rows * s->ffn);
}

/* An MoE layer's MLP branch (runtime/moe/moe.h) on the pre-MLP norm's output, in fp32; under
 * sequence parallelism on this rank's chunk, nothing gathered (expert TP 1). */
static tr_status moe_fwd(tr_model *m, int i, float *x_out) {
    const tr_layer_views *p = &m->p.layers[i];
    tr_layer_acts *a = &m->acts[i];
    int rows = tr_tp_local_rows(m);
    int64_t n = (int64_t)rows * m->spec.hidden;
    TR_TRY(tr_model_norm_fwd(m, m->dtmp, a->ln2_mean, a->ln2_rstd, a->x_mid, p->ln2_w, p->ln2_b,
                             rows));
    if (m->moe_rerun) /* full recomputation: the layer again, counting nothing twice */
        TR_TRY(tr_moe_recompute(m->moe[i], m->moe_slot, m->dtmp, m->dtmp, m->dropout_seed,
                                m->dropout_round));
    else
        TR_TRY(tr_moe_forward(m->moe[i], m->moe_slot, m->dtmp, m->dtmp, m->training,
                              m->dropout_seed, m->dropout_round));
    if (!x_out) return TR_OK; /* a recomputed run's last layer: its output is kept */
    TR_TRY(dropout_fwd(m, m->dtmp, 2 + 2 * i));
    TR_TRY(tr_model_copy(m, x_out, a->x_mid, n));
    return m->ops->add(x_out, m->dtmp, n);
}

tr_status tr_model_layer_fwd(tr_model *m, int i, const float *x_in, float *x_out) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    const tr_layer_views *p = &m->p.layers[i];
    tr_layer_acts *a = &m->acts[i];
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m);
    int64_t n = (int64_t)lrows * s->hidden;
    TR_TRY(tr_model_copy(m, a->x_in, x_in, n));

    if (s->mla.on) { /* on whole sequences: the input norm's output gathered under SP */
        const float *in;
        TR_TRY(tr_model_norm_input(m, a->ln1, a->ln1_full, NULL, a->ln1_mean, a->ln1_rstd, a->x_in,
                                   p->ln1_w, p->ln1_b, &in));
        tr_mla_run run = tr_model_mla_run(m, i);
        TR_TRY(tr_mla_fwd(&run, &p->mla, &a->mla, in, a->attn));
    } else {
        tr_linear qkv = tr_model_layer_linear(m, i, TR_LIN_QKV);
        TR_TRY(norm_to_linear(m, &qkv, a->ln1, a->ln1_full, a->ln1_h, a->ln1_mean, a->ln1_rstd,
                              a->x_in, p->ln1_w, p->ln1_b, m->dbig));
        /* With qk_norm the split lands in the norms' saved inputs and the norms write q and k. */
        TR_TRY(tr_model_qkv_split(m, m->dbig, s->qk_norm ? a->q_raw : a->q,
                                  s->qk_norm ? a->k_raw : a->k, a->v, rows));
        if (s->qk_norm) TR_TRY(tr_model_qk_norm_fwd(m, i));
        if (s->rope) {
            TR_TRY(tr_model_rope(m, a->q, s->heads, true));
            TR_TRY(tr_model_rope(m, a->k, s->groups, true));
        }
        TR_TRY(tr_model_core_attn_fwd(m, i, a));
    }
    tr_linear proj = tr_model_layer_linear(m, i, TR_LIN_PROJ);
    TR_TRY(tr_linear_fwd(ops, &proj, a->attn, m->dtmp, rows));
    TR_TRY(dropout_fwd(m, m->dtmp, 1 + 2 * i));
    TR_TRY(tr_model_copy(m, a->x_mid, a->x_in, n));
    TR_TRY(ops->add(a->x_mid, m->dtmp, n));
    /* (MTP depths' layers, numbered past the decoder's, are dense) */
    if (m->moe && m->moe[i]) return moe_fwd(m, i, x_out);

    tr_linear fc1 = tr_model_layer_linear(m, i, TR_LIN_FC1);
    TR_TRY(norm_to_linear(m, &fc1, a->ln2, a->ln2_full, a->ln2_h, a->ln2_mean, a->ln2_rstd,
                          a->x_mid, p->ln2_w, p->ln2_b, a->fc1));
    TR_TRY(tr_model_mlp_act_fwd(m, a));
    if (!x_out) return TR_OK;
    tr_linear fc2 = tr_model_layer_linear(m, i, TR_LIN_FC2);
    if (a->act_h)
        TR_TRY(tr_linear_fwd_half(ops, &fc2, a->act_h, m->dtmp, rows));
    else
        TR_TRY(tr_linear_fwd(ops, &fc2, a->act, m->dtmp, rows));
    TR_TRY(dropout_fwd(m, m->dtmp, 2 + 2 * i));
    TR_TRY(tr_model_copy(m, x_out, a->x_mid, n));
    return ops->add(x_out, m->dtmp, n);
}

/* Padding ids [real, vocab) get a logit so low that exp() of it is exactly 0 next to any real
 * logit: the softmax, the loss and every gradient are the unpadded model's. (Not -inf: a shard
 * of padding alone would make its local max -inf and exp(-inf - -inf) undefined.) */
static tr_status mask_padding(const tr_model *m, float *logits, int vocab_start, int real,
                              int rows) {
    int V = m->spec.vocab, first = real - vocab_start;
    if (first >= V) return TR_OK;
    if (first < 0) first = 0;
    return m->ops->fill_2d(logits + first, V, rows, V - first, -1e30f);
}

/* Logits of h through the output layer, and the mean cross entropy against targets into *loss
 * (device memory). */
static tr_status logits_loss(const tr_model *m, const float *h, float *logits, float *stats,
                             float *losses, const int32_t *targets, float *loss) {
    const tr_ops *ops = m->ops;
    int rows = m->batch * m->spec.seq, vocab_start = m->tp.rank * m->spec.vocab;
    int real = m->full.vocab_real > 0 ? m->full.vocab_real : m->full.vocab;
    tr_linear out = tr_model_output_linear(m);
    TR_TRY(tr_linear_fwd(ops, &out, h, logits, rows));
    TR_TRY(mask_padding(m, logits, vocab_start, real, rows));
    TR_TRY(ops->ce_stats(stats, logits, targets, rows, m->spec.vocab, vocab_start));
    TR_TRY(tr_tp_ce_combine(m, stats, stats + 3 * rows, rows));
    TR_TRY(ops->ce_loss(losses, stats, targets, rows));
    return ops->loss_mean(loss, losses, targets, rows);
}

tr_mtp_run tr_model_mtp_run(const tr_model *m) {
    return (tr_mtp_run){.ops = m->ops,
                        .comm = m->comm,
                        .group = m->tp_group,
                        .tp = m->tp.size,
                        .rank = m->tp.rank,
                        .hidden = m->spec.hidden,
                        .rows = m->batch * m->spec.seq,
                        .lowp = m->spec.lowp,
                        .sp = m->spec.sequence_parallel,
                        .sc = &m->mtp_sc};
}

/* Multi-token prediction after the main loss (runtime/mtp/mtp.h): depth d from the previous
 * depth's hidden state (the main model's final norm output first) and the embedding of the ids
 * shifted by d + 1. With sequence parallelism every row-wise piece (the embedding's sum, the
 * norms, the layer) runs on this rank's sequence chunk, as the decoder's: eh_proj and the output
 * layer read the chunks gathered, eh_proj's output keeps this rank's rows. */
static tr_status mtp_fwd(tr_model *m) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    bool sp = s->sequence_parallel;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m), L = s->num_layers;
    int vs = m->tp.rank * s->vocab, C = s->hidden;
    tr_mtp_run run = tr_model_mtp_run(m);
    const float *h = m->lnf;
    for (int d = 0; d < s->mtp_layers; d++) {
        const tr_mtp_acts *a = &m->mtp[d];
        const tr_layer_views *p = &m->p.layers[L + d];
        float *x_in = m->acts[L + d].x_in;
        TR_TRY(tr_model_before_params(m, L + d));
        if (sp) {
            TR_TRY(
                ops->embedding_fwd(m->sp_full, a->ids, m->p.mtp_emb, rows, C, vs, vs + s->vocab));
            TR_TRY(tr_tp_seq_reduce_scatter(m, m->sp_full, a->emb, C));
        } else {
            TR_TRY(ops->embedding_fwd(a->emb, a->ids, m->p.mtp_emb, rows, C, vs, vs + s->vocab));
            TR_TRY(tr_tp_all_reduce(m, a->emb, (int64_t)rows * C));
        }
        TR_TRY(dropout_fwd(m, a->emb, 2 * (L + s->mtp_layers) + 1 + d));
        TR_TRY(tr_model_norm_fwd(m, a->en, a->en_mean, a->en_rstd, a->emb, p->mtp_enorm_w,
                                 p->mtp_enorm_b, lrows));
        TR_TRY(tr_model_norm_fwd(m, a->hn, a->hn_mean, a->hn_rstd, h, p->mtp_hnorm_w,
                                 p->mtp_hnorm_b, lrows));
        if (sp) { /* (mtp_sc.de is backward scratch, free here) */
            TR_TRY(tr_tp_seq_gather(m, a->en, m->sp_full, C));
            TR_TRY(tr_tp_seq_gather(m, a->hn, m->mtp_sc.de, C));
            TR_TRY(tr_mtp_proj_fwd(&run, p->mtp_eh_w, a, m->sp_full, m->mtp_sc.de, m->sp_full));
            TR_TRY(tr_tp_seq_rows(m, m->sp_full, x_in, C));
        } else {
            TR_TRY(tr_mtp_proj_fwd(&run, p->mtp_eh_w, a, a->en, a->hn, x_in));
        }
        TR_TRY(tr_model_layer_fwd(m, L + d, x_in, a->y));
        TR_TRY(tr_model_norm_fwd(m, a->h, a->h_mean, a->h_rstd, a->y, p->mtp_fnorm_w,
                                 p->mtp_fnorm_b, lrows));
        if (sp) TR_TRY(tr_tp_seq_gather(m, a->h, a->h_full, C));
        TR_TRY(logits_loss(m, sp ? a->h_full : a->h, a->logits, a->ce_stats, a->losses, a->targets,
                           a->loss));
        if (m->training) TR_TRY(ops->add(m->mtp_sc.sum + d, a->loss, 1));
        h = a->h;
    }
    if (m->training) m->mtp_count++;
    return TR_OK;
}

tr_status tr_model_mtp_losses(tr_model *m, float *out) {
    int D = m->spec.mtp_layers;
    if (D <= 0) return TR_OK;
    TR_TRY(tr_device_to_host(m->dev, out, m->mtp_sc.sum, (size_t)D * sizeof *out));
    for (int d = 0; d < D; d++) out[d] = m->mtp_count ? out[d] / (float)m->mtp_count : 0.0f;
    m->mtp_count = 0;
    return tr_device_memset0(m->dev, m->mtp_sc.sum, (size_t)D * sizeof(float));
}

/* The embedding output into x0 (the stream's start). */
static tr_status embed_fwd(tr_model *m, float *x0) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m);
    int64_t n = (int64_t)lrows * s->hidden;
    int vocab_start = m->tp.rank * s->vocab;
    TR_TRY(tr_model_before_params(m, TR_MODEL_AT_EMBEDDING));
    /* Each row comes from the one shard owning its id: a sum over shards (reduce-scattered to the
     * sequence chunks with sequence parallelism). */
    if (s->sequence_parallel) {
        TR_TRY(ops->embedding_fwd(m->sp_full, m->ids, m->p.word_emb, rows, s->hidden, vocab_start,
                                  vocab_start + s->vocab));
        TR_TRY(tr_tp_seq_reduce_scatter(m, m->sp_full, x0, s->hidden));
    } else {
        TR_TRY(ops->embedding_fwd(x0, m->ids, m->p.word_emb, rows, s->hidden, vocab_start,
                                  vocab_start + s->vocab));
        TR_TRY(tr_tp_all_reduce(m, x0, n));
    }
    if (s->learned_pos) TR_TRY(tr_model_pos_embedding(m, x0, true));
    return dropout_fwd(m, x0, 0);
}

/* loss: one float in the device's memory; the host reads it when it needs it (a step's losses
 * together, runtime/model/loss_buffer.h), so the forward queues without waiting for the device. */
static tr_status head_fwd(tr_model *m, float *loss) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq;
    int vocab_start = m->tp.rank * s->vocab, vocab = m->full.vocab;
    int real = m->full.vocab_real > 0 ? m->full.vocab_real : vocab;
    TR_TRY(tr_model_before_params(m, TR_MODEL_AT_HEAD));
    tr_linear out = tr_model_output_linear(m);
    TR_TRY(norm_to_linear(m, &out, m->lnf, m->lnf_full, m->lnf_h, m->lnf_mean, m->lnf_rstd,
                          m->x_final, m->p.final_w, m->p.final_b, m->logits));
    TR_TRY(mask_padding(m, m->logits, vocab_start, real, rows));
    TR_TRY(ops->ce_stats(m->ce_stats, m->logits, m->targets, rows, s->vocab, vocab_start));
    TR_TRY(tr_tp_ce_combine(m, m->ce_stats, m->ce_stats + 3 * rows, rows));
    TR_TRY(ops->ce_loss(m->losses, m->ce_stats, m->targets, rows));
    /* m->n_valid, the other per-microbatch number the loop needs, was counted from the host's
     * targets. */
    TR_TRY(ops->loss_mean(loss ? loss : m->loss_dev, m->losses, m->targets, rows));
    return s->mtp_layers ? mtp_fwd(m) : TR_OK;
}

/* Each MTP depth's ids and targets, shifted on the host and copied to the slot (ids are the
 * stage's own: the loss stage under PP receives them as it receives the targets). */
static tr_status mtp_tokens(tr_model *m, const int32_t *ids, const int32_t *targets) {
    int D = m->spec.mtp_layers, rows = m->batch * m->spec.seq;
    if (D <= 0) return TR_OK;
    if (!ids) return TR_ERR_INVALID;
    int32_t *tmp = malloc(2 * (size_t)rows * sizeof *tmp);
    if (!tmp) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int d = 0; d < D && st == TR_OK; d++) {
        tr_mtp_shift(ids, tmp, m->batch, m->spec.seq, d + 1, 0);
        m->mtp[d].n_valid = tr_mtp_shift(targets, tmp + rows, m->batch, m->spec.seq, d + 1, -1);
        st = tr_device_to_device(m->dev, m->mtp[d].ids, tmp, (size_t)rows * sizeof *tmp);
        if (st == TR_OK)
            st = tr_device_to_device(m->dev, m->mtp[d].targets, tmp + rows,
                                     (size_t)rows * sizeof *tmp);
    }
    free(tmp);
    return st;
}

tr_status tr_model_select_slot(tr_model *m, int part, int slot) {
    if (part < 0 || part >= m->n_parts) return TR_ERR_INVALID;
    const tr_model_part *p = &m->parts[part];
    if (slot < 0 || slot >= (p->slots > 0 ? p->slots : 1)) return TR_ERR_INVALID;
    const tr_slot_acts *a = &m->slot_acts[m->slot_start[part] + slot];
    m->moe_slot = slot;
    for (int i = 0; i < p->num_layers; i++) m->acts[p->first_layer + i] = a->layers[i];
    for (int d = 0; p->has_loss && d < m->spec.mtp_layers; d++)
        m->acts[m->spec.num_layers + d] = a->layers[p->num_layers + d];
    m->mtp = a->mtp;
    m->x_final = a->x_final;
    m->lnf = a->lnf;
    m->lnf_mean = a->lnf_mean;
    m->lnf_rstd = a->lnf_rstd;
    m->lnf_full = a->lnf_full;
    m->lnf_h = a->lnf_h;
    m->logits = a->logits;
    m->ce_stats = a->ce_stats;
    m->losses = a->losses;
    m->dloss = a->dloss;
    m->ids = a->ids;
    m->targets = a->targets;
    return TR_OK;
}

tr_status tr_model_forward_part(tr_model *m, int part_index, int slot, const int32_t *ids,
                                const int32_t *targets, const float *x_in, float *x_out,
                                float *loss) {
    TR_TRY(tr_model_select_slot(m, part_index, slot));
    TR_TRY(tr_model_slot_sequences(m, part_index, slot, true));
    const tr_model_part *part = &m->parts[part_index];
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m);
    int64_t n = (int64_t)lrows * s->hidden;
    int first = part->first_layer, last = part->first_layer + part->num_layers;
    int vocab = m->full.vocab;
    int real = m->full.vocab_real > 0 ? m->full.vocab_real : vocab;
    if ((!part->has_embedding && !x_in) || (!part->has_loss && !x_out)) return TR_ERR_INVALID;
    if (part->has_embedding)
        for (int r = 0; r < rows; r++)
            if (ids[r] < 0 || ids[r] >= real) return TR_ERR_INVALID;
    int64_t valid = 0;
    if (part->has_loss)
        for (int r = 0; r < rows; r++) {
            if (targets[r] >= real) return TR_ERR_INVALID;
            valid += targets[r] >= 0;
        }
    /* The residual stream: into the first layer's kept input, and out of the last layer into
     * the head's kept input or straight into x_out (nothing of a stage's output is needed for
     * its backward). */
    float *end = part->has_loss ? m->x_final : x_out;
    float *start = first < last ? m->acts[first].x_in : end;
    if (part->has_embedding) {
        TR_TRY(tr_device_to_device(m->dev, m->ids, ids, (size_t)rows * sizeof *ids));
        TR_TRY(embed_fwd(m, start));
    } else {
        TR_TRY(tr_model_copy(m, start, x_in, n));
    }
    for (int i = first; i < last; i++) {
        TR_TRY(tr_model_before_params(m, i));
        TR_TRY(tr_model_layer_fwd(m, i, m->acts[i].x_in, i + 1 < last ? m->acts[i + 1].x_in : end));
    }
    tr_slot_acts *a = &m->slot_acts[m->slot_start[part_index] + slot];
    a->dropout_round = m->dropout_round;
    if (part->has_loss) {
        if (x_out) TR_TRY(tr_model_copy(m, x_out, m->x_final, n));
        TR_TRY(tr_device_to_device(m->dev, m->targets, targets, (size_t)rows * sizeof *targets));
        m->n_valid = valid;
        TR_TRY(mtp_tokens(m, ids, targets));
        TR_TRY(head_fwd(m, loss));
        a->n_valid = m->n_valid;
    }
    return TR_OK;
}

tr_status tr_model_forward(tr_model *m, const int32_t *ids, const int32_t *targets, float *loss) {
    if (m->n_parts != 1 || !m->parts[0].has_embedding || !m->parts[0].has_loss || !loss)
        return TR_ERR_INVALID;
    if (!m->dev || tr_device_host_visible(m->dev))
        return tr_model_forward_part(m, 0, 0, ids, targets, NULL, NULL, loss);
    TR_TRY(tr_model_forward_part(m, 0, 0, ids, targets, NULL, NULL, m->loss_dev));
    return tr_device_to_host(m->dev, loss, m->loss_dev, sizeof *loss);
}
