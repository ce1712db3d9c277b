/* Backward pass of the last forward. Parameter gradients ACCUMULATE into the flat gradient
 * buffer (the ops' convention), so microbatches of one step simply add up. */
#include "runtime/context_parallel/cp.h"
#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

static tr_status norm_bwd(const tr_model *m, float *dx, float *dw, float *db, const float *dy,
                          const float *x, const float *w, const float *mean, const float *rstd,
                          int rows) {
    const tr_model_spec *s = &m->spec;
    if (s->layernorm)
        return m->ops->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, rows, s->hidden,
                                     s->zero_centered);
    return m->ops->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, s->hidden, s->zero_centered);
}

/* The gradient entering a residual branch: dy itself, or through the branch's dropout mask. */
static const float *branch_grad(const tr_model *m, const float *dy, float *scratch, int site) {
    if (m->spec.hidden_dropout <= 0.0f || !m->training) return dy;
    return tr_model_dropout(m, scratch, dy, site, false) == TR_OK ? scratch : NULL;
}

/* Backward of a column-parallel layer fed by a norm, whose input was saved in fp32 (x) or in
 * half precision (half, when not NULL); its input gradient goes to the scratch dtmp. */
static tr_status linear_input_bwd(const tr_model *m, const tr_linear *l, const float *x,
                                  const uint16_t *half, const float *dy, int rows) {
    if (half) return tr_linear_bwd_half(m->ops, l, half, dy, m->dtmp, rows);
    return tr_linear_bwd(m->ops, l, x, dy, m->dtmp, rows);
}

/* An MoE layer's MLP branch: dL/d(pre-MLP norm output) into the scratch dtmp. The balancing
 * losses' gradients take the main loss's scale (Megatron's MoEAuxLossAutoScaler): per token, the
 * microbatch's tokens (the whole sequences' under CP), since the gradients are divided by the
 * global token count later; else times CP, as the reduction over DP x CP divides by it while
 * the CP ranks' balancing losses only add up to the whole. */
static tr_status moe_bwd(const tr_model *m, int i, const float *dy) {
    int cp = m->spec.cp > 1 ? m->spec.cp : 1;
    int rows = m->batch * m->spec.seq * cp;
    float scale = m->spec.moe.per_token ? (float)rows : m->moe_loss_scale * (float)cp;
    if (m->grad_loss_scale != 0.0f) scale *= m->grad_loss_scale;
    return tr_moe_backward(m->moe[i], m->moe_slot, dy, m->dtmp, scale);
}

/* The half of eh_proj's input gradient from column `col` (0: the embedding's, hidden: the
 * hidden state's) into dtmp: summed over TP already, or reduce-scattered to this rank's rows
 * under sequence parallelism. */
static tr_status mtp_cat_half(const tr_model *m, int col) {
    int rows = m->batch * m->spec.seq, C = m->spec.hidden;
    const float *dcat = m->mtp_sc.dcat + col;
    if (!m->spec.sequence_parallel) return m->ops->copy_2d(m->dtmp, C, dcat, 2 * C, rows, C);
    TR_TRY(m->ops->copy_2d(m->sp_full, C, dcat, 2 * C, rows, C));
    return tr_tp_seq_reduce_scatter(m, m->sp_full, m->dtmp, C);
}

