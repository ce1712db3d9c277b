#include "runtime/checkpoint/reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/input/file.h"
#include "runtime/checkpoint/fsutil.h"
#include "runtime/checkpoint/progress.h"

struct tr_ckpt_reader {
    char *dir;
    int dirfd;
    tr_ckpt_manifest m;
    int *fds;
};

const tr_ckpt_manifest *tr_ckpt_reader_manifest(const tr_ckpt_reader *r) {
    return &r->m;
}

static tr_status no_checkpoint(tr_diags *d, const char *path, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(d, TR_SEV_ERROR, "checkpoint.no_checkpoint", &o, "checkpoint.load",
                "point checkpoint.load at a directory written by checkpoint.save, or unset "
                "checkpoint.ckpt_step to load the latest",
                "%s: %s", path, what);
    return TR_ERR_NOTFOUND;
}

/* "iter_0000003 iter_0000005" (committed directories only, at most a line), or "none". */
static void list_iterations(const char *root, char *buf, size_t cap) {
    snprintf(buf, cap, "none");
    DIR *dir = opendir(root);
    if (!dir) return;
    size_t used = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        const char *n = ent->d_name;
        if (strncmp(n, "iter_", 5) != 0 || strspn(n + 5, "0123456789") != strlen(n + 5) || !n[5])
            continue;
        struct stat st;
        if (fstatat(dirfd(dir), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (used + strlen(n) + 5 >= cap) {
            snprintf(buf + used, cap - used, " ...");
            break;
        }
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? " " : "", n);
    }
    closedir(dir);
}

/* A load was asked for (a tracker or a step names it) and its directory is not there: never a
 * reason to start from scratch, which would later save over what is left. */
static tr_status dangling(tr_diags *d, const char *root, const char *dir, const char *named_by) {
    char have[512];
    list_iterations(root, have, sizeof have);
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, dir);
    tr_diag_add(d, TR_SEV_ERROR, "checkpoint.missing_iteration", &o, "checkpoint.load",
                "set checkpoint.ckpt_step to one of the iterations that exist, or, to start over "
                "deliberately, unset checkpoint.load (or remove the tracker file)",
                "%s names %s, which does not exist or is not a directory; iterations in %s: %s",
                named_by, dir, root, have);
    return TR_ERR_INVALID;
}

tr_status tr_ckpt_find(const char *root, int64_t step, char **iter_dir, int64_t *iteration,
                       tr_diags *d) {
    *iter_dir = NULL;
    *iteration = -1;
    char name[64];
    if (step < 0) {
        char *tracker = tr_ckpt_join(root, TR_CKPT_TRACKER);
        if (!tracker) return TR_ERR_NOMEM;
        if (access(tracker, F_OK) != 0) {
            tr_status s = no_checkpoint(d, tracker, "no tracker file: nothing was ever committed");
            free(tracker);
            return s;
        }
        char *text;
        size_t len;
        tr_status s = tr_ckpt_read_whole(tracker, &text, &len, d);
        if (s != TR_OK) {
            free(tracker);
            return s;
        }
        char *end = NULL;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        bool ok = len > 0 && text[0] >= '0' && text[0] <= '9' && errno == 0 &&
                  (strcmp(end, "\n") == 0 || *end == '\0');
        if (ok) {
            snprintf(name, sizeof name, "iter_%07lld", v);
            *iteration = v;
        } else if (strcmp(text, "release\n") == 0 || strcmp(text, "release") == 0) {
            snprintf(name, sizeof name, "release");
            *iteration = 0;
        } else {
            tr_origin o = tr_origin_make(TR_ORIGIN_FILE, tracker);
            tr_diag_add(d, TR_SEV_ERROR, "checkpoint.tracker_invalid", &o, "checkpoint.load",
                        "the tracker must hold one iteration number; set checkpoint.ckpt_step",
                        "%s does not hold an iteration number", tracker);
            free(text);
            free(tracker);
            return TR_ERR_INVALID;
        }
        free(text);
        free(tracker);
    } else {
        snprintf(name, sizeof name, "iter_%07lld", (long long)step);
        *iteration = step;
    }
    char *dir = tr_ckpt_join(root, name);
    if (!dir) return TR_ERR_NOMEM;
    struct stat st;
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) {
        /* Read only from inside the root: a link could name any directory on the machine. */
        tr_status s = no_checkpoint(d, dir, "is a symbolic link; refusing to follow it");
        free(dir);
        return s == TR_ERR_NOTFOUND ? TR_ERR_INVALID : s;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        /* Without a tracker nothing was ever committed here: the caller may start fresh. */
        char *tracker = tr_ckpt_join(root, TR_CKPT_TRACKER);
        tr_status s = !tracker ? TR_ERR_NOMEM
                      : step >= 0 && access(tracker, F_OK) != 0
                          ? no_checkpoint(d, dir, "no such checkpoint directory")
                          : dangling(d, root, dir, step < 0 ? tracker : "checkpoint.ckpt_step");
        free(tracker);
        free(dir);
        return s;
    }
    *iter_dir = dir;
    return TR_OK;
}

