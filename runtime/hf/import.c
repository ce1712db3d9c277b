/* Filling a model from a checkpoint's weights (runtime/hf/hf.h): each parameter element of this
 * rank is found from its position in the logical (unsharded) tensor, so a TP shard or a pipeline
 * stage reads exactly its own elements; what each position holds is the architecture's map. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/hf/internal.h"

tr_hf_shape tr_hf_shape_of(const tr_model_spec *f) {
    return (tr_hf_shape){.hidden = f->hidden,
                         .heads = f->heads,
                         .groups = f->groups,
                         .head_dim = f->head_dim,
                         .ffn = f->ffn,
                         .vocab = f->vocab,
                         .layers = f->num_layers,
                         .seq = f->seq,
                         .hf_vocab = f->vocab_real ? f->vocab_real : f->vocab,
                         .tied = f->tied,
                         .qk_norm = f->qk_norm,
                         .moe = f->moe,
                         .mla = f->mla,
                         .mtp = f->mtp_layers};
}

static const tr_hf_arch *arch_named(const char *name) {
    static const tr_hf_arch *const all[] = {&tr_hf_arch_llama,     &tr_hf_arch_qwen3,
                                            &tr_hf_arch_gpt2,      &tr_hf_arch_mixtral,
                                            &tr_hf_arch_qwen3_moe, &tr_hf_arch_deepseek_v3};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

bool tr_hf_architecture_known(const char *name) {
    return arch_named(name) != NULL;
}

tr_status tr_hf_import(tr_model *m, const tr_hf_weights *w, tr_diags *d) {
    const tr_hf_arch *a = arch_named(w->architecture);
    if (!a)
        return tr_diag_add(
            d, TR_SEV_ERROR, "hf.architecture", NULL, NULL,
            "Trestle imports LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, "
            "MixtralForCausalLM, Qwen3MoeForCausalLM and DeepseekV3ForCausalLM so far",
            "architecture %s is not one Trestle maps",
            w->architecture ? w->architecture : "(none given)");
    const tr_model_spec *f = &m->full;
    tr_hf_shape k = tr_hf_shape_of(f);
    for (int fi = 0; fi < w->n; fi++)
        for (int i = 0; i < w->files[fi].n; i++)
            if (!a->known(w->files[fi].t[i].name, &k))
                return tr_hf_tensor_error(d, w->files[fi].t[i].name,
                                          "the model config.json describes has no place for it");
    bool direct = tr_device_host_visible(m->dev);
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        if (strstr(p->name, ".adapter.")) continue; /* LoRA adapters start from their init */
        tr_hf_source s;
        TR_TRY(a->source(p->name, &k, w, &s, d));
        float *dst = direct ? m->params + p->offset
                            : malloc((size_t)(p->numel ? p->numel : 1) * sizeof *dst);
        if (!dst) return TR_ERR_NOMEM;
        for (int64_t e = 0, n; e < p->numel; e += n) {
            int64_t at = tr_model_logical_index(m, p, e), idx = 0;
            n = tr_hf_row_run(a, &s, tr_model_logical_run(p, e));
            int which = a->locate(&s, &k, at / p->full_cols, at % p->full_cols, &idx);
            if (which < 0)
                memset(dst + e, 0, (size_t)n * sizeof *dst);
            else
                tr_hf_values(s.t[which], idx, n, dst + e);
        }
        if (direct) continue;
        tr_status st =
            tr_device_to_device(m->dev, m->params + p->offset, dst, (size_t)p->numel * sizeof *dst);
        free(dst);
        TR_TRY(st);
    }
    tr_model_params_changed(m);
    return TR_OK;
}
