/* Writing safetensors files (runtime/hf/safetensors.h): header, then the tensors in the order
 * given, into a temporary file that replaces the target only when complete. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "runtime/hf/safetensors.h"

typedef struct text {
    char *s;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *g = realloc(t->s, cap);
        if (!g) {
            t->oom = true;
            return;
        }
        t->s = g;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

static void puts_(text *t, const char *s) {
    put(t, s, strlen(s));
}

/* A JSON string: quotes, backslashes and control characters escaped; UTF-8 passes through. */
static void put_string(text *t, const char *s) {
    put(t, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\', esc[1] = (char)*c;
            put(t, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            put(t, esc, 6);
        } else {
            put(t, (const char *)c, 1);
        }
    }
    put(t, "\"", 1);
}

static tr_status fail(tr_diags *d, const char *path, const char *what, const char *detail) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(d, TR_SEV_ERROR, "safetensors.write", &o, NULL, NULL, "cannot write %s: %s%s%s",
                path, what, detail ? ": " : "", detail ? detail : "");
    return TR_ERR_IO;
}

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the entries and returns each one's byte size. */
static tr_status check_entries(const char *path, const tr_st_entry *e, int n, uint64_t *bytes,
                               tr_diags *d) {
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int i = 0; i < n && st == TR_OK; i++) {
        names[i] = e[i].name;
        uint64_t numel = 1;
        bool ok = e[i].name && strcmp(e[i].name, "__metadata__") != 0 &&
                  (unsigned)e[i].dtype < TR_ST_DTYPE_COUNT && e[i].ndim >= 0 &&
                  e[i].ndim <= TR_ST_MAX_DIMS && (e[i].ndim == 0 || e[i].shape);
        for (int k = 0; ok && k < e[i].ndim; k++)
            ok = e[i].shape[k] >= 0 &&
                 !__builtin_mul_overflow(numel, (uint64_t)e[i].shape[k], &numel);
        ok =
            ok && !__builtin_mul_overflow(numel, (uint64_t)tr_st_dtype_size(e[i].dtype), &bytes[i]);
        ok = ok && (bytes[i] == 0 || e[i].data);
        if (!ok) st = fail(d, path, "invalid tensor", e[i].name ? e[i].name : "(no name)");
    }
    if (st == TR_OK) qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 1; i < n && st == TR_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0) st = fail(d, path, "name used twice", names[i]);
    free(names);
    return st;
}

static void put_header(text *h, const tr_st_entry *e, int n, const uint64_t *bytes,
                       const char *const *meta_keys, const char *const *meta_values, int n_meta) {
    char num[32];
    puts_(h, "{");
    if (n_meta > 0) {
        puts_(h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) puts_(h, ",");
            put_string(h, meta_keys[i]);
            puts_(h, ":");
            put_string(h, meta_values[i]);
        }
        puts_(h, "}");
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i || n_meta > 0) puts_(h, ",");
        put_string(h, e[i].name);
        puts_(h, ":{\"dtype\":\"");
        puts_(h, tr_st_dtype_name(e[i].dtype));
        puts_(h, "\",\"shape\":[");
        for (int k = 0; k < e[i].ndim; k++) {
            snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
            puts_(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,", (unsigned long long)at);
        puts_(h, num);
        at += bytes[i];
        snprintf(num, sizeof num, "%llu]}", (unsigned long long)at);
        puts_(h, num);
    }
    puts_(h, "}");
    /* Spaces up to a multiple of 8 with the length field, so the data starts 8-byte aligned. */
    while (!h->oom && (8 + h->n) % 8) puts_(h, " ");
}