static tr_status layer_bwd(tr_model *m, int i) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    const tr_layer_views *p = &m->p.layers[i];
    const tr_layer_views *g = &m->g.layers[i];
    const tr_layer_acts *a = &m->acts[i];
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m);
    bool sp = s->sequence_parallel;

    /* MLP branch: m->dx holds dL/d(layer output). */
    const float *dy = branch_grad(m, m->dx, m->dtmp, 2 + 2 * i);
    if (!dy) return TR_ERR_INVALID;
    if (m->moe && m->moe[i]) {
        TR_TRY(moe_bwd(m, i, dy));
    } else {
        tr_linear fc2 = tr_model_layer_linear(m, i, TR_LIN_FC2);
        if (a->act_h)
            TR_TRY(tr_linear_bwd_half(ops, &fc2, a->act_h, dy, m->dact, rows));
        else
            TR_TRY(tr_linear_bwd(ops, &fc2, a->act, dy, m->dact, rows));
        if (s->swiglu)
            TR_TRY(ops->swiglu_bwd(m->dbig, m->dact, a->fc1, rows, s->ffn));
        else
            TR_TRY(ops->gelu_bwd(m->dbig, m->dact, a->fc1, (int64_t)rows * s->ffn, s->gelu_tanh));
        tr_linear fc1 = tr_model_layer_linear(m, i, TR_LIN_FC1);
        TR_TRY(linear_input_bwd(m, &fc1, sp ? a->ln2_full : a->ln2, a->ln2_h, m->dbig, rows));
    }
    TR_TRY(norm_bwd(m, m->dx, g->ln2_w, g->ln2_b, m->dtmp, a->x_mid, p->ln2_w, a->ln2_mean,
                    a->ln2_rstd, lrows));

    /* Attention branch: m->dx now holds dL/d(x_mid). */
    dy = branch_grad(m, m->dx, m->dtmp, 1 + 2 * i);
    if (!dy) return TR_ERR_INVALID;
    tr_linear proj = tr_model_layer_linear(m, i, TR_LIN_PROJ);
    float *dattn = m->dbig;
    TR_TRY(tr_linear_bwd(ops, &proj, a->attn, dy, dattn, rows));
    if (s->mla.on) { /* the input gradient comes out whole on every rank: SP keeps its rows */
        tr_mla_run run = tr_model_mla_run(m, i);
        TR_TRY(tr_mla_bwd(&run, &p->mla, &g->mla, &a->mla, sp ? a->ln1_full : a->ln1, dattn,
                          sp ? m->sp_full : m->dtmp));
        if (sp) TR_TRY(tr_tp_seq_rows(m, m->sp_full, m->dtmp, s->hidden));
    } else {
        tr_attn_desc ad = tr_model_layer_attn_desc(m, i);
        if (m->cp)
            TR_TRY(tr_cp_attn_bwd(m->cp, m->dq, m->dk, m->dv, dattn, a->q, a->k, a->v, a->attn,
                                  a->lse, &ad));
        else
            TR_TRY(ops->attention_bwd(m->dq, m->dk, m->dv, dattn, a->q, a->k, a->v, a->attn, a->lse,
                                      &ad));
        if (s->rope) {
            TR_TRY(tr_model_rope(m, m->dq, s->heads, false));
            TR_TRY(tr_model_rope(m, m->dk, s->groups, false));
        }
        const float *dq = m->dq, *dk = m->dk;
        if (s->qk_norm) TR_TRY(tr_model_qk_norm_bwd(m, i, &dq, &dk));
        TR_TRY(tr_model_qkv_merge(m, m->dbig, dq, dk, m->dv, rows));
        tr_linear qkv = tr_model_layer_linear(m, i, TR_LIN_QKV);
        TR_TRY(linear_input_bwd(m, &qkv, sp ? a->ln1_full : a->ln1, a->ln1_h, m->dbig, rows));
    }
    return norm_bwd(m, m->dx, g->ln1_w, g->ln1_b, m->dtmp, a->x_in, p->ln1_w, a->ln1_mean,
                    a->ln1_rstd, lrows);
}

/* Multi-token prediction's backward, last depth first (runtime/mtp/mtp.h): each depth's loss
 * (scaled by mtp_scale over its own trained tokens) through the shared output layer, its final
 * norm, transformer layer, projection and the two norms, into the shared embedding and the
 * previous depth's hidden state; leaves dL/d(main final norm output) in mtp_sc.dh. Under
 * sequence parallelism on this rank's rows, as the forward: eh_proj's output gradient gathered,
 * each half of its input gradient reduce-scattered. */
