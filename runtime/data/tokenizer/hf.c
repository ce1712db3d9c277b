/* Hugging Face tokenizer.json: the byte-level BPE subset (GPT-2, Llama 3, Qwen-style files without
 * a normalizer). Anything else in the file that would change the ids is refused by name rather
 * than ignored. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/io/json.h"
#include "runtime/data/tokenizer/internal.h"

static tr_status unsupported(const char *name, const char *what, tr_diags *diags) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    return tr_diag_add(diags, TR_SEV_ERROR, "data.hf_unsupported", &o, "tokenizer.tokenizer_model",
                       "Trestle reads byte-level BPE tokenizer.json files (GPT-2, Llama 3 and "
                       "Qwen style without a normalizer); see docs/data.md",
                       "%s: %s", name, what);
}

static bool is_type(const tr_json *obj, const char *type) {
    const tr_json *t = tr_json_get(obj, "type");
    return t && t->type == TR_JSON_STRING && strcmp(t->str, type) == 0;
}

static bool is_true(const tr_json *v) {
    return v && v->type == TR_JSON_TRUE;
}

static bool null_or_empty(const tr_json *v) {
    return !v || v->type == TR_JSON_NULL || (v->type == TR_JSON_STRING && v->len == 0);
}

/* ByteLevel must not add a prefix space; returns its use_regex through *regex. */
static tr_status byte_level(const tr_json *pt, const char *name, bool *regex, tr_diags *diags) {
    if (is_true(tr_json_get(pt, "add_prefix_space")))
        return unsupported(name, "ByteLevel with add_prefix_space is not supported", diags);
    const tr_json *r = tr_json_get(pt, "use_regex");
    *regex = !r || is_true(r); /* HF's default is true */
    return TR_OK;
}

static tr_status pre_tokenizer(tr_tokenizer *t, const tr_json *pt, const char *name,
                               tr_diags *diags) {
    bool regex = false;
    if (!pt || pt->type == TR_JSON_NULL)
        return unsupported(name, "a byte-level BPE needs a ByteLevel pre_tokenizer", diags);
    if (is_type(pt, "ByteLevel")) {
        TR_TRY(byte_level(pt, name, &regex, diags));
        if (!regex)
            return unsupported(name, "ByteLevel without a regex split is not supported", diags);
        return tr_tokenizer_compile_split(t, TR_GPT2_PATTERN, name, diags);
    }
    const tr_json *list = tr_json_get(pt, "pretokenizers");
    if (!is_type(pt, "Sequence") || !list || list->type != TR_JSON_ARRAY || list->n != 2)
        return unsupported(name,
                           "pre_tokenizer must be ByteLevel, or a Sequence of a regex Split and a "
                           "ByteLevel",
                           diags);
    const tr_json *split = &list->items[0], *bl = &list->items[1];
    const tr_json *pattern = tr_json_get(tr_json_get(split, "pattern"), "Regex");
    const tr_json *behavior = tr_json_get(split, "behavior");
    if (!is_type(split, "Split") || !pattern || pattern->type != TR_JSON_STRING || !behavior ||
        behavior->type != TR_JSON_STRING || strcmp(behavior->str, "Isolated") != 0 ||
        is_true(tr_json_get(split, "invert")))
        return unsupported(name, "the first pre-tokenizer must be Split on a Regex, Isolated",
                           diags);
    if (!is_type(bl, "ByteLevel"))
        return unsupported(name, "the second pre-tokenizer must be ByteLevel", diags);
    TR_TRY(byte_level(bl, name, &regex, diags));
    if (regex)
        return unsupported(name, "a regex Split followed by ByteLevel with its own regex", diags);
    if (strlen(pattern->str) != pattern->len)
        return unsupported(name, "the pre-tokenizer regex contains a NUL character", diags);
    return tr_tokenizer_compile_split(t, pattern->str, name, diags);
}

static tr_status merges(tr_tokenizer *t, const tr_json *m, const char *name, tr_diags *diags) {
    if (!m || m->type != TR_JSON_ARRAY)
        return unsupported(name, "model.merges must be a list", diags);
    for (size_t i = 0; i < m->n; i++) {
        const tr_json *e = &m->items[i];
        if (e->type == TR_JSON_ARRAY && e->n == 2 && e->items[0].type == TR_JSON_STRING &&
            e->items[1].type == TR_JSON_STRING) {
            TR_TRY(tr_tokenizer_add_merge(t, e->items[0].str, e->items[0].len, e->items[1].str,
                                          e->items[1].len, name, e->line, diags));
            continue;
        }
        const char *sp = e->type == TR_JSON_STRING ? memchr(e->str, ' ', e->len) : NULL;
        if (!sp || sp == e->str || (size_t)(sp - e->str) + 1 == e->len ||
            memchr(sp + 1, ' ', e->len - (size_t)(sp - e->str) - 1))
            return unsupported(name, "a merge is neither \"left right\" nor [left, right]", diags);
        TR_TRY(tr_tokenizer_add_merge(t, e->str, (size_t)(sp - e->str), sp + 1,
                                      e->len - (size_t)(sp - e->str) - 1, name, e->line, diags));
    }
    return TR_OK;
}

