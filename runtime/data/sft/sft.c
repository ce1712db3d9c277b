/* JSONL records to tokenized fine-tuning examples (runtime/data/sft/sft.h). */
#include "runtime/data/sft/sft.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tr_sft_options_from_config(const tr_dataset_config *dc, tr_sft_options *o) {
    o->chat = dc->chat;
    o->prompt_column = dc->prompt_column;
    o->completion_column = dc->completion_column;
    o->separator = dc->separator;
    o->loss_mode = dc->loss_mode;
    o->max_records = dc->max_train_samples == TR_NULL_INT ? -1 : dc->max_train_samples;
}

static tr_status record_error(tr_diags *diags, const char *name, int line, const char *key,
                              const char *hint, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    o.line = line;
    return tr_diag_add(diags, TR_SEV_ERROR, "data.sft_record", &o, key, hint, "%s:%d: %s", name,
                       line, what);
}

/* Appends the encoding of s[0..len) with surrounding whitespace removed. */
static tr_status encode_stripped(const tr_tokenizer *tok, const char *s, size_t len,
                                 const char *suffix, tr_token_ids *out, tr_diags *diags) {
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    size_t sl = suffix ? strlen(suffix) : 0;
    char *buf = malloc(len + sl + 1);
    if (!buf) return TR_ERR_NOMEM;
    memcpy(buf, s, len);
    if (sl) memcpy(buf + len, suffix, sl);
    tr_status st = tr_tokenizer_encode(tok, buf, len + sl, out, diags);
    free(buf);
    return st;
}

tr_status tr_sft_encode_record(const tr_json *record, const tr_sft_options *o,
                               const tr_tokenizer *tok, const char *name, int line,
                               tr_sft_example *out, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    if (record->type != TR_JSON_OBJECT)
        return record_error(diags, name, line, "dataset.dataset_root",
                            "write one JSON object per line", "the record is not a JSON object");
    if (o->chat) {
        const tr_json *m = tr_json_get(record, "messages");
        if (!m)
            return record_error(diags, name, line, "dataset.chat",
                                "chat data needs a \"messages\" list; set dataset.chat=false for "
                                "prompt/completion records",
                                "the record has no \"messages\" field");
        return tr_sft_encode_chat(m, o->loss_mode < 0 ? TR_SFTLOSS_ASSISTANT : o->loss_mode, tok,
                                  name, line, out, diags);
    }
    int mode = o->loss_mode < 0 ? TR_SFTLOSS_COMPLETION : o->loss_mode;
    if (mode != TR_SFTLOSS_COMPLETION && mode != TR_SFTLOSS_FULL)
        return record_error(diags, name, line, "dataset.loss_mode",
                            "use loss_mode completion or full for prompt/completion data",
                            "loss_mode assistant/last_turn applies to chat data only");
    const tr_json *p = tr_json_get(record, o->prompt_column);
    const tr_json *c = tr_json_get(record, o->completion_column);
    if (!p || p->type != TR_JSON_STRING || !c || c->type != TR_JSON_STRING) {
        char what[256];
        snprintf(what, sizeof what, "the record needs string fields \"%s\" and \"%s\"",
                 o->prompt_column, o->completion_column);
        return record_error(diags, name, line, "dataset.prompt_column,dataset.completion_column",
                            "set dataset.prompt_column / dataset.completion_column to the "
                            "record's field names",
                            what);
    }
    tr_token_ids prompt = {0}, completion = {0}, eod = {0};
    tr_status s = encode_stripped(tok, p->str, p->len, o->separator, &prompt, diags);
    if (s == TR_OK) s = encode_stripped(tok, c->str, c->len, NULL, &completion, diags);
    if (s == TR_OK && tr_tokenizer_eod(tok) >= 0)
        s = tr_token_ids_push(&eod, tr_tokenizer_eod(tok));
    bool full = mode == TR_SFTLOSS_FULL;
    if (s == TR_OK) s = tr_sft_example_append(out, &prompt, full);
    if (s == TR_OK) s = tr_sft_example_append(out, &completion, true);
    if (s == TR_OK) s = tr_sft_example_append(out, &eod, true);
    tr_token_ids_free(&prompt);
    tr_token_ids_free(&completion);
    tr_token_ids_free(&eod);
    if (s != TR_OK) tr_sft_example_free(out);
    return s;
}

static tr_status push_example(tr_sft_examples *v, tr_sft_example *e) {
    if (v->n == v->cap) {
        int64_t nc = v->cap ? 2 * v->cap : 64;
        tr_sft_example *nv = realloc(v->v, (size_t)nc * sizeof *nv);
        if (!nv) return TR_ERR_NOMEM;
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = *e;
    return TR_OK;
}

tr_status tr_sft_load_jsonl(const char *path, const tr_sft_options *o, const tr_tokenizer *tok,
                            tr_sft_examples *out, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    char *text;
    size_t len;
    TR_TRY(tr_read_file(path, "dataset.dataset_root", &text, &len, diags));
    tr_status s = TR_OK;
    size_t pos = 0;
    int line = 0;
    while (s == TR_OK && pos < len && (o->max_records < 0 || out->n < o->max_records)) {
        line++;
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        size_t a = pos, b = end;
        while (a < b && isspace((unsigned char)text[a])) a++;
        if (a < b) {
            tr_json rec;
            s = tr_json_parse(text + a, b - a, path, &rec, diags);
            if (s != TR_OK) {
                record_error(diags, path, line, "dataset.dataset_root",
                             "each line of an SFT file must be one JSON object",
                             "the line is not valid JSON");
            } else {
                tr_sft_example e;
                s = tr_sft_encode_record(&rec, o, tok, path, line, &e, diags);
                if (s == TR_OK) {
                    s = push_example(out, &e);
                    if (s != TR_OK) tr_sft_example_free(&e);
                }
                tr_json_free(&rec);
            }
        }
        pos = end + 1;
    }
    free(text);
    if (s != TR_OK) tr_sft_examples_free(out);
    return s;
}

tr_status tr_sft_load_split(const char *dataset_root, int split, const tr_sft_options *o,
                            const tr_tokenizer *tok, tr_sft_examples *out, tr_diags *diags) {
    static const char *const files[] = {"training.jsonl", "validation.jsonl", "test.jsonl"};
    if (split < 0 || split > 2) return TR_ERR_INTERNAL;
    size_t n = strlen(dataset_root) + 32;
    char *path = malloc(n);
    if (!path) return TR_ERR_NOMEM;
    snprintf(path, n, "%s/%s", dataset_root, files[split]);
    tr_sft_options opt = *o;
    if (split != 0) opt.max_records = -1; /* max_train_samples limits training data only */
    tr_status s = tr_sft_load_jsonl(path, &opt, tok, out, diags);
    free(path);
    return s;
}
