/* See runtime/peft/lora.h. */
#include "runtime/peft/lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/model/linear.h"

static const char *const target_names[TR_LORA_TARGETS] = {"linear_qkv", "linear_proj", "linear_fc1",
                                                          "linear_fc2"};

static int target_index(const char *name) {
    for (int t = 0; t < TR_LORA_TARGETS; t++)
        if (strcmp(name, target_names[t]) == 0) return t;
    return -1;
}

static int lora_init(int method) {
    switch (method) {
    case TR_LORAINIT_XAVIER:
        return TR_INIT_XAVIER;
    case TR_LORAINIT_NORMAL:
        return TR_INIT_NORMAL02;
    case TR_LORAINIT_KAIMING:
        return TR_INIT_KAIMING;
    default:
        return TR_INIT_ZERO;
    }
}

/* peft.target_modules by module name, or every linear layer but peft.exclude_modules. The
 * names were checked by tr_runtime_check (runtime.lora_modules); -1 for one it did not see. */
static int read_targets(const tr_peft_config *p, unsigned *targets) {
    bool exclude = p->target_modules.null || p->target_modules.n == 0;
    const tr_str_list *l = exclude ? &p->exclude_modules : &p->target_modules;
    *targets = exclude ? (1u << TR_LORA_TARGETS) - 1 : 0;
    for (int i = 0; !l->null && i < l->n; i++) {
        int t = target_index(l->v[i]);
        if (t < 0) return -1;
        if (exclude)
            *targets &= ~(1u << t);
        else
            *targets |= 1u << t;
    }
    return 0;
}

tr_status tr_lora_spec_from_config(const tr_config *c, tr_model_spec *s, tr_diags *d) {
    const tr_peft_config *p = &c->peft;
    s->lora_rank = 0;
    s->moe.lora_rank = 0;
    if (p->scheme < 0) return TR_OK;
    /* Post-dropout, DoRA with a dropout and module names the runtime does not know are refused
     * before this by tr_runtime_check (core/rules/runtime.c). */
    (void)d;
    unsigned targets = 0;
    if (read_targets(p, &targets) || !targets) return TR_ERR_INVALID;
    s->lora_rank = (int)p->dim;
    s->lora_targets = targets;
    s->lora_scale = (float)((double)p->alpha / (double)p->dim);
    s->lora_a_init = lora_init(p->lora_A_init_method);
    s->lora_b_init = lora_init(p->lora_B_init_method);
    s->lora_dropout = (float)p->dropout;
    s->lora_dora = p->scheme == TR_PEFT_DORA;
    /* MoE layers: adapters on the experts' and the shared expert's fc1 / fc2 (DoRA there is
     * refused by runtime.moe_peft) */
    s->moe.lora_rank = s->moe.experts > 0 ? s->lora_rank : 0;
    s->moe.lora_fc1 = (targets >> TR_LORA_FC1) & 1u;
    s->moe.lora_fc2 = (targets >> TR_LORA_FC2) & 1u;
    s->moe.lora_scale = s->lora_scale;
    s->moe.lora_dropout = s->lora_dropout;
    return TR_OK;
}

bool tr_lora_is_adapter(const char *name) {
    return strstr(name, ".adapter.") != NULL;
}

/* DoRA's merge: row j of the merged V = W + scale B A times m[j] / ||V_j||, so the base layer
 * computes (m / ||V||) (x V^T) + b as the adapted one does. */
static void scale_rows_to(const float *mag, float *v, int rows, int cols) {
    for (int j = 0; j < rows; j++) {
        float *row = v + (int64_t)j * cols;
        double sq = 0.0;
        for (int c = 0; c < cols; c++) sq += (double)row[c] * row[c];
        float s = mag[j] * (1.0f / sqrtf((float)sq));
        for (int c = 0; c < cols; c++) row[c] *= s;
    }
}

/* The MoE layers' adapters (runtime/moe/lora.c), one per expert's or shared expert's linear
 * layer <layer>.adapter.linear_in / linear_out beside its <layer>.weight. */
static tr_status merge_experts(const tr_model *lora, tr_model *base) {
    static const char in_sfx[] = ".adapter.linear_in.weight";
    for (int i = 0; i < lora->n_info; i++) {
        const tr_param_info *a = &lora->info[i];
        size_t len = strlen(a->name), sl = sizeof in_sfx - 1;
        if (!strstr(a->name, ".mlp.experts.") && !strstr(a->name, ".mlp.shared_experts.")) continue;
        if (len < sl || strcmp(a->name + len - sl, in_sfx) != 0) continue;
        char name[sizeof a->name + 16];
        snprintf(name, sizeof name, "%.*s.adapter.linear_out.weight", (int)(len - sl), a->name);
        const tr_param_info *b = tr_model_find_param(lora, name);
        snprintf(name, sizeof name, "%.*s.weight", (int)(len - sl), a->name);
        const tr_param_info *w = tr_model_find_param(base, name);
        if (!b || !w || b->cols != a->rows || w->rows != b->rows || w->cols != a->cols)
            return TR_ERR_INVALID;
        TR_TRY(lora->ops->gemm(TR_NOTRANS, TR_NOTRANS, w->rows, w->cols, a->rows,
                               lora->spec.lora_scale, lora->params + b->offset, b->cols,
                               lora->params + a->offset, a->cols, 1.0f, base->params + w->offset,
                               w->cols));
    }
    return TR_OK;
}

tr_status tr_lora_merge(const tr_model *lora, tr_model *base) {
    if (!lora->spec.lora_rank || base->spec.lora_rank || lora->tp.size != 1 || base->tp.size != 1)
        return TR_ERR_INVALID;
    /* An offline tool over host-visible models: it copies tensors with memcpy. */
    if (!tr_device_host_visible(lora->dev) || !tr_device_host_visible(base->dev))
        return TR_ERR_INVALID;
    for (int i = 0; i < base->n_info; i++) {
        const tr_param_info *b = &base->info[i];
        const tr_param_info *l = tr_model_find_param(lora, b->name);
        if (!l || l->numel != b->numel) return TR_ERR_INVALID;
        memcpy(base->params + b->offset, lora->params + l->offset,
               (size_t)b->numel * sizeof(float));
    }
    int r = lora->spec.lora_rank;
    for (int layer = 0; layer < lora->spec.num_layers; layer++)
        for (int t = 0; t < TR_LORA_TARGETS; t++) {
            const tr_layer_views *v = &lora->p.layers[layer];
            if (!v->lora_a[t]) continue;
            tr_linear w = tr_model_layer_linear(base, layer, (tr_model_linear_id)t);
            /* W [out, in] += scale * B [out, r] A [r, in] */
            TR_TRY(lora->ops->gemm(TR_NOTRANS, TR_NOTRANS, w.out, w.in, r, lora->spec.lora_scale,
                                   v->lora_b[t], r, v->lora_a[t], w.in, 1.0f, (float *)w.w, w.in));
            if (v->lora_m[t]) scale_rows_to(v->lora_m[t], (float *)w.w, w.out, w.in);
        }
    TR_TRY(merge_experts(lora, base));
    tr_model_params_changed(base);
    return TR_OK;
}
