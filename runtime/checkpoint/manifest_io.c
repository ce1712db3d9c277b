/* Manifest <-> JSON. Written by hand (the schema is small and fixed); read with the strict JSON
 * reader, then every key and value is checked: an unknown key is an error, never ignored. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint/manifest.h"
#include "runtime/io/json.h"

#define FORMAT_NAME      "trestle-checkpoint"
#define RANK_FORMAT_NAME "trestle-checkpoint-rank"

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void put_dims(FILE *f, const int64_t *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)v[i]);
    fputc(']', f);
}

tr_status tr_ckpt_manifest_write(const tr_ckpt_manifest *m, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = open_memstream(out, len);
    if (!f) return TR_ERR_NOMEM;
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n",
            m->is_rank_index ? RANK_FORMAT_NAME : FORMAT_NAME, TR_CKPT_FORMAT_VERSION);
    fprintf(f, "  \"code_version\": ");
    put_json_string(f, m->code_version ? m->code_version : "unknown");
    fprintf(f, ",\n  \"iteration\": %lld,\n  \"config_fingerprint\": \"%016" PRIx64 "\",\n",
            (long long)m->iteration, m->config_fingerprint);
    if (m->is_rank_index) {
        fprintf(f, "  \"rank\": %d,\n", m->rank);
    } else {
        const tr_ckpt_layout *l = &m->layout;
        fprintf(f,
                "  \"world\": %d,\n  \"layout\": {\"tp\": %d, \"pp\": %d, \"vpp\": %d, \"dp\": %d, "
                "\"cp\": %d, \"ep\": %d, \"dist_opt\": %d},\n",
                m->world, l->tp, l->pp, l->vpp, l->dp, l->cp, l->ep, l->dist_opt);
    }
    fprintf(f, "  \"files\": [");
    for (int i = 0; i < m->n_files; i++) {
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        put_json_string(f, m->files[i].name);
        fprintf(f, ", \"bytes\": %" PRIu64 "}", m->files[i].bytes);
    }
    fprintf(f, "\n  ],\n  \"tensors\": [");
    for (int i = 0; i < m->n_tensors; i++) {
        const tr_ckpt_entry *e = &m->tensors[i];
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        put_json_string(f, e->name);
        fprintf(f, ", \"dtype\": \"%s\", \"shape\": ", tr_ckpt_dtype_name(e->dtype));
        put_dims(f, e->shape, e->ndim);
        fprintf(f, ", \"tp_axis\": %d, \"pp_axis\": %d, \"dp_axis\": %d,\n     \"shards\": [",
                e->tp_axis, e->pp_axis, e->dp_axis);
        for (int s = 0; s < e->n_shards; s++) {
            const tr_ckpt_shard *sh = &e->shards[s];
            fprintf(f, "%s\n      {\"offset\": ", s ? "," : "");
            put_dims(f, sh->slice.offset, sh->slice.ndim);
            fprintf(f, ", \"shape\": ");
            put_dims(f, sh->slice.shape, sh->slice.ndim);
            fprintf(f,
                    ", \"file\": %d, \"pos\": %" PRIu64 ", \"bytes\": %" PRIu64
                    ", \"xxh3\": \"%016" PRIx64 "\"}",
                    sh->file, sh->pos, sh->bytes, sh->xxh3);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0 || !*out) {
        free(*out);
        *out = NULL;
        return TR_ERR_NOMEM;
    }
    return TR_OK;
}

/* ---------------------------------------------------------------------------------------- */

typedef struct ctx {
    const char *path;
    tr_diags *d;
} ctx;

static tr_status fail(const ctx *c, const tr_json *at, const char *fmt, const char *arg) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, c->path);
    o.line = at ? at->line : 0;
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return tr_diag_add(c->d, TR_SEV_ERROR, "checkpoint.manifest_invalid", &o, "checkpoint.load",
                       "the checkpoint is damaged or was written by an incompatible version; "
                       "load another one",
                       "%s:%d: %s", c->path, at ? at->line : 0, msg);
}

/* Every key of obj must be in allowed (NULL-terminated) and appear once. */
static tr_status only_keys(const ctx *c, const tr_json *obj, const char *const *allowed) {
    for (size_t i = 0; i < obj->n; i++) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(obj->keys[i], *a) == 0;
        if (!ok) return fail(c, &obj->items[i], "unknown key '%s'", obj->keys[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(obj->keys[i], obj->keys[j]) == 0)
                return fail(c, &obj->items[i], "key '%s' appears twice", obj->keys[i]);
    }
    return TR_OK;
}

static tr_status get(const ctx *c, const tr_json *obj, const char *key, tr_json_type type,
                     const tr_json **out) {
    const tr_json *v = tr_json_get(obj, key);
    if (!v) return fail(c, obj, "missing key '%s'", key);
    if (v->type != type) return fail(c, v, "key '%s' has the wrong type", key);
    *out = v;
    return TR_OK;
}

static tr_status get_int(const ctx *c, const tr_json *obj, const char *key, int64_t lo, int64_t hi,
                         int64_t *out) {
    const tr_json *v = NULL;
    TR_TRY(get(c, obj, key, TR_JSON_NUMBER, &v));
    if (!tr_json_int(v, lo, hi, out)) return fail(c, v, "key '%s' is not a valid integer", key);
    return TR_OK;
}

