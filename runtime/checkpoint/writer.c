/* Saving: every rank writes its own shard file and rank index into a temporary directory; rank 0
 * merges the indexes into the manifest and publishes the directory with renames. A crash at any
 * point leaves either the previous checkpoint named by the tracker or the complete new one. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/fsutil.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/progress.h"

struct tr_ckpt_save {
    tr_ckpt_save_opts o;
    char *root, *code_version;
    char *tmp_dir, *final_dir;
    bool finalized;
};

void tr_ckpt_save_opts_init(tr_ckpt_save_opts *o, const char *root, int64_t iteration) {
    memset(o, 0, sizeof *o);
    o->root = root;
    o->iteration = iteration;
    o->world = 1;
    tr_ckpt_layout_init(&o->layout);
    o->fsync = true;
}

uint64_t tr_ckpt_new_nonce(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    if (v == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = XXH3_64bits(&ts, sizeof ts) ^ (uint64_t)getpid();
    }
    return v;
}

const char *tr_ckpt_save_tmp_dir(const tr_ckpt_save *s) {
    return s->tmp_dir;
}

void tr_ckpt_save_free(tr_ckpt_save *s) {
    if (!s) return;
    free(s->root);
    free(s->code_version);
    free(s->tmp_dir);
    free(s->final_dir);
    free(s);
}

static tr_status bad_arg(tr_diags *d, const char *msg, const char *name) {
    return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.bad_tensor", NULL, "checkpoint.save",
                       "fix the registration of this tensor", "tensor '%s': %s",
                       name ? name : "(unnamed)", msg);
}

tr_status tr_ckpt_save_begin(const tr_ckpt_save_opts *o, tr_ckpt_save **out, tr_diags *d) {
    *out = NULL;
    if (!o->root || !o->root[0])
        return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.no_save_dir", NULL, "checkpoint.save",
                           "set checkpoint.save to a directory", "no checkpoint directory given");
    if (o->iteration < 0 || o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.bad_save_args", NULL, "checkpoint.save",
                           NULL, "invalid save arguments: iteration %lld, rank %d of %d",
                           (long long)o->iteration, o->rank, o->world);
    if (o->nonce == 0 && o->world > 1)
        return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.no_nonce", NULL, "checkpoint.save",
                           "make one with tr_ckpt_new_nonce() on rank 0 and broadcast it",
                           "a save by %d ranks needs a nonce all of them share", o->world);
    tr_ckpt_save *s = calloc(1, sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    s->o = *o;
    if (s->o.nonce == 0) s->o.nonce = tr_ckpt_new_nonce();
    s->root = strdup(o->root);
    s->code_version = strdup(o->code_version ? o->code_version : "unknown");
    char name[96];
    snprintf(name, sizeof name, "iter_%07lld.tmp-%016" PRIx64, (long long)o->iteration, s->o.nonce);
    s->tmp_dir = s->root ? tr_ckpt_join(s->root, name) : NULL;
    snprintf(name, sizeof name, "iter_%07lld", (long long)o->iteration);
    s->final_dir = s->root ? tr_ckpt_join(s->root, name) : NULL;
    if (!s->root || !s->code_version || !s->tmp_dir || !s->final_dir) {
        tr_ckpt_save_free(s);
        return TR_ERR_NOMEM;
    }
    s->o.root = s->root;
    s->o.code_version = s->code_version;
    tr_status st = tr_ckpt_mkdir_p(s->tmp_dir, d);
    if (st != TR_OK) {
        tr_ckpt_save_free(s);
        return st;
    }
    *out = s;
    return TR_OK;
}

static tr_status check_tensor(const tr_ckpt_tensor *t, tr_diags *d) {
    if (!t->name || !t->name[0]) return bad_arg(d, "has no name", NULL);
    if ((unsigned)t->dtype >= TR_CKPT_DTYPE_COUNT) return bad_arg(d, "unknown dtype", t->name);
    if (t->ndim < 0 || t->ndim > TR_CKPT_MAX_DIMS || t->slice.ndim != t->ndim)
        return bad_arg(d, "its slice and its global shape have different ranks", t->name);
    int axes[3] = {t->tp_axis, t->pp_axis, t->dp_axis};
    for (int i = 0; i < 3; i++)
        if (axes[i] < -1 || axes[i] >= t->ndim)
            return bad_arg(d, "a split axis hint is outside its dimensions", t->name);
    for (int i = 0; i < t->ndim; i++) {
        int64_t g = t->global_shape[i], off = t->slice.offset[i], len = t->slice.shape[i];
        if (g <= 0 || len <= 0 || off < 0 || off > g - len) {
            char msg[160];
            snprintf(msg, sizeof msg, "slice [%lld, %lld) of dimension %d is outside [0, %lld)",
                     (long long)off, (long long)(off + len), i, (long long)g);
            return bad_arg(d, msg, t->name);
        }
    }
    if (!t->data) return bad_arg(d, "has no data pointer", t->name);
    return TR_OK;
}

/* The shard's bytes go out in pieces, each hashed just before its write while it is in the
 * cache (one pass over memory, not two). With fsync on, each piece's write-back starts at once
 * (sync_file_range): the disk works while the next piece is hashed, and the final fsync finds
 * little left to flush instead of the whole file. */