static tr_status mtp_bwd(tr_model *m, int part, float loss_scale) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    const tr_mtp_scratch *sc = &m->mtp_sc;
    bool sp = s->sequence_parallel;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m), L = s->num_layers, C = s->hidden;
    int vs = m->tp.rank * s->vocab;
    int64_t n = (int64_t)lrows * C;
    tr_mtp_run run = tr_model_mtp_run(m);
    tr_linear out = tr_model_output_linear(m);
    TR_TRY(ops->fill(sc->dh, n, 0.0f));
    for (int d = s->mtp_layers - 1; d >= 0; d--) {
        const tr_mtp_acts *a = &m->mtp[d];
        const tr_layer_views *p = &m->p.layers[L + d], *g = &m->g.layers[L + d];
        float per_token = a->n_valid ? loss_scale * s->mtp_scale / (float)a->n_valid : 0.0f;
        if (m->grad_loss_scale != 0.0f) per_token *= m->grad_loss_scale;
        TR_TRY(ops->fill(a->dloss, rows, per_token));
        TR_TRY(ops->ce_bwd(a->logits, a->ce_stats, a->targets, a->dloss, rows, s->vocab, vs));
        TR_TRY(tr_linear_bwd(ops, &out, sp ? a->h_full : a->h, a->logits, m->dtmp, rows));
        if (d + 1 < s->mtp_layers) TR_TRY(ops->add(m->dtmp, sc->dh, n)); /* from depth d + 1 */
        TR_TRY(ops->fill(m->dx, n, 0.0f));
        TR_TRY(norm_bwd(m, m->dx, g->mtp_fnorm_w, g->mtp_fnorm_b, m->dtmp, a->y, p->mtp_fnorm_w,
                        a->h_mean, a->h_rstd, lrows));
        TR_TRY(tr_model_recompute(m, part, L + d));
        TR_TRY(layer_bwd(m, L + d));
        const float *dproj = m->dx;
        if (sp) {
            TR_TRY(tr_tp_seq_gather(m, m->dx, m->sp_full, C));
            dproj = m->sp_full;
        }
        TR_TRY(tr_mtp_proj_bwd(&run, p->mtp_eh_w, g->mtp_eh_w, a, dproj));
        /* [embedding | hidden] halves of the projection's input gradient */
        TR_TRY(mtp_cat_half(m, 0));
        TR_TRY(ops->fill(sc->de, n, 0.0f));
        TR_TRY(norm_bwd(m, sc->de, g->mtp_enorm_w, g->mtp_enorm_b, m->dtmp, a->emb, p->mtp_enorm_w,
                        a->en_mean, a->en_rstd, lrows));
        TR_TRY(tr_model_dropout(m, sc->de, sc->de, 2 * (L + s->mtp_layers) + 1 + d, false));
        const float *demb = sc->de;
        if (sp) { /* the lookup's shard sees every token */
            TR_TRY(tr_tp_seq_gather(m, sc->de, m->sp_full, C));
            demb = m->sp_full;
        }
        TR_TRY(ops->embedding_bwd(m->g.mtp_emb, a->ids, demb, rows, C, vs, vs + s->vocab));
        TR_TRY(mtp_cat_half(m, C));
        const float *hin = d ? m->mtp[d - 1].h : m->lnf;
        TR_TRY(ops->fill(sc->dh, n, 0.0f));
        TR_TRY(norm_bwd(m, sc->dh, g->mtp_hnorm_w, g->mtp_hnorm_b, m->dtmp, hin, p->mtp_hnorm_w,
                        a->hn_mean, a->hn_rstd, lrows));
        TR_TRY(tr_model_grads_done(m, L + d));
    }
    return TR_OK;
}