/* The first tensor with a shard in file f, for messages. */
static const char *tensor_in_file(const tr_ckpt_manifest *m, int f) {
    for (int i = 0; i < m->n_tensors; i++)
        for (int s = 0; s < m->tensors[i].n_shards; s++)
            if (m->tensors[i].shards[s].file == f) return m->tensors[i].name;
    return "(none)";
}

static tr_status file_error(tr_ckpt_reader *r, int f, const char *id, const char *hint,
                            const char *what, tr_diags *d) {
    char *path = tr_ckpt_join(r->dir, r->m.files[f].name);
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path ? path : r->dir);
    tr_diag_add(d, TR_SEV_ERROR, id, &o, "checkpoint.load", hint,
                "checkpoint %s: data file %s (holding tensor '%s'): %s", r->dir, r->m.files[f].name,
                tensor_in_file(&r->m, f), what);
    free(path);
    return TR_ERR_INVALID;
}

static tr_status open_files(tr_ckpt_reader *r, tr_diags *d) {
    const char *hint = "the checkpoint is incomplete or damaged; load an older one";
    r->fds = malloc(((size_t)r->m.n_files + 1) * sizeof *r->fds);
    if (!r->fds) return TR_ERR_NOMEM;
    for (int f = 0; f < r->m.n_files; f++) r->fds[f] = -1;
    for (int f = 0; f < r->m.n_files; f++) {
        int err;
        struct stat st;
        int fd = tr_file_open(r->dirfd, r->m.files[f].name, TR_FILE_NOFOLLOW, &st, &err);
        if (fd < 0) {
            if (err == ELOOP || err == TR_FILE_ENOTREG || err == EISDIR)
                return file_error(r, f, "checkpoint.path_escape",
                                  "data files must be plain files inside the checkpoint",
                                  tr_file_strerror(err), d);
            char what[128];
            snprintf(what, sizeof what, "cannot be opened: %s", strerror(err));
            return file_error(r, f, err == ENOENT ? "checkpoint.file_missing" : "checkpoint.io",
                              hint, what, d);
        }
        r->fds[f] = fd;
        if ((uint64_t)st.st_size != r->m.files[f].bytes) {
            char what[160];
            snprintf(what, sizeof what, "has %lld bytes, the manifest records %" PRIu64 " (%s)",
                     (long long)st.st_size, r->m.files[f].bytes,
                     (uint64_t)st.st_size < r->m.files[f].bytes ? "truncated" : "overwritten");
            return file_error(r, f, "checkpoint.file_truncated", hint, what, d);
        }
    }
    return TR_OK;
}

/* An iter_NNNNNNN directory whose manifest records another iteration was renamed or copied
 * over: loading it would resume at the wrong step. Other names (release, a copy) are not
 * checked. */