static tr_status get_hex64(const ctx *c, const tr_json *obj, const char *key, uint64_t *out) {
    const tr_json *v = NULL;
    TR_TRY(get(c, obj, key, TR_JSON_STRING, &v));
    if (v->len != 16 || strspn(v->str, "0123456789abcdef") != 16)
        return fail(c, v, "key '%s' must be 16 lowercase hex digits", key);
    *out = strtoull(v->str, NULL, 16);
    return TR_OK;
}

static tr_status get_dims(const ctx *c, const tr_json *obj, const char *key, int64_t lo,
                          int64_t *dims, int *ndim) {
    const tr_json *v = NULL;
    TR_TRY(get(c, obj, key, TR_JSON_ARRAY, &v));
    if (v->n > TR_CKPT_MAX_DIMS) return fail(c, v, "key '%s' has too many dimensions", key);
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i].type != TR_JSON_NUMBER ||
            !tr_json_int(&v->items[i], lo, INT64_C(1) << 52, &dims[i]))
            return fail(c, v, "key '%s' holds an invalid dimension", key);
    *ndim = (int)v->n;
    return TR_OK;
}

static const int64_t BIG = INT64_C(1) << 52; /* exact in a JSON double */

static tr_status parse_layout(const ctx *c, const tr_json *root, tr_ckpt_manifest *m) {
    const tr_json *l = NULL;
    TR_TRY(get(c, root, "layout", TR_JSON_OBJECT, &l));
    static const char *const keys[] = {"tp", "pp", "vpp", "dp", "cp", "ep", "dist_opt", NULL};
    TR_TRY(only_keys(c, l, keys));
    int *dst[] = {&m->layout.tp, &m->layout.pp, &m->layout.vpp,     &m->layout.dp,
                  &m->layout.cp, &m->layout.ep, &m->layout.dist_opt};
    for (int i = 0; keys[i]; i++) {
        int64_t v;
        TR_TRY(get_int(c, l, keys[i], i == 6 ? 0 : 1, i == 6 ? 1 : 1 << 20, &v));
        *dst[i] = (int)v;
    }
    return TR_OK;
}

static tr_status parse_files(const ctx *c, const tr_json *root, tr_ckpt_manifest *m) {
    const tr_json *files = NULL;
    TR_TRY(get(c, root, "files", TR_JSON_ARRAY, &files));
    static const char *const keys[] = {"name", "bytes", NULL};
    for (size_t i = 0; i < files->n; i++) {
        const tr_json *f = &files->items[i], *name = NULL;
        if (f->type != TR_JSON_OBJECT) return fail(c, f, "a file entry is not an object%s", "");
        TR_TRY(only_keys(c, f, keys));
        TR_TRY(get(c, f, "name", TR_JSON_STRING, &name));
        if (strlen(name->str) != name->len) return fail(c, name, "a file name holds a NUL%s", "");
        int64_t bytes;
        TR_TRY(get_int(c, f, "bytes", 0, BIG, &bytes));
        TR_TRY(tr_ckpt_manifest_add_file(m, name->str, (uint64_t)bytes, NULL));
    }
    return TR_OK;
}

static tr_status parse_shard(const ctx *c, const tr_json *s, tr_ckpt_entry *e) {
    static const char *const keys[] = {"offset", "shape", "file", "pos", "bytes", "xxh3", NULL};
    if (s->type != TR_JSON_OBJECT) return fail(c, s, "a shard is not an object%s", "");
    TR_TRY(only_keys(c, s, keys));
    tr_ckpt_shard sh;
    memset(&sh, 0, sizeof sh);
    int n_off, n_shape;
    TR_TRY(get_dims(c, s, "offset", 0, sh.slice.offset, &n_off));
    TR_TRY(get_dims(c, s, "shape", 1, sh.slice.shape, &n_shape));
    if (n_off != e->ndim || n_shape != e->ndim)
        return fail(c, s, "a shard of '%s' has the wrong number of dimensions", e->name);
    sh.slice.ndim = e->ndim;
    int64_t file, pos, bytes;
    TR_TRY(get_int(c, s, "file", 0, 1 << 30, &file));
    TR_TRY(get_int(c, s, "pos", 0, BIG, &pos));
    TR_TRY(get_int(c, s, "bytes", 0, BIG, &bytes));
    TR_TRY(get_hex64(c, s, "xxh3", &sh.xxh3));
    sh.file = (int)file;
    sh.pos = (uint64_t)pos;
    sh.bytes = (uint64_t)bytes;
    return tr_ckpt_entry_add_shard(e, &sh);
}