static tr_status added_tokens(tr_tokenizer *t, const tr_json *list, const char *name,
                              tr_diags *diags) {
    if (!list || list->type == TR_JSON_NULL) return TR_OK;
    if (list->type != TR_JSON_ARRAY) return unsupported(name, "added_tokens must be a list", diags);
    t->added = calloc(list->n ? list->n : 1, sizeof *t->added);
    if (!t->added) return TR_ERR_NOMEM;
    for (size_t i = 0; i < list->n; i++) {
        const tr_json *a = &list->items[i], *content = tr_json_get(a, "content");
        int64_t id;
        if (!tr_json_int(tr_json_get(a, "id"), 0, INT32_MAX / 8, &id) || !content ||
            content->type != TR_JSON_STRING || content->len == 0)
            return unsupported(name, "an added token lacks an integer id or a non-empty content",
                               diags);
        if (is_true(tr_json_get(a, "lstrip")) || is_true(tr_json_get(a, "rstrip")) ||
            is_true(tr_json_get(a, "single_word")))
            return unsupported(name, "added tokens with lstrip, rstrip or single_word", diags);
        tr_added_token *dst = &t->added[t->n_added++];
        dst->content = malloc(content->len);
        if (!dst->content) return TR_ERR_NOMEM;
        memcpy(dst->content, content->str, content->len);
        dst->len = content->len;
        dst->id = id;
        if (id >= t->vocab_size) t->vocab_size = id + 1;
    }
    return TR_OK;
}

/* End of document: the first of the usual end-of-text specials the file defines. */
static int64_t find_eod(const tr_tokenizer *t) {
    static const char *const names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>",
                                        "<eos>"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        for (size_t i = 0; i < t->n_added; i++)
            if (t->added[i].len == strlen(names[n]) &&
                memcmp(t->added[i].content, names[n], t->added[i].len) == 0)
                return t->added[i].id;
    return -1;
}

tr_status tr_tokenizer_hf_from_memory(const char *json, size_t len, const char *name,
                                      tr_tokenizer **out, tr_diags *diags) {
    *out = NULL;
    tr_json root;
    TR_TRY(tr_json_parse(json, len, name, &root, diags));
    tr_tokenizer *t = tr_tokenizer_alloc(TR_TOK_BPE, "HuggingFaceTokenizer");
    tr_status s = t ? TR_OK : TR_ERR_NOMEM;
    const tr_json *model = tr_json_get(&root, "model");
    if (s == TR_OK && !is_type(model, "BPE"))
        s = unsupported(name, "model.type must be BPE", diags);
    if (s == TR_OK) {
        const tr_json *norm = tr_json_get(&root, "normalizer");
        if (norm && norm->type != TR_JSON_NULL)
            s = unsupported(name, "a normalizer (e.g. NFC) is not supported yet", diags);
    }
    if (s == TR_OK && (!null_or_empty(tr_json_get(model, "continuing_subword_prefix")) ||
                       !null_or_empty(tr_json_get(model, "end_of_word_suffix"))))
        s = unsupported(name, "BPE with a subword prefix or end-of-word suffix", diags);
    if (s == TR_OK) {
        const tr_json *dropout = tr_json_get(model, "dropout");
        if (dropout && dropout->type != TR_JSON_NULL &&
            !(dropout->type == TR_JSON_NUMBER && dropout->number == 0))
            s = unsupported(name, "BPE dropout (training-time randomness) is not supported", diags);
    }
    if (s == TR_OK) s = tr_tokenizer_load_vocab(t, tr_json_get(model, "vocab"), 0, name, diags);
    if (s == TR_OK) {
        t->bpe.ignore_merges = is_true(tr_json_get(model, "ignore_merges"));
        s = merges(t, tr_json_get(model, "merges"), name, diags);
    }
    if (s == TR_OK) s = added_tokens(t, tr_json_get(&root, "added_tokens"), name, diags);
    if (s == TR_OK) s = pre_tokenizer(t, tr_json_get(&root, "pre_tokenizer"), name, diags);
    tr_json_free(&root);
    if (s != TR_OK) {
        tr_tokenizer_free(t);
        return s;
    }
    t->eod = find_eod(t);
    *out = t;
    return TR_OK;
}

tr_status tr_tokenizer_hf(const char *path, tr_tokenizer **out, tr_diags *diags) {
    *out = NULL;
    struct stat st;
    char file[4096];
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(file, sizeof file, dir ? "%s/tokenizer.json" : "%s", path);
    char *text;
    size_t len;
    TR_TRY(tr_read_file(file, "tokenizer.tokenizer_model", &text, &len, diags));
    tr_status s = tr_tokenizer_hf_from_memory(text, len, file, out, diags);
    free(text);
    return s;
}
