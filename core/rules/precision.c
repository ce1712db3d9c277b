/* Rules on numeric precision (reference §3.1 step 18, §3.4). */
#include "core/rules/rule.h"

TR_RULE_FN(tr_check_model_fp16_bf16_exclusive) {
    if (!c->model.fp16 || !c->model.bf16) return;
    TR_FAIL("model.fp16,model.bf16", "choose one, e.g. mixed_precision.preset=bf16_mixed",
            "model.fp16 and model.bf16 cannot both be true");
}

TR_RULE_FN(tr_check_optimizer_fp16_bf16_exclusive) {
    if (!c->optimizer.fp16 || !c->optimizer.bf16) return;
    TR_FAIL("optimizer.fp16,optimizer.bf16", "choose one, e.g. mixed_precision.preset=bf16_mixed",
            "optimizer.fp16 and optimizer.bf16 cannot both be true");
}

TR_RULE_FN(tr_check_mixed_precision_flags_exclusive) {
    const tr_mixed_precision_config *m = &c->mixed_precision;
    if (m->fp32 + m->fp16 + m->bf16 <= 1) return;
    TR_FAIL("mixed_precision.fp32,mixed_precision.fp16,mixed_precision.bf16",
            "set only one of them, or use mixed_precision.preset",
            "at most one of mixed_precision.fp32 (%s), fp16 (%s) and bf16 (%s) may be true",
            m->fp32 ? "true" : "false", m->fp16 ? "true" : "false", m->bf16 ? "true" : "false");
}

TR_RULE_FN(tr_check_precision_aware_matches_model) {
    const tr_optimizer_config *o = &c->optimizer;
    const tr_model_config *m = &c->model;
    if (!o->use_precision_aware_optimizer) return;
    if (m->bf16 && !o->bf16)
        TR_FAIL("optimizer.bf16,model.bf16,optimizer.use_precision_aware_optimizer",
                "set optimizer.bf16=true",
                "optimizer.bf16 must be true when model.bf16 is true with the precision-aware "
                "optimizer");
    if (m->fp16 && !o->fp16)
        TR_FAIL("optimizer.fp16,model.fp16,optimizer.use_precision_aware_optimizer",
                "set optimizer.fp16=true",
                "optimizer.fp16 must be true when model.fp16 is true with the precision-aware "
                "optimizer");
    if (!m->bf16 && !m->fp16 && (o->bf16 || o->fp16))
        TR_FAIL("optimizer.bf16,optimizer.fp16,model.bf16,model.fp16,"
                "optimizer.use_precision_aware_optimizer",
                "set optimizer.bf16 and optimizer.fp16 to false for an fp32 model",
                "an fp32 model (model.bf16 and model.fp16 false) needs optimizer.bf16 and "
                "optimizer.fp16 false with the precision-aware optimizer");
}
