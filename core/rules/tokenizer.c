/* Rules on the tokenizer and the vocabulary the model is built with (reference §2.9, §3.6). */
#include "core/rules/rule.h"

TR_RULE_FN(tr_check_tokenizer_type_set) {
    if (c->tokenizer.tokenizer_type >= 0) return;
    TR_FAIL("tokenizer.tokenizer_type", "set tokenizer.tokenizer_type, e.g. NullTokenizer",
            "tokenizer.tokenizer_type is not set");
}

TR_RULE_FN(tr_check_null_tokenizer_vocab) {
    const tr_tokenizer_config *t = &c->tokenizer;
    if (t->tokenizer_type != TR_TOKENIZER_NULL) return;
    if (!tr_is_set(t->vocab_size)) {
        TR_FAIL("tokenizer.vocab_size,tokenizer.tokenizer_type",
                "set tokenizer.vocab_size, e.g. 32000",
                "the NullTokenizer needs tokenizer.vocab_size");
        return;
    }
    if (tr_is_set(t->null_tokenizer_eod_id) && t->null_tokenizer_eod_id >= t->vocab_size)
        TR_FAIL("tokenizer.null_tokenizer_eod_id,tokenizer.vocab_size",
                "use an id below tokenizer.vocab_size or null",
                "tokenizer.null_tokenizer_eod_id (%lld) must be below tokenizer.vocab_size (%lld)",
                tr_ll(t->null_tokenizer_eod_id), tr_ll(t->vocab_size));
}

TR_RULE_FN(tr_check_gpt2_files) {
    const tr_tokenizer_config *t = &c->tokenizer;
    if (t->tokenizer_type != TR_TOKENIZER_GPT2BPE || (t->vocab_file && t->merge_file)) return;
    TR_FAIL("tokenizer.vocab_file,tokenizer.merge_file",
            "set tokenizer.vocab_file and tokenizer.merge_file",
            "the GPT2BPETokenizer needs tokenizer.vocab_file (%s) and tokenizer.merge_file (%s)",
            t->vocab_file ? "set" : "missing", t->merge_file ? "set" : "missing");
}

TR_RULE_FN(tr_check_tokenizer_model_file) {
    const tr_tokenizer_config *t = &c->tokenizer;
    int32_t k = t->tokenizer_type;
    if (t->tokenizer_model || (k != TR_TOKENIZER_HUGGINGFACE && k != TR_TOKENIZER_SENTENCEPIECE &&
                               k != TR_TOKENIZER_LLAMA2 && k != TR_TOKENIZER_TIKTOKEN))
        return;
    TR_FAIL("tokenizer.tokenizer_model,tokenizer.tokenizer_type",
            "set tokenizer.tokenizer_model to the tokenizer file or directory",
            "the %s needs tokenizer.tokenizer_model", tr_enum_str(&tr_enum_tokenizer_type, k));
}

TR_RULE_FN(tr_check_chat_template_exclusive) {
    if (!c->tokenizer.chat_template || !c->tokenizer.chat_template_path) return;
    TR_FAIL("tokenizer.chat_template,tokenizer.chat_template_path", "set only one of them",
            "tokenizer.chat_template and tokenizer.chat_template_path cannot both be set");
}

TR_RULE_FN(tr_check_model_vocab_covers_tokenizer) {
    const tr_tokenizer_config *t = &c->tokenizer;
    int64_t tok = t->tokenizer_type == TR_TOKENIZER_NULL         ? t->vocab_size
                  : t->tokenizer_type == TR_TOKENIZER_BYTE_LEVEL ? 256
                                                                 : TR_NULL_INT;
    int64_t m = c->model.vocab_size;
    if (!tr_is_set(tok) || !tr_is_set(m) || m >= tok) return;
    char hint[128];
    TR_FAIL("model.vocab_size,tokenizer.vocab_size",
            TR_FMT(hint, "set model.vocab_size >= %lld, or tokenizer.use_tokenizer_vocab_size=true",
                   tr_ll(tok)),
            "model.vocab_size (%lld) cannot be smaller than the tokenizer's vocabulary (%lld)",
            tr_ll(m), tr_ll(tok));
}

TR_RULE_FN(tr_warn_vocab_padding) {
    int64_t v = c->model.vocab_size, p = c->derived.padded_vocab_size;
    if (!tr_is_set(v) || !tr_is_set(p) || p == v) return;
    TR_FAIL("derived.padded_vocab_size,model.vocab_size,model.make_vocab_size_divisible_by",
            "expected with padding; set model.should_pad_vocab=false to keep the exact size",
            "the vocabulary is padded from %lld to %lld (a multiple of "
            "model.make_vocab_size_divisible_by %lld * TP %lld)",
            tr_ll(v), tr_ll(p), tr_ll(c->model.make_vocab_size_divisible_by),
            tr_ll(c->model.tensor_model_parallel_size));
}