/* The loss through the output layer and the final norm: leaves dL/d(x_final) in m->dx. */
static tr_status head_bwd(tr_model *m, int part, float loss_scale) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m);
    int64_t n = (int64_t)lrows * s->hidden;
    bool sp = s->sequence_parallel;
    if (s->mtp_layers) TR_TRY(mtp_bwd(m, part, loss_scale)); /* before the main head: scratch */
    float per_token = m->n_valid ? loss_scale / (float)m->n_valid : 0.0f;
    if (m->grad_loss_scale != 0.0f) per_token *= m->grad_loss_scale;
    /* ce_bwd zeroes the rows of ignored targets whatever their dloss. */
    TR_TRY(ops->fill(m->dloss, rows, per_token));
    int vocab_start = m->tp.rank * s->vocab;
    TR_TRY(ops->ce_bwd(m->logits, m->ce_stats, m->targets, m->dloss, rows, s->vocab, vocab_start));
    tr_linear out = tr_model_output_linear(m);
    bool kept = false; /* model.defer_embedding_wgrad_compute: dW waits for the drain */
    TR_TRY(tr_model_defer_keep(m, &kept));
    if (kept) out.dw = NULL;
    TR_TRY(linear_input_bwd(m, &out, sp ? m->lnf_full : m->lnf, m->lnf_h, m->logits, rows));
    if (s->mtp_layers) TR_TRY(ops->add(m->dtmp, m->mtp_sc.dh, n)); /* MTP's use of the output */
    TR_TRY(ops->fill(m->dx, n, 0.0f));
    TR_TRY(norm_bwd(m, m->dx, m->g.final_w, m->g.final_b, m->dtmp, m->x_final, m->p.final_w,
                    m->lnf_mean, m->lnf_rstd, lrows));
    return tr_model_grads_done(m, TR_MODEL_AT_HEAD);
}

/* m->dx (dL/d(embedding output)) into the embedding tables. */
static tr_status embed_bwd(tr_model *m) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq;
    bool sp = s->sequence_parallel;
    int vocab_start = m->tp.rank * s->vocab;
    TR_TRY(tr_model_dropout(m, m->dx, m->dx, 0, false));
    if (s->learned_pos) TR_TRY(tr_model_pos_embedding(m, m->dx, false));
    const float *demb = m->dx;
    if (sp) { /* the lookup's shard sees every token of the microbatch */
        TR_TRY(tr_tp_seq_gather(m, m->dx, m->sp_full, s->hidden));
        demb = m->sp_full;
    }
    TR_TRY(ops->embedding_bwd(m->g.word_emb, m->ids, demb, rows, s->hidden, vocab_start,
                              vocab_start + s->vocab));
    return tr_model_grads_done(m, TR_MODEL_AT_EMBEDDING);
}

tr_status tr_model_backward_part(tr_model *m, int part_index, int slot, float loss_scale,
                                 const float *dy, float *dx_out) {
    TR_TRY(tr_model_select_slot(m, part_index, slot));
    TR_TRY(tr_model_slot_sequences(m, part_index, slot, false));
    const tr_model_part *part = &m->parts[part_index];
    int64_t n = (int64_t)tr_tp_local_rows(m) * m->spec.hidden;
    if ((!part->has_loss && !dy) || (!part->has_embedding && !dx_out)) return TR_ERR_INVALID;
    /* The forward's dropout masks and token count, whatever ran since. */
    const tr_slot_acts *a = &m->slot_acts[m->slot_start[part_index] + slot];
    m->dropout_round = a->dropout_round;
    m->n_valid = a->n_valid;
    m->moe_loss_scale = loss_scale;
    if (part->has_loss)
        TR_TRY(head_bwd(m, part_index, loss_scale));
    else
        TR_TRY(tr_model_copy(m, m->dx, dy, n));
    for (int i = part->first_layer + part->num_layers - 1; i >= part->first_layer; i--) {
        TR_TRY(tr_model_recompute(m, part_index, i));
        TR_TRY(layer_bwd(m, i));
        TR_TRY(tr_model_grads_done(m, i));
    }
    if (part->has_embedding)
        TR_TRY(embed_bwd(m));
    else
        TR_TRY(tr_model_copy(m, dx_out, m->dx, n));
    /* (LoRA: the frozen tensors' gradients were zeroed as each was reported final, before any
     * bucket holding them started: nothing may write a started bucket.) */
    return TR_OK;
}

tr_status tr_model_backward(tr_model *m, float loss_scale) {
    if (m->n_parts != 1 || !m->parts[0].has_embedding || !m->parts[0].has_loss)
        return TR_ERR_INVALID;
    return tr_model_backward_part(m, 0, 0, loss_scale, NULL, NULL);
}