enum { WRITE_CHUNK = 8 << 20 };

static tr_status write_tensor(int fd, const char *path, const tr_ckpt_tensor *t, uint64_t pos,
                              bool sync, tr_ckpt_manifest *idx, int file, tr_ckpt_progress *prog,
                              tr_diags *d) {
    uint64_t bytes = (uint64_t)tr_ckpt_slice_volume(&t->slice) * tr_ckpt_dtype_size(t->dtype);
    XXH3_state_t *state = XXH3_createState();
    if (!state) return TR_ERR_NOMEM;
    XXH3_64bits_reset(state);
    const char *p = t->data;
    tr_status st = TR_OK;
    for (uint64_t done = 0; st == TR_OK && done < bytes;) {
        size_t chunk = bytes - done > WRITE_CHUNK ? WRITE_CHUNK : (size_t)(bytes - done);
        XXH3_64bits_update(state, p + done, chunk);
        st = tr_ckpt_write_all(fd, p + done, chunk, path, d);
#ifdef SYNC_FILE_RANGE_WRITE
        if (st == TR_OK && sync)
            (void)sync_file_range(fd, (off_t)(pos + done), (off_t)chunk, SYNC_FILE_RANGE_WRITE);
#else
        (void)sync;
#endif
        done += chunk;
        if (prog) tr_ckpt_progress_add(prog, chunk);
    }
    tr_ckpt_shard sh = {t->slice, file, pos, bytes, XXH3_64bits_digest(state)};
    XXH3_freeState(state);
    TR_TRY(st);
    tr_ckpt_entry proto;
    memset(&proto, 0, sizeof proto);
    proto.name = (char *)t->name;
    proto.dtype = t->dtype;
    proto.ndim = t->ndim;
    memcpy(proto.shape, t->global_shape, sizeof proto.shape);
    proto.tp_axis = t->tp_axis;
    proto.pp_axis = t->pp_axis;
    proto.dp_axis = t->dp_axis;
    tr_ckpt_entry *e;
    TR_TRY(tr_ckpt_manifest_entry(idx, &proto, &e, path, d));
    return tr_ckpt_entry_add_shard(e, &sh);
}

