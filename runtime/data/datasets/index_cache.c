#include "runtime/data/datasets/index_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/input/file.h"

#define CACHE_MAGIC "TRIDXC01"
#define KEY         "dataset.path_to_cache"

uint64_t tr_index_cache_key(const char *description) {
    return XXH3_64bits(description, strlen(description));
}

char *tr_index_cache_path(const char *dir, uint64_t key, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 40;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%016llx-%s.tridx", dir, (unsigned long long)key, name);
    return p;
}

static tr_status make_dirs(const char *dir, tr_diags *diags) {
    char *copy = strdup(dir);
    if (!copy) return TR_ERR_NOMEM;
    for (char *p = copy + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(copy, 0777) != 0 && errno != EEXIST) {
                tr_origin o = tr_origin_make(TR_ORIGIN_FILE, dir);
                tr_diag_add(diags, TR_SEV_ERROR, "data.cache_dir", &o, KEY,
                            "point dataset.path_to_cache at a writable directory",
                            "cannot create the index cache directory %s: %s", copy,
                            strerror(errno));
                free(copy);
                return TR_ERR_IO;
            }
            *p = c;
            if (c == 0) break;
        }
    }
    free(copy);
    return TR_OK;
}

tr_status tr_index_cache_save(const char *dir, uint64_t key, const char *name,
                              const tr_cache_array *arrays, int n, tr_diags *diags) {
    TR_TRY(make_dirs(dir, diags));
    char *path = tr_index_cache_path(dir, key, name);
    if (!path) return TR_ERR_NOMEM;
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        free(path);
        return TR_ERR_NOMEM;
    }
    snprintf(tmp, tl, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f != NULL;
    if (ok) {
        uint64_t header[2] = {key, (uint64_t)n};
        ok = fwrite(CACHE_MAGIC, 1, 8, f) == 8 && fwrite(header, 8, 2, f) == 2;
        for (int i = 0; ok && i < n; i++) {
            uint64_t shape[2] = {(uint64_t)arrays[i].elem, (uint64_t)*arrays[i].count};
            ok = fwrite(shape, 8, 2, f) == 2;
            size_t cnt = (size_t)*arrays[i].count;
            if (ok && cnt) ok = fwrite(*arrays[i].data, arrays[i].elem, cnt, f) == cnt;
        }
        ok = (fclose(f) == 0) && ok;
    }
    if (ok) ok = rename(tmp, path) == 0;
    tr_status s = TR_OK;
    if (!ok) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.cache_write", &o, KEY,
                        "check free space and permissions of dataset.path_to_cache",
                        "cannot write the index cache entry %s: %s", path, strerror(errno));
        s = TR_ERR_IO;
        remove(tmp);
    }
    free(tmp);
    free(path);
    return s;
}

static tr_status damaged(tr_diags *diags, const char *path, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(diags, TR_SEV_ERROR, "data.cache_damaged", &o, KEY,
                "delete the file; rank 0 rebuilds it on the next run",
                "index cache entry %s is damaged: %s", path, what);
    return TR_ERR_INVALID;
}

tr_status tr_index_cache_load(const char *dir, uint64_t key, const char *name,
                              const tr_cache_array *arrays, int n, int *hit, tr_diags *diags) {
    *hit = 0;
    char *path = tr_index_cache_path(dir, key, name);
    if (!path) return TR_ERR_NOMEM;
    int err;
    FILE *f = tr_file_fopen(path, TR_FILE_NOFOLLOW, &err);
    if (!f) {
        free(path);
        return TR_OK;
    }
    tr_status s = TR_OK;
    char magic[8];
    uint64_t header[2];
    int loaded = 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, CACHE_MAGIC, 8) != 0 ||
        fread(header, 8, 2, f) != 2) {
        s = damaged(diags, path, "bad header");
    } else if (header[0] != key || header[1] != (uint64_t)n) {
        s = damaged(diags, path, "its key or array count does not match its name");
    }
    for (; s == TR_OK && loaded < n; loaded++) {
        uint64_t shape[2];
        if (fread(shape, 8, 2, f) != 2 || shape[0] != arrays[loaded].elem ||
            shape[1] > ((uint64_t)1 << 40)) {
            s = damaged(diags, path, "bad array header");
            break;
        }
        size_t cnt = (size_t)shape[1];
        void *data = malloc(cnt ? cnt * shape[0] : 1);
        if (!data) {
            s = TR_ERR_NOMEM;
            break;
        }
        if (cnt && fread(data, shape[0], cnt, f) != cnt) {
            free(data);
            s = damaged(diags, path, "truncated");
            break;
        }
        *arrays[loaded].data = data;
        *arrays[loaded].count = (int64_t)cnt;
    }
    if (s == TR_OK && fgetc(f) != EOF) s = damaged(diags, path, "trailing bytes");
    if (s != TR_OK)
        for (int i = 0; i < loaded; i++) {
            free(*arrays[i].data);
            *arrays[i].data = NULL;
        }
    fclose(f);
    free(path);
    if (s == TR_OK) *hit = 1;
    return s;
}
