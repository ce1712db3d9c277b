/* Activation recomputation with Megatron-Core's semantics (TransformerBlock's checkpointed
 * forward, the selective modules of TransformerLayer): the forward pieces a backward reruns to
 * get back what its (part, slot) did not keep (which tensors those are: runtime/model/acts.c). The
 * rerun reads the same inputs, weights, dropout round and sequence layout as the forward and calls
 * the same ops in the same order, so it writes the same bits: losses and gradients are those of the
 * run that keeps everything. */
#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

/* Selective: the norms from the kept residual stream (x_in, x_mid), fc1 and the activation
 * from the kept MLP input, MLA's q, k, v from its kept latents, the attention output and lse
 * from the kept q, k, v. In this order, as each reads what an earlier one may recompute. */
static tr_status recompute_modules(tr_model *m, int layer) {
    const tr_model_spec *s = &m->spec;
    const tr_layer_acts *a = &m->acts[layer];
    const tr_layer_views *p = &m->p.layers[layer];
    unsigned mods = s->recompute_modules;
    const float *in;
    if (mods & (1u << TR_RC_MOD_LAYERNORM)) {
        TR_TRY(tr_model_norm_input(m, a->ln1, a->ln1_full, a->ln1_h, a->ln1_mean, a->ln1_rstd,
                                   a->x_in, p->ln1_w, p->ln1_b, &in));
        TR_TRY(tr_model_norm_input(m, a->ln2, a->ln2_full, a->ln2_h, a->ln2_mean, a->ln2_rstd,
                                   a->x_mid, p->ln2_w, p->ln2_b, &in));
    }
    if (m->moe && m->moe[layer]) { /* Megatron's `mlp` leaves an MoE layer to its modules */
        const tr_layer_views *pv = &m->p.layers[layer];
        tr_moe_layer *L = m->moe[layer];
        int rows = tr_tp_local_rows(m);
        /* `moe`: the layer from the pre-MLP norm of the kept x_mid, as the forward feeds it */
        if (mods & (1u << TR_RC_MOD_MOE))
            TR_TRY(tr_model_norm_fwd(m, m->dtmp, a->ln2_mean, a->ln2_rstd, a->x_mid, pv->ln2_w,
                                     pv->ln2_b, rows));
        TR_TRY(tr_moe_recompute(L, m->moe_slot, m->dtmp, NULL, m->dropout_seed, m->dropout_round));
    } else if (mods & (1u << TR_RC_MOD_MLP)) {
        tr_linear fc1 = tr_model_layer_linear(m, layer, TR_LIN_FC1);
        int rows = m->batch * s->seq;
        if (a->ln2_h)
            TR_TRY(tr_linear_fwd_half(m->ops, &fc1, a->ln2_h, a->fc1, rows));
        else
            TR_TRY(tr_linear_fwd(m->ops, &fc1, s->sequence_parallel ? a->ln2_full : a->ln2, a->fc1,
                                 rows));
        TR_TRY(tr_model_mlp_act_fwd(m, a));
    }
    if (s->mla.on) { /* the operands from the kept latents, then the attention from them */
        tr_mla_run run = tr_model_mla_run(m, layer);
        const float *x = s->sequence_parallel ? a->ln1_full : a->ln1;
        if (mods & (1u << TR_RC_MOD_MLA_UP_PROJ)) TR_TRY(tr_mla_up_fwd(&run, &p->mla, &a->mla, x));
        if (mods & (1u << TR_RC_MOD_CORE_ATTN)) TR_TRY(tr_mla_attn_fwd(&run, &a->mla, a->attn));
        return TR_OK;
    }
    if (mods & (1u << TR_RC_MOD_CORE_ATTN)) TR_TRY(tr_model_core_attn_fwd(m, layer, a));
    return TR_OK;
}

tr_status tr_model_recompute(tr_model *m, int part, int layer) {
    if (m->spec.recompute == TR_RECOMPUTE_SELECTIVE) return recompute_modules(m, layer);
    int set;
    if (layer >= m->spec.num_layers) /* an MTP depth's layer: a run of its own, when dropped */
    {
        if (!tr_model_rc_dropped(m, part, layer, &set)) return TR_OK;
        m->moe_rerun = true;
        tr_status st = tr_model_layer_fwd(m, layer, m->acts[layer].x_in, NULL);
        m->moe_rerun = false;
        return st;
    }
    int first = 0, end = tr_model_rc_run(m, part, layer, &first);
    /* The backward walks down: the run is rerun when its last layer is reached, and its other
     * layers then find their sets filled. The run's last layer stops before fc2, whose output
     * (the next run's kept input) nothing needs again. */
    if (end != layer + 1) return TR_OK;
    tr_status st = TR_OK;
    m->moe_rerun = true;
    for (int j = first; j < end && st == TR_OK; j++)
        st = tr_model_layer_fwd(m, j, m->acts[j].x_in, j + 1 < end ? m->acts[j + 1].x_in : NULL);
    m->moe_rerun = false;
    return st;
}
