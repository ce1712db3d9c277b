/* What the model itself does for LoRA adapters (runtime/peft/lora.h builds the spec): the
 * adapters' input dropout, drawn per logical element. (The gradients the backward leaves in
 * frozen tensors are zeroed as they are reported final: runtime/model/hooks.c.) */
#include "runtime/model/internal.h"

bool tr_lora_dropout_on(const tr_model *m) {
    return m->spec.lora_dropout > 0.0f && m->training;
}

tr_status tr_lora_dropout(const tr_linear *l, float *y, const float *x, int rows, bool forward) {
    const tr_model *m = l->model;
    const tr_model_spec *f = &m->full;
    float p = m->spec.lora_dropout;
    /* Its own Philox key (the hidden dropout's counters would overlap), and one counter range
     * per (microbatch, layer, target) wide enough for any layer's full input. */
    uint64_t seed = m->dropout_seed ^ 0x4C6F524144524F50ull;
    int64_t widest = f->hidden > f->ffn ? f->hidden : f->ffn;
    if ((int64_t)f->heads * f->head_dim > widest) widest = (int64_t)f->heads * f->head_dim;
    uint64_t span = (uint64_t)rows * (uint64_t)widest;
    uint64_t sites = (uint64_t)f->num_layers * TR_LORA_TARGETS;
    uint64_t base = (m->dropout_round * sites + (uint64_t)l->lora_site) * span;
    bool shard = l->kind == TR_LINEAR_ROW && m->tp.size > 1;
    if (!shard)
        return forward ? m->ops->dropout_fwd(y, x, (int64_t)rows * l->in, p, seed, base)
                       : m->ops->dropout_bwd(y, x, (int64_t)rows * l->in, p, seed, base);
    int64_t full = (int64_t)l->in * m->tp.size, col0 = (int64_t)m->tp.rank * l->in;
    for (int r = 0; r < rows; r++) {
        int64_t at = (int64_t)r * l->in;
        uint64_t off = base + (uint64_t)((int64_t)r * full + col0);
        TR_TRY(forward ? m->ops->dropout_fwd(y + at, x + at, l->in, p, seed, off)
                       : m->ops->dropout_bwd(y + at, x + at, l->in, p, seed, off));
    }
    return TR_OK;
}
