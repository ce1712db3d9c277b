/* checkpoint.async_save: the slices are copied to host memory before start returns, so training
 * may overwrite its buffers immediately; a background thread writes the copy. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint/ckpt.h"

struct tr_ckpt_async {
    tr_ckpt_save *save;
    tr_ckpt_tensor *tensors;
    char **names;
    int n;
    pthread_t thread;
    tr_diags diags;
    tr_status status;
    atomic_bool done;
};

static void free_snapshot(tr_ckpt_async *a) {
    for (int i = 0; i < a->n; i++) {
        free(a->names[i]);
        free(a->tensors[i].data);
    }
    free(a->names);
    free(a->tensors);
}

static void *writer_main(void *arg) {
    tr_ckpt_async *a = arg;
    a->status = tr_ckpt_save_write_shards(a->save, a->tensors, a->n, &a->diags);
    atomic_store(&a->done, true);
    return NULL;
}

tr_status tr_ckpt_async_start(tr_ckpt_save *s, const tr_ckpt_tensor *t, int n, tr_ckpt_async **out,
                              tr_diags *d) {
    *out = NULL;
    tr_ckpt_async *a = calloc(1, sizeof *a);
    if (!a) return TR_ERR_NOMEM;
    a->save = s;
    tr_diags_init(&a->diags);
    a->tensors = calloc((size_t)n + 1, sizeof *a->tensors);
    a->names = calloc((size_t)n + 1, sizeof *a->names);
    tr_status st = a->tensors && a->names ? TR_OK : TR_ERR_NOMEM;
    /* Only the slices this rank writes are copied: the snapshot is as small as the shard. */
    for (int i = 0; st == TR_OK && i < n; i++) {
        if (t[i].replica_id != 0) continue;
        tr_ckpt_tensor c = t[i];
        int64_t vol =
            c.ndim >= 0 && c.ndim <= TR_CKPT_MAX_DIMS ? tr_ckpt_slice_volume(&c.slice) : 0;
        size_t bytes = (size_t)(vol > 0 ? vol : 0) * tr_ckpt_dtype_size(c.dtype);
        a->names[a->n] = c.name ? strdup(c.name) : NULL;
        c.name = a->names[a->n];
        c.data = malloc(bytes ? bytes : 1);
        if (!c.data || (t[i].name && !c.name)) {
            free(c.data);
            free(a->names[a->n]);
            st = TR_ERR_NOMEM;
            break;
        }
        if (t[i].data)
            memcpy(c.data, t[i].data, bytes);
        else {
            free(c.data);
            c.data = NULL; /* write_shards reports the missing data */
        }
        a->tensors[a->n++] = c;
    }
    if (st == TR_OK && pthread_create(&a->thread, NULL, writer_main, a) != 0)
        st = tr_diag_add(d, TR_SEV_ERROR, "checkpoint.async_thread", NULL, "checkpoint.async_save",
                         "set checkpoint.async_save=false",
                         "cannot start the checkpoint writer "
                         "thread");
    if (st != TR_OK) {
        free_snapshot(a);
        tr_diags_free(&a->diags);
        free(a);
        return st;
    }
    *out = a;
    return TR_OK;
}

bool tr_ckpt_async_done(const tr_ckpt_async *a) {
    return atomic_load(&a->done);
}

tr_status tr_ckpt_async_join(tr_ckpt_async *a, tr_diags *d) {
    pthread_join(a->thread, NULL);
    for (int i = 0; i < a->diags.n; i++) {
        const tr_diag *g = &a->diags.items[i];
        tr_diag_add(d, g->severity, g->id, NULL, g->keys, g->hint, "%s", g->message);
    }
    tr_status st = a->status;
    free_snapshot(a);
    tr_diags_free(&a->diags);
    free(a);
    return st;
}
