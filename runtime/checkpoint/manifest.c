/* Manifest model, builders and the consistency checks shared by the writer and the reader. */
#include "runtime/checkpoint/manifest.h"

#include <stdlib.h>
#include <string.h>

void tr_ckpt_manifest_init(tr_ckpt_manifest *m) {
    memset(m, 0, sizeof *m);
    tr_ckpt_layout_init(&m->layout);
    m->world = 1;
}

void tr_ckpt_manifest_free(tr_ckpt_manifest *m) {
    for (int i = 0; i < m->n_files; i++) free(m->files[i].name);
    for (int i = 0; i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].shards);
    }
    free(m->files);
    free(m->tensors);
    free(m->code_version);
    tr_ckpt_manifest_init(m);
}

static bool grow(void **items, int *cap, int need, size_t size) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*items, (size_t)ncap * size);
    if (!p) return false;
    *items = p;
    *cap = ncap;
    return true;
}

tr_status tr_ckpt_manifest_add_file(tr_ckpt_manifest *m, const char *name, uint64_t bytes,
                                    int *index) {
    if (!grow((void **)&m->files, &m->cap_files, m->n_files + 1, sizeof *m->files))
        return TR_ERR_NOMEM;
    char *copy = strdup(name);
    if (!copy) return TR_ERR_NOMEM;
    m->files[m->n_files] = (tr_ckpt_file){copy, bytes};
    if (index) *index = m->n_files;
    m->n_files++;
    return TR_OK;
}

const tr_ckpt_entry *tr_ckpt_manifest_find(const tr_ckpt_manifest *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

static bool same_meta(const tr_ckpt_entry *a, const tr_ckpt_entry *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->tp_axis != b->tp_axis ||
        a->pp_axis != b->pp_axis || a->dp_axis != b->dp_axis)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static void format_shape(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

tr_status tr_ckpt_manifest_entry(tr_ckpt_manifest *m, const tr_ckpt_entry *proto,
                                 tr_ckpt_entry **out, const char *where, tr_diags *d) {
    for (int i = 0; i < m->n_tensors; i++) {
        tr_ckpt_entry *e = &m->tensors[i];
        if (strcmp(e->name, proto->name) != 0) continue;
        if (!same_meta(e, proto)) {
            char a[128], b[128];
            format_shape(e->shape, e->ndim, a, sizeof a);
            format_shape(proto->shape, proto->ndim, b, sizeof b);
            tr_origin o = tr_origin_make(TR_ORIGIN_FILE, where);
            return tr_diag_add(
                d, TR_SEV_ERROR, "checkpoint.inconsistent_tensor", &o, "checkpoint.save",
                "every rank must register a tensor with the same dtype, global "
                "shape and split axes",
                "tensor '%s' is registered as %s%s and as %s%s", e->name,
                tr_ckpt_dtype_name(e->dtype), a, tr_ckpt_dtype_name(proto->dtype), b);
        }
        *out = e;
        return TR_OK;
    }
    if (!grow((void **)&m->tensors, &m->cap_tensors, m->n_tensors + 1, sizeof *m->tensors))
        return TR_ERR_NOMEM;
    tr_ckpt_entry *e = &m->tensors[m->n_tensors];
    *e = *proto;
    e->shards = NULL;
    e->n_shards = e->cap_shards = 0;
    e->name = strdup(proto->name);
    if (!e->name) return TR_ERR_NOMEM;
    m->n_tensors++;
    *out = e;
    return TR_OK;
}

tr_status tr_ckpt_entry_add_shard(tr_ckpt_entry *e, const tr_ckpt_shard *s) {
    if (!grow((void **)&e->shards, &e->cap_shards, e->n_shards + 1, sizeof *e->shards))
        return TR_ERR_NOMEM;
    e->shards[e->n_shards++] = *s;
    return TR_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const tr_ckpt_entry *)a)->name, ((const tr_ckpt_entry *)b)->name);
}

static int cmp_shard(const void *a, const void *b) {
    const tr_ckpt_slice *x = &((const tr_ckpt_shard *)a)->slice;
    const tr_ckpt_slice *y = &((const tr_ckpt_shard *)b)->slice;
    for (int i = 0; i < x->ndim; i++)
        if (x->offset[i] != y->offset[i]) return x->offset[i] < y->offset[i] ? -1 : 1;
    return 0;
}

void tr_ckpt_manifest_sort(tr_ckpt_manifest *m) {
    if (m->n_tensors > 1) qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, cmp_entry);
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].n_shards > 1)
            qsort(m->tensors[i].shards, (size_t)m->tensors[i].n_shards,
                  sizeof *m->tensors[i].shards, cmp_shard);
}

bool tr_ckpt_safe_name(const char *name) {
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

static tr_status bad(tr_diags *d, const char *path, const char *id, const char *hint,
                     const char *what, const char *name) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    return tr_diag_add(d, TR_SEV_ERROR, id, &o, "checkpoint.load", hint, "%s: tensor '%s': %s",
                       path, name, what);
}

