/* Logical tensors and slices: the vocabulary shared by the writer, the reader and the tools. */
#include <string.h>

#include "runtime/checkpoint/ckpt.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[TR_CKPT_DTYPE_COUNT] = {
    [TR_CKPT_F32] = {"f32", 4},   [TR_CKPT_F64] = {"f64", 8}, [TR_CKPT_F16] = {"f16", 2},
    [TR_CKPT_BF16] = {"bf16", 2}, [TR_CKPT_I64] = {"i64", 8}, [TR_CKPT_I32] = {"i32", 4},
    [TR_CKPT_U8] = {"u8", 1},
};

const char *tr_ckpt_dtype_name(tr_ckpt_dtype t) {
    return (unsigned)t < TR_CKPT_DTYPE_COUNT ? DTYPES[t].name : "?";
}

size_t tr_ckpt_dtype_size(tr_ckpt_dtype t) {
    return (unsigned)t < TR_CKPT_DTYPE_COUNT ? DTYPES[t].size : 0;
}

int tr_ckpt_dtype_parse(const char *name) {
    for (int i = 0; i < TR_CKPT_DTYPE_COUNT; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return i;
    return -1;
}

int64_t tr_ckpt_slice_volume(const tr_ckpt_slice *s) {
    int64_t v = 1;
    for (int i = 0; i < s->ndim; i++) v *= s->shape[i];
    return v;
}

bool tr_ckpt_slice_overlap(const tr_ckpt_slice *a, const tr_ckpt_slice *b, tr_ckpt_slice *out) {
    if (a->ndim != b->ndim) return false;
    out->ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) {
        int64_t lo = a->offset[i] > b->offset[i] ? a->offset[i] : b->offset[i];
        int64_t ha = a->offset[i] + a->shape[i], hb = b->offset[i] + b->shape[i];
        int64_t hi = ha < hb ? ha : hb;
        if (hi <= lo) return false;
        out->offset[i] = lo;
        out->shape[i] = hi - lo;
    }
    return true;
}

bool tr_ckpt_slice_equal(const tr_ckpt_slice *a, const tr_ckpt_slice *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->offset[i] != b->offset[i] || a->shape[i] != b->shape[i]) return false;
    return true;
}

tr_ckpt_tensor tr_ckpt_tensor_full(const char *name, tr_ckpt_dtype dtype, int ndim,
                                   const int64_t *global_shape, void *data) {
    tr_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dtype;
    t.ndim = ndim;
    t.slice.ndim = ndim;
    for (int i = 0; i < ndim && i < TR_CKPT_MAX_DIMS; i++) {
        t.global_shape[i] = global_shape[i];
        t.slice.shape[i] = global_shape[i];
    }
    t.tp_axis = t.pp_axis = t.dp_axis = -1;
    t.data = data;
    return t;
}

void tr_ckpt_tensor_split(tr_ckpt_tensor *t, int axis, int64_t parts, int64_t index) {
    if (axis < 0 || axis >= t->ndim || parts <= 0 || index < 0 || index >= parts) return;
    int64_t base = t->slice.offset[axis], len = t->slice.shape[axis];
    int64_t block = len / parts;
    t->slice.offset[axis] = base + index * block;
    t->slice.shape[axis] = index == parts - 1 ? len - index * block : block;
}

void tr_ckpt_tensor_spread(tr_ckpt_tensor *t, int index, int group) {
    if (group <= 1 || index < 0 || index >= group || t->ndim < 1) return;
    int64_t rows = t->slice.shape[0];
    int parts = rows < group ? (int)rows : group;
    if (index >= parts) {
        t->replica_id = 1;
        return;
    }
    size_t row_bytes = tr_ckpt_dtype_size(t->dtype);
    for (int i = 1; i < t->ndim; i++) row_bytes *= (size_t)t->slice.shape[i];
    int64_t before = t->slice.offset[0];
    tr_ckpt_tensor_split(t, 0, parts, index);
    t->data = (char *)t->data + (size_t)(t->slice.offset[0] - before) * row_bytes;
    t->replica_id = 0;
}

const char *tr_ckpt_tensor_kind(const char *name) {
    if (strncmp(name, "optimizer.", 10) == 0) return "optimizer";
    if (strncmp(name, "rng.", 4) == 0) return "rng";
    if (strchr(name, '.') == NULL || strncmp(name, "scheduler.", 10) == 0 ||
        strncmp(name, "data.", 5) == 0)
        return "state";
    return "model";
}

void tr_ckpt_layout_init(tr_ckpt_layout *l) {
    l->tp = l->pp = l->vpp = l->dp = l->cp = l->ep = 1;
    l->dist_opt = 0;
}
