/* The chat template of sft.h: a fixed rendering instead of a Jinja chat template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/sft/sft.h"

static const char *const LLAMA3_MARKERS[] = {"<|start_header_id|>", "<|end_header_id|>",
                                             "<|eot_id|>"};

static int64_t single_token(const tr_tokenizer *tok, const char *s) {
    tr_token_ids ids = {0};
    tr_diags d;
    tr_diags_init(&d);
    int64_t id = -1;
    if (tr_tokenizer_encode(tok, s, strlen(s), &ids, &d) == TR_OK && ids.n == 1) id = ids.ids[0];
    tr_token_ids_free(&ids);
    tr_diags_free(&d);
    return id;
}

bool tr_sft_has_llama3_headers(const tr_tokenizer *tok) {
    for (int i = 0; i < 3; i++)
        if (single_token(tok, LLAMA3_MARKERS[i]) < 0) return false;
    return true;
}

static tr_status bad(tr_diags *diags, const char *name, int line, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    o.line = line;
    return tr_diag_add(diags, TR_SEV_ERROR, "data.sft_chat", &o, "dataset.chat",
                       "write messages as [{\"role\": \"user\", \"content\": \"...\"}, "
                       "{\"role\": \"assistant\", \"content\": \"...\"}]",
                       "%s:%d: %s", name, line, what);
}

/* Appends text (encoded) to the example with the given target flag. */
static tr_status add_text(tr_sft_example *e, const tr_tokenizer *tok, const char *text, size_t len,
                          bool target, tr_diags *diags) {
    tr_token_ids ids = {0};
    tr_status s = tr_tokenizer_encode(tok, text, len, &ids, diags);
    if (s == TR_OK) s = tr_sft_example_append(e, &ids, target);
    tr_token_ids_free(&ids);
    return s;
}

static tr_status add_str(tr_sft_example *e, const tr_tokenizer *tok, const char *text, bool target,
                         tr_diags *diags) {
    return add_text(e, tok, text, strlen(text), target, diags);
}

static void trim(const char **s, size_t *len) {
    while (*len && (**s == ' ' || **s == '\n' || **s == '\t' || **s == '\r')) (*s)++, (*len)--;
    while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\n' || (*s)[*len - 1] == '\t' ||
                    (*s)[*len - 1] == '\r'))
        (*len)--;
}

tr_status tr_sft_encode_chat(const tr_json *messages, int loss_mode, const tr_tokenizer *tok,
                             const char *name, int line, tr_sft_example *out, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    if (messages->type != TR_JSON_ARRAY || messages->n == 0)
        return bad(diags, name, line, "\"messages\" must be a non-empty list");
    size_t last_assistant = messages->n;
    for (size_t i = 0; i < messages->n; i++) {
        const tr_json *m = &messages->items[i];
        const tr_json *role = tr_json_get(m, "role"), *content = tr_json_get(m, "content");
        if (m->type != TR_JSON_OBJECT || !role || role->type != TR_JSON_STRING || !content ||
            content->type != TR_JSON_STRING)
            return bad(diags, name, line, "every message needs string \"role\" and \"content\"");
        if (strcmp(role->str, "assistant") == 0) last_assistant = i;
    }
    if (loss_mode != TR_SFTLOSS_FULL && last_assistant == messages->n)
        return bad(diags, name, line,
                   "the conversation has no assistant message, so nothing would be trained");
    bool llama3 = tr_sft_has_llama3_headers(tok);
    tr_status s = TR_OK;
    if (llama3) {
        int64_t bos = single_token(tok, "<|begin_of_text|>");
        if (bos >= 0)
            s = add_str(out, tok, "<|begin_of_text|>", loss_mode == TR_SFTLOSS_FULL, diags);
    }
    for (size_t i = 0; s == TR_OK && i < messages->n; i++) {
        const tr_json *m = &messages->items[i];
        const tr_json *role = tr_json_get(m, "role"), *content = tr_json_get(m, "content");
        bool is_assistant = strcmp(role->str, "assistant") == 0;
        bool train = loss_mode == TR_SFTLOSS_FULL ||
                     (loss_mode == TR_SFTLOSS_ASSISTANT && is_assistant) ||
                     (loss_mode == TR_SFTLOSS_LAST_TURN && i == last_assistant) ||
                     (loss_mode == TR_SFTLOSS_COMPLETION && is_assistant);
        bool header_target = loss_mode == TR_SFTLOSS_FULL;
        const char *body = content->str;
        size_t body_len = content->len;
        trim(&body, &body_len);
        if (llama3) {
            s = add_str(out, tok, LLAMA3_MARKERS[0], header_target, diags);
            if (s == TR_OK) s = add_text(out, tok, role->str, role->len, header_target, diags);
            if (s == TR_OK) s = add_str(out, tok, LLAMA3_MARKERS[1], header_target, diags);
            if (s == TR_OK) s = add_str(out, tok, "\n\n", header_target, diags);
            if (s == TR_OK) s = add_text(out, tok, body, body_len, train, diags);
            if (s == TR_OK) s = add_str(out, tok, LLAMA3_MARKERS[2], train, diags);
        } else {
            size_t hl = role->len + 6;
            char *header = malloc(hl);
            if (!header) return TR_ERR_NOMEM;
            snprintf(header, hl, "<|%s|>\n", role->str);
            s = add_str(out, tok, header, header_target, diags);
            free(header);
            if (s == TR_OK) s = add_text(out, tok, body, body_len, train, diags);
            if (s == TR_OK) s = add_str(out, tok, "\n", train, diags);
        }
    }
    /* The end-of-document id closes the conversation (trained with the last turn). */
    if (s == TR_OK && !llama3 && tr_tokenizer_eod(tok) >= 0) {
        tr_token_ids eod = {0};
        s = tr_token_ids_push(&eod, tr_tokenizer_eod(tok));
        bool last_trained = loss_mode == TR_SFTLOSS_FULL || last_assistant == messages->n - 1;
        if (s == TR_OK) s = tr_sft_example_append(out, &eod, last_trained);
        tr_token_ids_free(&eod);
    }
    if (s != TR_OK) tr_sft_example_free(out);
    return s;
}
