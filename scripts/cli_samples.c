/* See scripts/cli_samples.h. */
#include "scripts/cli_samples.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/data/dataset_indexed.h"
#include "runtime/data/train_data.h"
#include "scripts/cli_resolve.h"

static void print_ids(const int32_t *ids, int n) {
    for (int t = 0; t < n; t++) printf(t ? " %" PRId32 : "%" PRId32, ids[t]);
    putchar('\n');
}

static tr_status dump(const tr_config *c, const tr_token_dataset *ds, int n) {
    int seq = ds->seq;
    int32_t *buf = malloc((size_t)(4 * seq + 4) * sizeof *buf);
    if (!buf) return TR_ERR_NOMEM;
    int64_t docs[256];
    tr_status s = TR_OK;
    printf("training samples of recipe %s: %" PRId64 " per epoch, %d tokens each\n",
           c->recipe_name ? c->recipe_name : "(file)", ds->n_samples[TR_SPLIT_TRAIN], seq + 1);
    for (int64_t i = 0; i < n && s == TR_OK; i++) {
        if (ds->sequence) {
            tr_token_sequence q = {buf, buf + seq, buf + 2 * seq, buf + 3 * seq};
            s = ds->sequence(ds, TR_SPLIT_TRAIN, i, &q);
            if (s != TR_OK) break;
            int loss = 0;
            for (int t = 0; t < seq; t++) loss += q.targets[t] >= 0;
            printf("sample %" PRId64 ": fine-tuning sequence, %d tokens with loss\n  ids:", i,
                   loss);
            putchar(' ');
            print_ids(q.ids, seq);
            continue;
        }
        s = ds->sample(ds, TR_SPLIT_TRAIN, i, buf);
        if (s != TR_OK) break;
        int nd = 0;
        const char *name = NULL;
        printf("sample %" PRId64 ":", i);
        if (tr_indexed_token_dataset_docs(ds, TR_SPLIT_TRAIN, i, docs, 256, &nd, &name) == TR_OK) {
            printf(" %s documents", name);
            for (int k = 0; k < nd; k++) printf(" %" PRId64, docs[k]);
        } else {
            printf(" text file (no document index)");
        }
        printf("\n  tokens: ");
        print_ids(buf, seq + 1);
    }
    free(buf);
    return s;
}

tr_status tr_cli_dump_samples(const tr_cli *cli, int n, tr_diags *d) {
    tr_config c;
    tr_status s = tr_cli_resolve(cli, tr_cli_default_world(cli), true, false, &c, d);
    if (s == TR_OK && d->n_errors) s = TR_ERR_CONFIG;
    tr_token_dataset ds;
    if (s == TR_OK) {
        s = tr_train_data_open(&c, &ds, d);
        if (s == TR_OK) {
            s = dump(&c, &ds, n);
            tr_train_data_close(&ds);
        }
    }
    tr_config_free(&c);
    return s;
}