static tr_status check_iteration_name(const char *iter_dir, const tr_ckpt_manifest *m,
                                      const char *path, tr_diags *d) {
    size_t n = strlen(iter_dir);
    while (n > 1 && iter_dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && iter_dir[b - 1] != '/') b--;
    const char *base = iter_dir + b;
    size_t digits = n - b > 5 ? strspn(base + 5, "0123456789") : 0;
    if (n - b <= 5 || strncmp(base, "iter_", 5) != 0 || digits != n - b - 5 || digits > 18)
        return TR_OK;
    long long named = strtoll(base + 5, NULL, 10);
    if (named == m->iteration) return TR_OK;
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.manifest_invalid", &o, "checkpoint.load",
                       "the directory was renamed or copied over; load it under its own name",
                       "%s records iteration %lld, but its directory is named for iteration %lld",
                       path, (long long)m->iteration, named);
}

tr_status tr_ckpt_open(const char *iter_dir, tr_ckpt_reader **out, tr_diags *d) {
    *out = NULL;
    tr_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
    tr_ckpt_manifest_init(&r->m);
    r->dirfd = -1;
    r->dir = strdup(iter_dir);
    if (!r->dir) {
        tr_ckpt_close(r);
        return TR_ERR_NOMEM;
    }
    r->dirfd = open(iter_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r->dirfd < 0) {
        tr_status s = no_checkpoint(d, iter_dir, strerror(errno));
        tr_ckpt_close(r);
        return s;
    }
    char *path = tr_ckpt_join(iter_dir, TR_CKPT_MANIFEST);
    tr_status s = path ? TR_OK : TR_ERR_NOMEM;
    char *text = NULL;
    size_t len = 0;
    int err =
        path ? tr_file_read_all(r->dirfd, TR_CKPT_MANIFEST, TR_FILE_NOFOLLOW, &text, &len) : 0;
    if (s == TR_OK && err == ENOMEM) s = TR_ERR_NOMEM;
    if (s == TR_OK && err) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        tr_diag_add(d, TR_SEV_ERROR, "checkpoint.incomplete", &o, "checkpoint.load",
                    err == ENOENT ? "this save never finished; load an older checkpoint"
                                  : "the manifest must be a regular file inside the checkpoint",
                    "%s has no readable %s (%s)", iter_dir, TR_CKPT_MANIFEST,
                    tr_file_strerror(err));
        s = TR_ERR_INVALID;
    }
    if (s == TR_OK) s = tr_ckpt_manifest_parse(text, len, path, &r->m, d);
    if (s == TR_OK && r->m.is_rank_index) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        s = tr_diag_add(d, TR_SEV_ERROR, "checkpoint.manifest_invalid", &o, "checkpoint.load", NULL,
                        "%s is a rank index, not a manifest", path);
    }
    if (s == TR_OK) s = check_iteration_name(iter_dir, &r->m, path, d);
    free(text);
    free(path);
    if (s == TR_OK) s = open_files(r, d);
    if (s != TR_OK) {
        tr_ckpt_close(r);
        return s;
    }
    *out = r;
    return TR_OK;
}

void tr_ckpt_close(tr_ckpt_reader *r) {
    if (!r) return;
    if (r->fds)
        for (int f = 0; f < r->m.n_files; f++)
            if (r->fds[f] >= 0) close(r->fds[f]);
    if (r->dirfd >= 0) close(r->dirfd);
    tr_ckpt_manifest_free(&r->m);
    free(r->fds);
    free(r->dir);
    free(r);
}

static void format_slice(const tr_ckpt_slice *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld:%lld", i ? "," : "",
                              (long long)s->offset[i], (long long)(s->offset[i] + s->shape[i]));
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static tr_status tensor_error(tr_ckpt_reader *r, const char *name, const char *file, const char *id,
                              const char *hint, const char *what, tr_diags *d) {
    char *path = file ? tr_ckpt_join(r->dir, file) : NULL;
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path ? path : r->dir);
    tr_diag_add(d, TR_SEV_ERROR, id, &o, "checkpoint.load", hint,
                "checkpoint %s: tensor '%s'%s%s: %s", r->dir, name, file ? " in file " : "",
                file ? file : "", what);
    free(path);
    return TR_ERR_INVALID;
}

/* Hashing a piece right after reading it finds it in the cache; one pass over the whole shard
 * after the read would fetch it from memory again (a second memory pass of the load). */
enum { HASH_CHUNK = 4 << 20 };

/* Reads shard sh piece by piece, into dst as a whole (whole) or each piece over the one chunk at
 * dst, and hashes each piece as it arrives. Returns 0, an errno, or -1 when the file ends early. */
