/* most_recent_k: deleting old checkpoints without ever deleting the one the tracker names. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/fsutil.h"
#include "runtime/checkpoint/reader.h"

typedef struct found {
    char *name;
    long long iter;
    bool tmp;
} found;

/* "iter_0000042" -> 42; "iter_0000042.tmp-<nonce>" -> 42 with *tmp; anything else -> -1. */
static long long parse_name(const char *name, bool *tmp) {
    *tmp = false;
    if (strncmp(name, "iter_", 5) != 0) return -1;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return -1;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (*end == '\0') return v;
    if (strncmp(end, ".tmp-", 5) == 0 && end[5]) {
        *tmp = true;
        return v;
    }
    return -1;
}

static int cmp_found(const void *a, const void *b) {
    long long x = ((const found *)a)->iter, y = ((const found *)b)->iter;
    return x < y ? 1 : x > y ? -1 : 0; /* newest first */
}

tr_status tr_ckpt_retain(const char *root, int64_t k, int64_t retain_interval, tr_diags *d) {
    tr_diags quiet;
    tr_diags_init(&quiet);
    char *latest_dir = NULL;
    int64_t latest = -1;
    tr_ckpt_find(root, -1, &latest_dir, &latest, &quiet); /* none is fine: nothing protected */
    free(latest_dir);
    tr_diags_free(&quiet);

    DIR *dir = opendir(root);
    if (!dir) return tr_ckpt_io_error(d, "open directory", root, errno);
    found *items = NULL;
    int n = 0, cap = 0;
    tr_status s = TR_OK;
    struct dirent *ent;
    while (s == TR_OK && (ent = readdir(dir)) != NULL) {
        bool tmp;
        long long it = parse_name(ent->d_name, &tmp);
        if (it < 0) continue;
        struct stat st;
        if (fstatat(dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode)) {
            /* Not a directory of ours (a link to elsewhere, a file): never counted or removed. */
            char *p = tr_ckpt_join(root, ent->d_name);
            tr_origin o = tr_origin_make(TR_ORIGIN_FILE, p ? p : root);
            tr_diag_add(d, TR_SEV_WARNING, "checkpoint.not_owned", &o, "checkpoint.most_recent_k",
                        "remove it by hand if it is not needed",
                        "retention skips %s: not a directory Trestle created", ent->d_name);
            free(p);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            found *g = realloc(items, (size_t)cap * sizeof *g);
            if (!g) {
                s = TR_ERR_NOMEM;
                break;
            }
            items = g;
        }
        items[n].name = strdup(ent->d_name);
        items[n].iter = it;
        items[n].tmp = tmp;
        if (!items[n].name) s = TR_ERR_NOMEM;
        n++;
    }
    closedir(dir);
    if (n > 1) qsort(items, (size_t)n, sizeof *items, cmp_found);
    long long newest = -1;
    for (int i = 0; i < n; i++)
        if (!items[i].tmp && items[i].iter > newest) newest = items[i].iter;
    int kept = 0;
    for (int i = 0; s == TR_OK && i < n; i++) {
        bool drop;
        if (items[i].tmp) {
            /* An unfinished save of an iteration older than a committed one is abandoned. */
            drop = items[i].iter < newest;
        } else {
            bool keep = k < 0 || kept < k || items[i].iter == latest ||
                        (retain_interval > 0 && items[i].iter % retain_interval == 0);
            if (k < 0 || kept < k) kept++;
            drop = !keep;
        }
        if (!drop) continue;
        char *path = tr_ckpt_join(root, items[i].name);
        s = path ? tr_ckpt_remove_dir(path, d) : TR_ERR_NOMEM;
        free(path);
    }
    for (int i = 0; i < n; i++) free(items[i].name);
    free(items);
    if (s == TR_OK) s = tr_ckpt_fsync_path(root, d);
    return s;
}