static tr_status check_entry(const tr_ckpt_manifest *m, const tr_ckpt_entry *e, bool require_cover,
                             const char *path, tr_diags *d) {
    const char *hint = "the checkpoint is damaged or was not written by Trestle; load another one";
    size_t esize = tr_ckpt_dtype_size(e->dtype);
    int64_t total = 1, bytes;
    char what[256];
    /* Every dimension is below 2^52, their product need not be: every count below (volumes,
     * bytes, coverage) is bounded by the tensor's bytes once those fit in 63 bits. */
    bool huge = false;
    for (int i = 0; i < e->ndim; i++) huge |= __builtin_mul_overflow(total, e->shape[i], &total);
    if (huge || __builtin_mul_overflow(total, (int64_t)esize, &bytes)) {
        snprintf(what, sizeof what, "its shape has more than 2^63 bytes");
        return bad(d, path, "checkpoint.manifest_invalid", hint, what, e->name);
    }
    int64_t covered = 0;
    for (int s = 0; s < e->n_shards; s++) {
        const tr_ckpt_shard *sh = &e->shards[s];
        if (sh->slice.ndim != e->ndim)
            return bad(d, path, "checkpoint.manifest_invalid", hint,
                       "a shard has a different number of dimensions than the tensor", e->name);
        for (int i = 0; i < e->ndim; i++) {
            int64_t off = sh->slice.offset[i], len = sh->slice.shape[i];
            if (off < 0 || len <= 0 || off > e->shape[i] - len) {
                snprintf(what, sizeof what,
                         "shard %d covers [%lld, %lld) of dimension %d, outside its size %lld", s,
                         (long long)off, (long long)(off + len), i, (long long)e->shape[i]);
                return bad(d, path, "checkpoint.manifest_invalid", hint, what, e->name);
            }
        }
        int64_t vol = tr_ckpt_slice_volume(&sh->slice);
        if (sh->bytes != (uint64_t)vol * esize) {
            snprintf(what, sizeof what, "shard %d holds %llu bytes, its slice needs %llu", s,
                     (unsigned long long)sh->bytes, (unsigned long long)vol * esize);
            return bad(d, path, "checkpoint.manifest_invalid", hint, what, e->name);
        }
        if (sh->file < 0 || sh->file >= m->n_files) {
            snprintf(what, sizeof what, "shard %d names file #%d, which the manifest lacks", s,
                     sh->file);
            return bad(d, path, "checkpoint.manifest_invalid", hint, what, e->name);
        }
        const tr_ckpt_file *f = &m->files[sh->file];
        if (sh->pos > f->bytes || sh->bytes > f->bytes - sh->pos) {
            snprintf(what, sizeof what, "shard %d lies past the end of file %s", s, f->name);
            return bad(d, path, "checkpoint.manifest_invalid", hint, what, e->name);
        }
        for (int t = 0; t < s; t++) {
            tr_ckpt_slice ov;
            if (tr_ckpt_slice_overlap(&sh->slice, &e->shards[t].slice, &ov)) {
                snprintf(what, sizeof what,
                         "shards %d and %d overlap (two replicas wrote the same elements)", t, s);
                return bad(d, path, "checkpoint.overlap",
                           "exactly one replica (replica_id 0) may write each element", what,
                           e->name);
            }
        }
        covered += vol;
    }
    if (require_cover && covered != total) {
        snprintf(what, sizeof what, "shards cover %lld of %lld elements", (long long)covered,
                 (long long)total);
        return bad(d, path, "checkpoint.not_covered",
                   "every element must be written by one rank with replica_id 0", what, e->name);
    }
    return TR_OK;
}

tr_status tr_ckpt_manifest_check(const tr_ckpt_manifest *m, bool require_cover, const char *path,
                                 tr_diags *d) {
    for (int i = 0; i < m->n_files; i++) {
        if (!tr_ckpt_safe_name(m->files[i].name)) {
            tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
            return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.path_escape", &o, "checkpoint.load",
                               "a manifest may only name plain files inside its own directory",
                               "%s names data file '%s', which is outside the checkpoint "
                               "directory; refusing to load it",
                               path, m->files[i].name);
        }
        for (int j = 0; j < i; j++)
            if (strcmp(m->files[i].name, m->files[j].name) == 0) {
                tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
                return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.manifest_invalid", &o,
                                   "checkpoint.load", NULL, "%s lists data file '%s' twice", path,
                                   m->files[i].name);
            }
    }
    for (int i = 0; i < m->n_tensors; i++) {
        for (int j = 0; j < i; j++)
            if (strcmp(m->tensors[i].name, m->tensors[j].name) == 0)
                return bad(d, path, "checkpoint.manifest_invalid", NULL, "listed twice",
                           m->tensors[i].name);
        TR_TRY(check_entry(m, &m->tensors[i], require_cover, path, d));
    }
    return TR_OK;
}