static tr_status parse_tensor(const ctx *c, const tr_json *t, tr_ckpt_manifest *m) {
    static const char *const keys[] = {"name",    "dtype",   "shape",  "tp_axis",
                                       "pp_axis", "dp_axis", "shards", NULL};
    if (t->type != TR_JSON_OBJECT) return fail(c, t, "a tensor entry is not an object%s", "");
    TR_TRY(only_keys(c, t, keys));
    const tr_json *name = NULL, *dtype = NULL, *shards = NULL;
    TR_TRY(get(c, t, "name", TR_JSON_STRING, &name));
    if (!name->len || strlen(name->str) != name->len)
        return fail(c, name, "a tensor name is empty or holds a NUL%s", "");
    TR_TRY(get(c, t, "dtype", TR_JSON_STRING, &dtype));
    tr_ckpt_entry proto;
    memset(&proto, 0, sizeof proto);
    proto.name = name->str;
    int dt = tr_ckpt_dtype_parse(dtype->str);
    if (dt < 0) return fail(c, dtype, "unknown dtype '%s'", dtype->str);
    proto.dtype = (tr_ckpt_dtype)dt;
    TR_TRY(get_dims(c, t, "shape", 1, proto.shape, &proto.ndim));
    int64_t ax[3];
    const char *axis_keys[] = {"tp_axis", "pp_axis", "dp_axis"};
    for (int i = 0; i < 3; i++) {
        TR_TRY(get_int(c, t, axis_keys[i], -1, proto.ndim - 1, &ax[i]));
    }
    proto.tp_axis = (int)ax[0];
    proto.pp_axis = (int)ax[1];
    proto.dp_axis = (int)ax[2];
    if (tr_ckpt_manifest_find(m, proto.name))
        return fail(c, t, "tensor '%s' is listed twice", proto.name);
    tr_ckpt_entry *e;
    TR_TRY(tr_ckpt_manifest_entry(m, &proto, &e, c->path, c->d));
    TR_TRY(get(c, t, "shards", TR_JSON_ARRAY, &shards));
    for (size_t i = 0; i < shards->n; i++) TR_TRY(parse_shard(c, &shards->items[i], e));
    return TR_OK;
}

static tr_status parse_root(const ctx *c, const tr_json *root, tr_ckpt_manifest *m) {
    if (root->type != TR_JSON_OBJECT) return fail(c, root, "the manifest is not an object%s", "");
    const tr_json *format = NULL, *code = NULL;
    TR_TRY(get(c, root, "format", TR_JSON_STRING, &format));
    if (strcmp(format->str, FORMAT_NAME) == 0)
        m->is_rank_index = false;
    else if (strcmp(format->str, RANK_FORMAT_NAME) == 0)
        m->is_rank_index = true;
    else
        return fail(c, format, "format '%s' is not a Trestle checkpoint", format->str);
    static const char *const mkeys[] = {
        "format", "version", "code_version", "iteration", "config_fingerprint",
        "world",  "layout",  "files",        "tensors",   NULL};
    static const char *const rkeys[] = {
        "format", "version", "code_version", "iteration", "config_fingerprint",
        "rank",   "files",   "tensors",      NULL};
    TR_TRY(only_keys(c, root, m->is_rank_index ? rkeys : mkeys));
    int64_t version, v;
    TR_TRY(get_int(c, root, "version", 0, 1 << 30, &version));
    if (version != TR_CKPT_FORMAT_VERSION) {
        char buf[64];
        snprintf(buf, sizeof buf, "%lld", (long long)version);
        return fail(c, root, "format version %s is not supported (this build reads version 1)",
                    buf);
    }
    TR_TRY(get(c, root, "code_version", TR_JSON_STRING, &code));
    m->code_version = strdup(code->str);
    if (!m->code_version) return TR_ERR_NOMEM;
    TR_TRY(get_int(c, root, "iteration", 0, BIG, &m->iteration));
    TR_TRY(get_hex64(c, root, "config_fingerprint", &m->config_fingerprint));
    if (m->is_rank_index) {
        TR_TRY(get_int(c, root, "rank", 0, 1 << 30, &v));
        m->rank = (int)v;
    } else {
        TR_TRY(get_int(c, root, "world", 1, 1 << 30, &v));
        m->world = (int)v;
        TR_TRY(parse_layout(c, root, m));
    }
    TR_TRY(parse_files(c, root, m));
    const tr_json *tensors = NULL;
    TR_TRY(get(c, root, "tensors", TR_JSON_ARRAY, &tensors));
    for (size_t i = 0; i < tensors->n; i++) TR_TRY(parse_tensor(c, &tensors->items[i], m));
    return TR_OK;
}

tr_status tr_ckpt_manifest_parse(const char *text, size_t len, const char *path,
                                 tr_ckpt_manifest *m, tr_diags *d) {
    tr_ckpt_manifest_init(m);
    tr_json root;
    tr_status s = tr_json_parse(text, len, path, &root, d);
    if (s != TR_OK) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        tr_diag_add(d, TR_SEV_ERROR, "checkpoint.manifest_invalid", &o, "checkpoint.load",
                    "the manifest is damaged; load another checkpoint", "%s is not valid JSON",
                    path);
        return s;
    }
    ctx c = {path, d};
    s = parse_root(&c, &root, m);
    tr_json_free(&root);
    if (s == TR_OK) s = tr_ckpt_manifest_check(m, !m->is_rank_index, path, d);
    if (s != TR_OK) tr_ckpt_manifest_free(m);
    return s;
}
