#include "runtime/data/preprocess.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/input/file.h"

#include "runtime/data/datasets/indexed_dataset.h"
#include "runtime/io/json.h"

enum { BATCH = 2048 };

typedef struct record {
    char *line;
    size_t len;
    long long lineno;
    tr_token_ids *ids; /* one per key */
    tr_status status;
} record;

typedef struct batch {
    const tr_preprocess_opts *o;
    const tr_tokenizer *tok;
    record *recs;
    int n;
    int worker, workers;
    tr_diags diags; /* per worker, merged by the caller */
} batch;

static tr_status tokenize_record(batch *b, record *r) {
    const tr_preprocess_opts *o = b->o;
    tr_json v;
    char name[600];
    snprintf(name, sizeof name, "%s:%lld", o->input, r->lineno);
    TR_TRY(tr_json_parse(r->line, r->len, name, &v, &b->diags));
    tr_status s = TR_OK;
    for (int k = 0; k < o->n_keys && s == TR_OK; k++) {
        const tr_json *text = tr_json_get(&v, o->json_keys[k]);
        if (!text || text->type != TR_JSON_STRING) {
            tr_origin org = tr_origin_make(TR_ORIGIN_FILE, o->input);
            org.line = (int)r->lineno;
            s = tr_diag_add(&b->diags, TR_SEV_ERROR, "data.jsonl_key", &org, NULL,
                            "every record needs a string under each --json-keys key",
                            "%s: record has no string \"%s\"", name, o->json_keys[k]);
            break;
        }
        r->ids[k].n = 0;
        s = tr_tokenizer_encode(b->tok, text->str, text->len, &r->ids[k], &b->diags);
        if (s == TR_OK && o->append_eod && tr_tokenizer_eod(b->tok) >= 0)
            s = tr_token_ids_push(&r->ids[k], tr_tokenizer_eod(b->tok));
    }
    tr_json_free(&v);
    return s;
}

static void *worker_main(void *arg) {
    batch *b = arg;
    for (int i = b->worker; i < b->n; i += b->workers) {
        b->recs[i].status = tokenize_record(b, &b->recs[i]);
        if (b->recs[i].status != TR_OK) break;
    }
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tr_status run_batch(const tr_preprocess_opts *o, const tr_tokenizer *tok, record *recs,
                           int n, tr_indexed_writer *writers, tr_preprocess_stats *st,
                           tr_diags *diags) {
    int w = o->workers < 1 ? 1 : o->workers > 256 ? 256 : o->workers;
    batch jobs[256];
    pthread_t th[256];
    for (int i = 0; i < w; i++) {
        jobs[i] = (batch){o, tok, recs, n, i, w, {0}};
        tr_diags_init(&jobs[i].diags);
        if (w > 1 && pthread_create(&th[i], NULL, worker_main, &jobs[i]) != 0) w = i; /* fewer */
    }
    if (w <= 1) {
        w = 1;
        worker_main(&jobs[0]);
    } else {
        for (int i = 0; i < w; i++) pthread_join(th[i], NULL);
    }
    tr_status s = TR_OK;
    int failed = -1;
    for (int i = 0; i < n && s == TR_OK; i++) {
        s = recs[i].status;
        if (s != TR_OK) failed = i;
        for (int k = 0; k < o->n_keys && s == TR_OK; k++) {
            s = tr_indexed_writer_add(&writers[k], recs[i].ids[k].ids, recs[i].ids[k].n, diags);
            if (s == TR_OK) s = tr_indexed_writer_end_document(&writers[k]);
            st->tokens += (long long)recs[i].ids[k].n;
        }
        if (s == TR_OK) st->documents++;
    }
    /* The first failing record in input order explains the failure; its worker stopped there,
     * so that record's message is its worker's last. */
    if (failed >= 0 && jobs[failed % w].diags.n > 0) {
        const tr_diags *wd = &jobs[failed % w].diags;
        const tr_diag *g = &wd->items[wd->n - 1];
        tr_diag_add(diags, g->severity, g->id, &g->origin, g->keys, g->hint, "%s", g->message);
    }
    for (int i = 0; i < w; i++) tr_diags_free(&jobs[i].diags);
    return s;
}

tr_status tr_preprocess_jsonl(const tr_preprocess_opts *o, const tr_tokenizer *tok,
                              tr_preprocess_stats *st, tr_diags *diags) {
    memset(st, 0, sizeof *st);
    if (o->n_keys < 1 || o->n_keys > 16) return TR_ERR_INVALID;
    int err;
    FILE *in = tr_file_fopen(o->input, 0, &err);
    if (!in) {
        tr_origin org = tr_origin_make(TR_ORIGIN_FILE, o->input);
        return tr_diag_add(diags, TR_SEV_ERROR, "data.file_open", &org, NULL, "check --input",
                           "cannot open %s: %s", o->input, tr_file_strerror(err));
    }
    tr_indexed_writer writers[16];
    tr_status s = TR_OK;
    int opened = 0;
    tr_token_dtype dtype = tr_token_dtype_for_vocab(tr_tokenizer_vocab_size(tok));
    for (; opened < o->n_keys && s == TR_OK; opened++) {
        char prefix[4096];
        snprintf(prefix, sizeof prefix, "%s_%s_document", o->output_prefix, o->json_keys[opened]);
        s = tr_indexed_writer_open(&writers[opened], prefix, dtype, diags);
        if (s != TR_OK) break;
    }
    record *recs = calloc(BATCH, sizeof *recs);
    tr_token_ids *ids = calloc((size_t)BATCH * (size_t)o->n_keys, sizeof *ids);
    if (s == TR_OK && (!recs || !ids)) s = TR_ERR_NOMEM;
    double t0 = now(), last = t0;
    long long lineno = 0;
    while (s == TR_OK) {
        int n = 0;
        for (; n < BATCH; n++) {
            record *r = &recs[n];
            free(r->line);
            r->line = NULL;
            size_t bufcap = 0;
            ssize_t len = getline(&r->line, &bufcap, in);
            if (len < 0) break;
            lineno++;
            while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) len--;
            if (len == 0) { /* blank lines carry no record */
                n--;
                continue;
            }
            r->len = (size_t)len;
            r->lineno = lineno;
            r->ids = &ids[(size_t)n * (size_t)o->n_keys];
            st->bytes += len;
        }
        if (n == 0) break;
        s = run_batch(o, tok, recs, n, writers, st, diags);
        double t = now();
        if (o->progress && (t - last > 0.5 || n < BATCH)) {
            double el = t - t0 > 1e-9 ? t - t0 : 1e-9;
            fprintf(o->progress, "\r%lld docs  %.0f docs/s  %.2f MB/s  %lld tokens", st->documents,
                    (double)st->documents / el, (double)st->bytes / el / 1e6, st->tokens);
            fflush(o->progress);
            last = t;
        }
        if (n < BATCH) break;
    }
    st->seconds = now() - t0;
    if (o->progress) fprintf(o->progress, "\n");
    for (int i = 0; recs && i < BATCH; i++) free(recs[i].line);
    for (size_t i = 0; ids && i < (size_t)BATCH * (size_t)o->n_keys; i++)
        tr_token_ids_free(&ids[i]);
    free(recs);
    free(ids);
    fclose(in);
    for (int k = 0; k < opened; k++) {
        if (s == TR_OK) s = tr_indexed_writer_finish(&writers[k], diags);
        tr_indexed_writer_free(&writers[k]);
    }
    return s;
}