static tr_status write_shard_file(tr_ckpt_save *s, const tr_ckpt_tensor *t, int n,
                                  tr_ckpt_manifest *idx, tr_diags *d) {
    char name[64];
    snprintf(name, sizeof name, "shard_r%05d.bin", s->o.rank);
    char *path = tr_ckpt_join(s->tmp_dir, name);
    if (!path) return TR_ERR_NOMEM;
    int file;
    tr_status st = tr_ckpt_manifest_add_file(idx, name, 0, &file);
    int fd = -1;
    if (st == TR_OK) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) st = tr_ckpt_io_error(d, "create", path, errno);
    }
    uint64_t pos = 0;
    if (s->o.progress && s->o.progress->total == 0)
        for (int i = 0; i < n; i++)
            if (t[i].replica_id == 0)
                s->o.progress->total +=
                    (uint64_t)tr_ckpt_slice_volume(&t[i].slice) * tr_ckpt_dtype_size(t[i].dtype);
    for (int i = 0; st == TR_OK && i < n; i++) {
        if (t[i].replica_id != 0) continue;
        st = write_tensor(fd, path, &t[i], pos, s->o.fsync, idx, file, s->o.progress, d);
        pos += (uint64_t)tr_ckpt_slice_volume(&t[i].slice) * tr_ckpt_dtype_size(t[i].dtype);
    }
    if (st == TR_OK && s->o.fsync && fsync(fd) != 0) st = tr_ckpt_io_error(d, "fsync", path, errno);
    if (fd >= 0 && close(fd) != 0 && st == TR_OK) st = tr_ckpt_io_error(d, "close", path, errno);
    if (st == TR_OK) idx->files[file].bytes = pos;
    free(path);
    return st;
}

tr_status tr_ckpt_save_write_shards(tr_ckpt_save *s, const tr_ckpt_tensor *t, int n, tr_diags *d) {
    for (int i = 0; i < n; i++) TR_TRY(check_tensor(&t[i], d));
    tr_ckpt_manifest idx;
    tr_ckpt_manifest_init(&idx);
    idx.is_rank_index = true;
    idx.rank = s->o.rank;
    idx.iteration = s->o.iteration;
    idx.config_fingerprint = s->o.config_fingerprint;
    idx.code_version = strdup(s->code_version);
    tr_status st = idx.code_version ? TR_OK : TR_ERR_NOMEM;
    if (st == TR_OK) st = write_shard_file(s, t, n, &idx, d);
    if (st == TR_OK) {
        tr_ckpt_manifest_sort(&idx);
        st = tr_ckpt_manifest_check(&idx, false, s->tmp_dir, d);
    }
    char *text = NULL;
    size_t len = 0;
    if (st == TR_OK) st = tr_ckpt_manifest_write(&idx, &text, &len);
    if (st == TR_OK) {
        char name[64];
        snprintf(name, sizeof name, "rank_%05d.json", s->o.rank);
        st = tr_ckpt_write_atomic(s->tmp_dir, name, text, len, s->o.fsync, d);
    }
    free(text);
    tr_ckpt_manifest_free(&idx);
    return st;
}

static tr_status merge_rank(tr_ckpt_save *s, int rank, tr_ckpt_manifest *m, tr_diags *d) {
    char name[64];
    snprintf(name, sizeof name, "rank_%05d.json", rank);
    char *path = tr_ckpt_join(s->tmp_dir, name);
    if (!path) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    if (access(path, F_OK) != 0) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        st = tr_diag_add(d, TR_SEV_ERROR, "checkpoint.incomplete", &o, "checkpoint.save",
                         "every rank must call write_shards before rank 0 finalizes (barrier)",
                         "rank %d has not finished writing its shards (%s is missing)", rank, path);
    }
    char *text = NULL;
    size_t len = 0;
    if (st == TR_OK) st = tr_ckpt_read_whole(path, &text, &len, d);
    tr_ckpt_manifest idx;
    tr_ckpt_manifest_init(&idx);
    if (st == TR_OK) st = tr_ckpt_manifest_parse(text, len, path, &idx, d);
    free(text);
    if (st == TR_OK && (!idx.is_rank_index || idx.rank != rank || idx.iteration != s->o.iteration ||
                        idx.config_fingerprint != s->o.config_fingerprint)) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        st = tr_diag_add(d, TR_SEV_ERROR, "checkpoint.inconsistent_rank", &o, "checkpoint.save",
                         "all ranks must save the same iteration with the same config",
                         "%s does not belong to this save (rank %d, iteration %lld)", path,
                         idx.rank, (long long)idx.iteration);
    }
    int *remap = st == TR_OK ? calloc((size_t)idx.n_files + 1, sizeof *remap) : NULL;
    if (st == TR_OK && !remap) st = TR_ERR_NOMEM;
    for (int f = 0; st == TR_OK && f < idx.n_files; f++)
        st = tr_ckpt_manifest_add_file(m, idx.files[f].name, idx.files[f].bytes, &remap[f]);
    for (int t = 0; st == TR_OK && t < idx.n_tensors; t++) {
        tr_ckpt_entry *e;
        st = tr_ckpt_manifest_entry(m, &idx.tensors[t], &e, path, d);
        for (int k = 0; st == TR_OK && k < idx.tensors[t].n_shards; k++) {
            tr_ckpt_shard sh = idx.tensors[t].shards[k];
            sh.file = remap[sh.file];
            st = tr_ckpt_entry_add_shard(e, &sh);
        }
    }
    free(remap);
    tr_ckpt_manifest_free(&idx);
    free(path);
    return st;
}