static int read_hashed(int fd, const tr_ckpt_shard *sh, char *dst, bool whole, XXH3_state_t *state,
                       tr_ckpt_progress *progress) {
    XXH3_64bits_reset(state);
    for (uint64_t got = 0; got < sh->bytes;) {
        size_t want = sh->bytes - got > HASH_CHUNK ? HASH_CHUNK : (size_t)(sh->bytes - got);
        char *at = whole ? dst + got : dst;
        ssize_t n = pread(fd, at, want, (off_t)(sh->pos + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : -1;
        XXH3_64bits_update(state, at, (size_t)n);
        got += (uint64_t)n;
        if (progress) tr_ckpt_progress_add(progress, (uint64_t)n);
    }
    return 0;
}

/* The shard's diagnostic after read_hashed returned rc with the state's digest. */
static tr_status shard_result(tr_ckpt_reader *r, const tr_ckpt_entry *e, const tr_ckpt_shard *sh,
                              int rc, XXH3_state_t *state, tr_diags *d) {
    if (rc != 0)
        return tensor_error(r, e->name, r->m.files[sh->file].name, "checkpoint.file_truncated",
                            "the checkpoint is damaged; load an older one",
                            rc > 0 ? strerror(rc) : "the file ended early", d);
    uint64_t h = XXH3_64bits_digest(state);
    if (h == sh->xxh3) return TR_OK;
    char sl[160], what[320];
    format_slice(&sh->slice, sl, sizeof sl);
    snprintf(what, sizeof what,
             "shard %s at byte %" PRIu64 " fails its checksum (stored xxh3 %016" PRIx64
             ", computed %016" PRIx64 ")",
             sl, sh->pos, sh->xxh3, h);
    return tensor_error(r, e->name, r->m.files[sh->file].name, "checkpoint.checksum_mismatch",
                        "the data file is corrupt; load an older checkpoint", what, d);
}

/* Reads shard sh into buf and checks its checksum. */
static tr_status read_shard(tr_ckpt_reader *r, const tr_ckpt_entry *e, const tr_ckpt_shard *sh,
                            void *buf, tr_diags *d) {
    XXH3_state_t *state = XXH3_createState();
    if (!state) return TR_ERR_NOMEM;
    int rc = read_hashed(r->fds[sh->file], sh, buf, true, state, NULL);
    tr_status st = shard_result(r, e, sh, rc, state, d);
    XXH3_freeState(state);
    return st;
}

/* Copies the region ov from a row-major block at src (covering slice a) into one at dst
 * (covering slice b), one innermost run at a time. */
static void copy_region(const char *src, const tr_ckpt_slice *a, char *dst, const tr_ckpt_slice *b,
                        const tr_ckpt_slice *ov, size_t esize) {
    int nd = ov->ndim;
    if (nd == 0) {
        memcpy(dst, src, esize);
        return;
    }
    int64_t sa[TR_CKPT_MAX_DIMS], sb[TR_CKPT_MAX_DIMS], idx[TR_CKPT_MAX_DIMS] = {0};
    sa[nd - 1] = sb[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) {
        sa[i] = sa[i + 1] * a->shape[i + 1];
        sb[i] = sb[i + 1] * b->shape[i + 1];
    }
    size_t run = (size_t)ov->shape[nd - 1] * esize;
    for (;;) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < nd; i++) {
            int64_t g = ov->offset[i] + (i < nd - 1 ? idx[i] : 0);
            oa += (g - a->offset[i]) * sa[i];
            ob += (g - b->offset[i]) * sb[i];
        }
        memcpy(dst + (size_t)ob * esize, src + (size_t)oa * esize, run);
        int i = nd - 2;
        while (i >= 0 && ++idx[i] == ov->shape[i]) idx[i--] = 0;
        if (i < 0) break;
    }
}

