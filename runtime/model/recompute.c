/* Activation recomputation with Megatron-Core's semantics (TransformerBlock's checkpointed
 * forward, the selective modules of TransformerLayer): which tensors a (part, slot) keeps per
 * layer, and the forward pieces its backward reruns to get the others back. The rerun reads
 * the same inputs, weights, dropout round and sequence layout as the forward and calls the same
 * ops in the same order, so it writes the same bits: losses and gradients are those of the run
 * that keeps everything. */
#include "runtime/model/internal.h"

/* Full recomputation: the run of layers recomputed together that `layer` (of part p) belongs
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
    if (s->recompute == TR_RECOMPUTE_SELECTIVE) {
        unsigned mods = s->recompute_modules, d = 0;
        if (mods & (1u << TR_RC_MOD_CORE_ATTN)) d |= TR_RC_ATTN;
        if (mods & (1u << TR_RC_MOD_MLP)) d |= TR_RC_MLP;
        if (mods & (1u << TR_RC_MOD_LAYERNORM)) d |= TR_RC_NORMS;
        return d;
    }
    int first = 0;
    if (!full_run(s, &m->parts[part], layer, &first)) return 0;
    /* Only the run's input is kept; each layer of the run has its own set, because the
     * backward of the run needs all of them after one rerun of its forward. */
    *set = layer - first;
    return TR_RC_ALL & ~(layer == first ? (unsigned)TR_RC_X_IN : 0u);
}

int tr_model_rc_sets(const tr_model *m) {
    const tr_model_spec *s = &m->spec;
    int most = 0;
    for (int k = 0; k < m->n_parts; k++)
        if (m->parts[k].num_layers > most) most = m->parts[k].num_layers;
    if (s->recompute == TR_RECOMPUTE_SELECTIVE) return s->recompute_modules && most ? 1 : 0;
    if (s->recompute != TR_RECOMPUTE_FULL || s->recompute_layers <= 0) return 0;
    int n = s->recompute_block ? 1 : s->recompute_layers;
    return n < most ? n : most;
}

/* Selective: the norms from the kept residual stream (x_in, x_mid), fc1 and the activation
 * from the kept MLP input, the attention output and lse from the kept q, k, v. In this order,
 * as the MLP recompute reads a recomputed norm output. */
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
    if (mods & (1u << TR_RC_MOD_MLP)) {
        tr_linear fc1 = tr_model_layer_linear(m, layer, TR_LIN_FC1);
        int rows = m->batch * s->seq;
        if (a->ln2_h)
            TR_TRY(tr_linear_fwd_half(m->ops, &fc1, a->ln2_h, a->fc1, rows));
        else
            TR_TRY(tr_linear_fwd(m->ops, &fc1, s->sequence_parallel ? a->ln2_full : a->ln2, a->fc1,
                                 rows));
        TR_TRY(tr_model_mlp_act_fwd(m, a));
    }
    if (mods & (1u << TR_RC_MOD_CORE_ATTN)) TR_TRY(tr_model_core_attn_fwd(m, a));
    return TR_OK;
}

tr_status tr_model_recompute(tr_model *m, int part, int layer) {
    if (m->spec.recompute == TR_RECOMPUTE_SELECTIVE) return recompute_modules(m, layer);
    int first = 0, end = full_run(&m->spec, &m->parts[part], layer, &first);
    /* The backward walks down: the run is rerun when its last layer is reached, and its other
     * layers then find their sets filled. The run's last layer stops before fc2, whose output
     * (the next run's kept input) nothing needs again. */
    if (end != layer + 1) return TR_OK;
    for (int j = first; j < end; j++)
        TR_TRY(tr_model_layer_fwd(m, j, m->acts[j].x_in, j + 1 < end ? m->acts[j + 1].x_in : NULL));
    return TR_OK;
}