tr_status tr_ckpt_save_finalize(tr_ckpt_save *s, tr_diags *d) {
    tr_ckpt_manifest m;
    tr_ckpt_manifest_init(&m);
    m.code_version = strdup(s->code_version);
    m.iteration = s->o.iteration;
    m.config_fingerprint = s->o.config_fingerprint;
    m.world = s->o.world;
    m.layout = s->o.layout;
    tr_status st = m.code_version ? TR_OK : TR_ERR_NOMEM;
    for (int r = 0; st == TR_OK && r < s->o.world; r++) st = merge_rank(s, r, &m, d);
    if (st == TR_OK) {
        tr_ckpt_manifest_sort(&m);
        st = tr_ckpt_manifest_check(&m, true, s->tmp_dir, d);
    }
    char *text = NULL;
    size_t len = 0;
    if (st == TR_OK) st = tr_ckpt_manifest_write(&m, &text, &len);
    if (st == TR_OK)
        st = tr_ckpt_write_atomic(s->tmp_dir, TR_CKPT_MANIFEST, text, len, s->o.fsync, d);
    free(text);
    tr_ckpt_manifest_free(&m);
    if (st == TR_OK) s->finalized = true;
    return st;
}

tr_status tr_ckpt_save_commit(tr_ckpt_save *s, tr_diags *d) {
    if (!s->finalized)
        return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.not_finalized", NULL, "checkpoint.save",
                           "call tr_ckpt_save_finalize on rank 0 before committing",
                           "checkpoint %s has no manifest yet", s->tmp_dir);
    struct stat st_old;
    bool replace = lstat(s->final_dir, &st_old) == 0;
    /* A symbolic link (or a file) under our name was not written by us: swapping it in would
     * make the removal below empty whatever it points at. */
    if (replace && !S_ISDIR(st_old.st_mode))
        return tr_ckpt_refuse(d, s->final_dir,
                              "it is not a directory Trestle created (a symbolic link or a file)");
    if (replace) {
        /* Swap so that the iteration's directory is never missing, then drop the old copy. */
        if (renameat2(AT_FDCWD, s->tmp_dir, AT_FDCWD, s->final_dir, RENAME_EXCHANGE) != 0)
            return tr_ckpt_io_error(d, "replace", s->final_dir, errno);
    } else if (rename(s->tmp_dir, s->final_dir) != 0) {
        return tr_ckpt_io_error(d, "rename", s->tmp_dir, errno);
    }
    if (s->o.fsync) TR_TRY(tr_ckpt_fsync_path(s->root, d));
    if (replace) TR_TRY(tr_ckpt_remove_dir(s->tmp_dir, d));
    char text[32];
    int len = snprintf(text, sizeof text, "%lld\n", (long long)s->o.iteration);
    return tr_ckpt_write_atomic(s->root, TR_CKPT_TRACKER, text, (size_t)len, s->o.fsync, d);
}

tr_status tr_ckpt_save_all(const tr_ckpt_save_opts *o, const tr_ckpt_tensor *t, int n,
                           tr_diags *d) {
    tr_ckpt_save_opts one = *o;
    one.rank = 0;
    one.world = 1;
    tr_ckpt_save *s;
    TR_TRY(tr_ckpt_save_begin(&one, &s, d));
    tr_status st = tr_ckpt_save_write_shards(s, t, n, d);
    if (st == TR_OK) st = tr_ckpt_save_finalize(s, d);
    if (st == TR_OK) st = tr_ckpt_save_commit(s, d);
    tr_ckpt_save_free(s);
    return st;
}