tr_status tr_ckpt_read(tr_ckpt_reader *r, const char *name, tr_ckpt_dtype dtype,
                       const tr_ckpt_slice *want, void *dst, tr_diags *d) {
    const tr_ckpt_entry *e = tr_ckpt_manifest_find(&r->m, name);
    if (!e)
        return tensor_error(r, name, NULL, "checkpoint.tensor_missing",
                            "the checkpoint was saved by a different model or without this state "
                            "(save_optim/save_rng)",
                            "not in the checkpoint", d);
    char what[256];
    if (e->dtype != dtype) {
        snprintf(what, sizeof what, "stored as %s, requested as %s", tr_ckpt_dtype_name(e->dtype),
                 tr_ckpt_dtype_name(dtype));
        return tensor_error(r, name, NULL, "checkpoint.dtype_mismatch", NULL, what, d);
    }
    bool inside = want->ndim == e->ndim;
    for (int i = 0; inside && i < e->ndim; i++)
        inside = want->offset[i] >= 0 && want->shape[i] > 0 &&
                 want->offset[i] <= e->shape[i] - want->shape[i];
    if (!inside) {
        char sl[160];
        format_slice(want, sl, sizeof sl);
        snprintf(what, sizeof what, "requested slice %s lies outside the stored tensor", sl);
        return tensor_error(r, name, NULL, "checkpoint.slice_out_of_range",
                            "the model's shapes differ from the checkpoint's", what, d);
    }
    size_t esize = tr_ckpt_dtype_size(dtype);
    int64_t covered = 0;
    for (int s = 0; s < e->n_shards; s++) {
        const tr_ckpt_shard *sh = &e->shards[s];
        tr_ckpt_slice ov;
        if (e->ndim > 0 && !tr_ckpt_slice_overlap(&sh->slice, want, &ov)) continue;
        if (e->ndim == 0) ov = *want;
        if (tr_ckpt_slice_equal(&sh->slice, want)) {
            TR_TRY(read_shard(r, e, sh, dst, d));
        } else {
            void *buf = malloc(sh->bytes ? sh->bytes : 1);
            if (!buf) return TR_ERR_NOMEM;
            tr_status st = read_shard(r, e, sh, buf, d);
            if (st == TR_OK) copy_region(buf, &sh->slice, dst, want, &ov, esize);
            free(buf);
            TR_TRY(st);
        }
        covered += tr_ckpt_slice_volume(&ov);
    }
    if (covered != tr_ckpt_slice_volume(want))
        return tensor_error(r, name, NULL, "checkpoint.not_covered", NULL,
                            "the stored shards do not cover the requested slice", d);
    return TR_OK;
}

tr_status tr_ckpt_load_tensors(tr_ckpt_reader *r, const tr_ckpt_tensor *t, int n, tr_diags *d) {
    for (int i = 0; i < n; i++) {
        const tr_ckpt_entry *e = tr_ckpt_manifest_find(&r->m, t[i].name);
        bool same = e && e->ndim == t[i].ndim;
        for (int k = 0; same && k < e->ndim; k++) same = e->shape[k] == t[i].global_shape[k];
        if (e && !same)
            return tensor_error(r, t[i].name, NULL, "checkpoint.shape_mismatch",
                                "the model's shapes differ from the checkpoint's",
                                "the global shape differs from the stored one", d);
        TR_TRY(tr_ckpt_read(r, t[i].name, t[i].dtype, &t[i].slice, t[i].data, d));
    }
    return TR_OK;
}

tr_status tr_ckpt_verify(tr_ckpt_reader *r, tr_ckpt_progress *progress, tr_diags *d) {
    char *buf = malloc(HASH_CHUNK);
    XXH3_state_t *state = XXH3_createState();
    if (!buf || !state) {
        free(buf);
        XXH3_freeState(state);
        return TR_ERR_NOMEM;
    }
    tr_status worst = TR_OK;
    for (int i = 0; i < r->m.n_tensors; i++) {
        const tr_ckpt_entry *e = &r->m.tensors[i];
        for (int s = 0; s < e->n_shards; s++) {
            const tr_ckpt_shard *sh = &e->shards[s];
            int rc = read_hashed(r->fds[sh->file], sh, buf, false, state, progress);
            tr_status st = shard_result(r, e, sh, rc, state, d);
            if (st != TR_OK) worst = st;
        }
    }
    free(buf);
    XXH3_freeState(state);
    return worst;
}