tr_status tr_st_write(const char *path, const tr_st_entry *e, int n, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta, tr_diags *d) {
    if (n < 0 || n_meta < 0) return fail(d, path, "negative count", NULL);
    uint64_t *bytes = calloc((size_t)(n ? n : 1), sizeof *bytes);
    if (!bytes) return TR_ERR_NOMEM;
    tr_status st = check_entries(path, e, n, bytes, d);
    text h = {0};
    if (st == TR_OK) put_header(&h, e, n, bytes, meta_keys, meta_values, n_meta);
    if (st == TR_OK && h.oom) st = TR_ERR_NOMEM;
    char *tmp = NULL;
    int fd = -1;
    if (st == TR_OK) {
        size_t len = strlen(path) + 32;
        tmp = malloc(len);
        if (!tmp) st = TR_ERR_NOMEM;
        if (tmp) snprintf(tmp, len, "%s.tmp-%ld", path, (long)getpid());
    }
    if (st == TR_OK && (fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        st = fail(d, tmp, "cannot create the temporary file", strerror(errno));
    if (st == TR_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
        bool ok = write_all(fd, len8, 8) && write_all(fd, h.s, h.n);
        for (int i = 0; ok && i < n; i++) ok = write_all(fd, e[i].data, (size_t)bytes[i]);
        if (!ok || fsync(fd) != 0) st = fail(d, tmp, "write failed", strerror(errno));
    }
    if (fd >= 0 && close(fd) != 0 && st == TR_OK)
        st = fail(d, tmp, "close failed", strerror(errno));
    if (st == TR_OK && rename(tmp, path) != 0) st = fail(d, path, "rename failed", strerror(errno));
    if (st == TR_OK) {
        /* The rename is durable once the directory is synced. */
        char *dir = strdup(path);
        int dfd = dir ? open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    } else if (fd >= 0) {
        unlink(tmp);
    }
    free(tmp);
    free(h.s);
    free(bytes);
    return st;
}

void tr_st_stream_abort(tr_st_stream *s) {
    if (s->fd >= 0) {
        close(s->fd);
        unlink(s->tmp);
    }
    free(s->path), free(s->tmp), free(s->at), free(s->bytes), free(s->filled), free(s->done);
    *s = (tr_st_stream){.fd = -1};
}

tr_status tr_st_stream_open(tr_st_stream *s, const char *path, const tr_st_entry *e, int n,
                            const char *const *meta_keys, const char *const *meta_values,
                            int n_meta, tr_diags *d) {
    *s = (tr_st_stream){.fd = -1, .n = n};
    if (n < 0 || n_meta < 0) return fail(d, path, "negative count", NULL);
    size_t cnt = (size_t)(n ? n : 1);
    s->path = strdup(path);
    s->tmp = malloc(strlen(path) + 32);
    s->at = calloc(cnt, sizeof *s->at);
    s->bytes = calloc(cnt, sizeof *s->bytes);
    s->filled = calloc(cnt, sizeof *s->filled);
    s->done = calloc(cnt, sizeof *s->done);
    if (!s->path || !s->tmp || !s->at || !s->bytes || !s->filled || !s->done) {
        tr_st_stream_abort(s);
        return TR_ERR_NOMEM;
    }
    /* The entries' data are put later: checked as present here. */
    tr_st_entry *chk = malloc(cnt * sizeof *chk);
    if (!chk) {
        tr_st_stream_abort(s);
        return TR_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        chk[i] = e[i];
        chk[i].data = chk;
    }
    tr_status st = check_entries(path, chk, n, s->bytes, d);
    free(chk);
    text h = {0};
    if (st == TR_OK) put_header(&h, e, n, s->bytes, meta_keys, meta_values, n_meta);
    if (st == TR_OK && h.oom) st = TR_ERR_NOMEM;
    snprintf(s->tmp, strlen(path) + 32, "%s.tmp-%ld", path, (long)getpid());
    if (st == TR_OK && (s->fd = open(s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        st = fail(d, s->tmp, "cannot create the temporary file", strerror(errno));
    uint64_t at = 8 + h.n;
    for (int i = 0; i < n; i++) {
        s->at[i] = at;
        at += s->bytes[i];
    }
    if (st == TR_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
        if (!write_all(s->fd, len8, 8) || !write_all(s->fd, h.s, h.n))
            st = fail(d, s->tmp, "write failed", strerror(errno));
    }
    free(h.s);
    if (st != TR_OK) tr_st_stream_abort(s);
    return st;
}

tr_status tr_st_stream_put_range(tr_st_stream *s, int i, uint64_t offset, const void *data,
                                 uint64_t n_bytes, tr_diags *d) {
    if (i < 0 || i >= s->n || s->done[i]) return fail(d, s->path, "tensor put twice", NULL);
    if (offset > s->bytes[i] || n_bytes > s->bytes[i] - offset ||
        n_bytes > s->bytes[i] - s->filled[i])
        return fail(d, s->path, "a piece outside its tensor", NULL);
    const char *c = data;
    uint64_t off = s->at[i] + offset, left = n_bytes;
    while (left) {
        ssize_t w = pwrite(s->fd, c, (size_t)left, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return fail(d, s->tmp, "write failed", strerror(errno));
        c += w, off += (uint64_t)w, left -= (uint64_t)w;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* The disk writes this piece while the caller makes the next (a hint: errors surface at
     * the commit's fsync). */
    if (n_bytes)
        sync_file_range(s->fd, (off_t)(s->at[i] + offset), (off_t)n_bytes, SYNC_FILE_RANGE_WRITE);
#endif
    s->filled[i] += n_bytes;
    s->done[i] = s->filled[i] == s->bytes[i];
    return TR_OK;
}

tr_status tr_st_stream_put(tr_st_stream *s, int i, const void *data, tr_diags *d) {
    if (i < 0 || i >= s->n || s->done[i] || s->filled[i])
        return fail(d, s->path, "tensor put twice", NULL);
    TR_TRY(tr_st_stream_put_range(s, i, 0, data, s->bytes[i], d));
    s->done[i] = true; /* a tensor of no bytes, too */
    return TR_OK;
}

tr_status tr_st_stream_commit(tr_st_stream *s, tr_diags *d) {
    tr_status st = TR_OK;
    for (int i = 0; st == TR_OK && i < s->n; i++)
        if (!s->done[i]) st = fail(d, s->path, "a tensor was never written", NULL);
    if (st == TR_OK && fsync(s->fd) != 0) st = fail(d, s->tmp, "write failed", strerror(errno));
    if (st == TR_OK) {
        int fd = s->fd;
        s->fd = -1;
        if (close(fd) != 0) st = fail(d, s->tmp, "close failed", strerror(errno));
        if (st == TR_OK && rename(s->tmp, s->path) != 0)
            st = fail(d, s->path, "rename failed", strerror(errno));
        if (st != TR_OK) unlink(s->tmp);
    }
    if (st == TR_OK) {
        char *dir = strdup(s->path);
        int dfd = dir ? open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    tr_st_stream_abort(s);
    return st;
}
