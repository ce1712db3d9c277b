/* See runtime/train/state_dict.h. */
#include "runtime/train/state_dict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tr_ckpt_list_free(tr_ckpt_list *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->t);
    memset(l, 0, sizeof *l);
}

static tr_status list_push(tr_ckpt_list *l, const char *name, const tr_ckpt_tensor *t) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        tr_ckpt_tensor *nt = realloc(l->t, (size_t)cap * sizeof *nt);
        if (!nt) return TR_ERR_NOMEM;
        l->t = nt;
        char **nn = realloc(l->names, (size_t)cap * sizeof *nn);
        if (!nn) return TR_ERR_NOMEM;
        l->names = nn;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return TR_ERR_NOMEM;
    l->t[l->n] = *t;
    l->t[l->n].name = copy;
    l->names[l->n++] = copy;
    return TR_OK;
}

tr_ckpt_param_role tr_train_ckpt_param_role(const tr_train_ckpt *k, int i) {
    const tr_param_info *p = &k->env.model->info[i];
    /* A pipeline stage holds only its own layers, so everything it holds is written by it,
     * except the last stage's copy of the word embedding (the first stage writes that tensor). */
    return p->tied_copy ? TR_CKPT_PARAM_LOADS : TR_CKPT_PARAM_WRITES;
}

/* One local block of a parameter: a [rows, cols] row-major piece at (row0, col0) of a logical
 * [full_rows, full_cols] tensor, optionally one layer of a stack. */
typedef struct block {
    const char *kind; /* the name without the layer prefix */
    int layer;        /* -1: not a layer parameter */
    int64_t full_rows, full_cols, row0, col0, rows, cols;
    int tp_dim;  /* the dimension TP splits (-1: none) */
    bool expert; /* tr_param_info.expert */
    /* TP larger than the query groups: the key-value block that this many consecutive TP ranks
     * hold copies of (0: a block of this TP rank's own). */
    int kv_rep;
    float *data;
} block;

/* Which holders share a slice: TP-split tensors are replicated over DP only (a key-value block
 * over its group's TP ranks too); an expert-parallel rank's experts over expert DP; the rest over
 * TP and DP. Sets *index (this rank among them) and returns their number. */
static int replica_group(const tr_train_ckpt *k, int split_dim, int kv_rep, bool expert,
                         int *index) {
    if (expert) { /* an EP rank's own expert: copies on its expert-DP group only */
        *index = k->edp_rank;
        return k->edp;
    }
    if (kv_rep > 1) {
        *index = k->tp_rank % kv_rep + kv_rep * k->dp_rank;
        return kv_rep * k->dp;
    }
    if (split_dim >= 0) {
        *index = k->dp_rank;
        return k->dp;
    }
    *index = k->tp_rank + k->tp * k->dp_rank;
    return k->tp * k->dp;
}

static tr_status add_block(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix,
                           const block *b, tr_ckpt_param_role role, int split_dim, int turn,
                           bool for_save) {
    char name[192];
    tr_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = TR_CKPT_F32;
    t.tp_axis = t.pp_axis = t.dp_axis = -1;
    t.data = b->data;
    int d = 0;
    if (b->layer >= 0) {
        snprintf(name, sizeof name, "%sdecoder.layers.%s", prefix, b->kind);
        t.global_shape[0] = k->env.model->full.num_layers;
        t.slice.offset[0] = b->layer;
        t.slice.shape[0] = 1;
        t.pp_axis = 0;
        d = 1;
    } else {
        snprintf(name, sizeof name, "%s%s", prefix, b->kind);
    }
    t.global_shape[d] = b->full_rows;
    t.global_shape[d + 1] = b->full_cols;
    t.slice.offset[d] = b->row0;
    t.slice.offset[d + 1] = b->col0;
    t.slice.shape[d] = b->rows;
    t.slice.shape[d + 1] = b->cols;
    t.ndim = t.slice.ndim = d + 2;
    if (b->tp_dim >= 0) t.tp_axis = d + b->tp_dim;
    int index = 0, group = replica_group(k, split_dim, b->kv_rep, b->expert, &index);
    if (role == TR_CKPT_PARAM_LOADS) {
        t.replica_id = 1 + index;
    } else if (for_save && k->env.c->checkpoint.fully_parallel_save && group > 1) {
        /* Spread the writes of a replicated tensor over its holders: big slices by rows, whole
         * small ones (one layer of a stack) in turns; the turn depends only on the parameter,
         * so every holder agrees on it. */
        if (t.slice.shape[0] >= group) {
            tr_ckpt_tensor_spread(&t, index, group);
        } else {
            int writer = turn % group;
            t.replica_id = (index - writer + group) % group;
        }
    } else {
        t.replica_id = index;
    }
    return list_push(l, name, &t);
}

/* TP larger than the query groups: the shard's split dimension is the rank's own query rows,
 * then its group's key and value rows (see tr_model_logical_index): two blocks of the logical
 * tensor, the second held by each of the group's kv_rep TP ranks and written by one. */
static tr_status add_kv_blocks(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix,
                               const block *b, const tr_param_info *p, tr_ckpt_param_role role,
                               int turn, bool for_save) {
    int64_t group = k->tp_rank / p->kv_rep, sub = k->tp_rank % p->kv_rep;
    int64_t start = group * ((int64_t)p->kv_rep * p->kv_q + p->kv_len);
    block q = *b, kv = *b;
    kv.kv_rep = p->kv_rep;
    if (p->split_dim == 0) {
        q.rows = p->kv_q;
        q.row0 = start + sub * p->kv_q;
        kv.rows = p->kv_len;
        kv.row0 = start + (int64_t)p->kv_rep * p->kv_q;
        kv.data = b->data + (int64_t)p->kv_q * p->cols;
    } else { /* the bias: one row */
        q.cols = p->kv_q;
        q.col0 = start + sub * p->kv_q;
        kv.cols = p->kv_len;
        kv.col0 = start + (int64_t)p->kv_rep * p->kv_q;
        kv.data = b->data + p->kv_q;
    }
    TR_TRY(add_block(l, k, prefix, &q, role, p->split_dim, turn, for_save));
    return add_block(l, k, prefix, &kv, role, p->split_dim, turn + 1, for_save);
}

/* SwiGLU's split fc1 kept as one logical [gate; up] tensor: this shard's slice of each half
 * (tr_model_logical_index), at rank x half in the gate half and again in the up half. */
static tr_status add_gate_up_blocks(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix,
                                    const block *b, const tr_param_info *p, tr_tp_shard sh,
                                    tr_ckpt_param_role role, int turn, bool for_save) {
    for (int part = 0; part < 2; part++) {
        block half = *b;
        if (p->split_dim == 0) {
            half.rows = b->rows / 2;
            half.row0 = (int64_t)part * b->full_rows / 2 + (int64_t)sh.rank * half.rows;
            half.data = b->data + (int64_t)part * half.rows * b->cols;
        } else {
            half.cols = b->cols / 2;
            half.col0 = (int64_t)part * b->full_cols / 2 + (int64_t)sh.rank * half.cols;
            half.data = b->data + (int64_t)part * half.cols;
        }
        TR_TRY(add_block(l, k, prefix, &half, role, p->split_dim, turn + part, for_save));
    }
    return TR_OK;
}

static bool is_vocab_param(const char *name) {
    return strcmp(name, "embedding.word_embeddings.weight") == 0 ||
           strcmp(name, "output_layer.weight") == 0;
}

tr_status tr_ckpt_list_add_params(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix,
                                  float *base, int turn0, bool for_save) {
    const tr_model *m = k->env.model;
    for (int i = 0; i < m->n_info; i++) {
        if (k->trainable_only && m->info[i].frozen) continue;
        TR_TRY(tr_ckpt_list_add_param(l, k, prefix, i, base + m->info[i].offset, turn0, for_save));
    }
    return TR_OK;
}

tr_status tr_ckpt_list_add_param(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix, int i,
                                 float *data, int turn0, bool for_save) {
    const tr_model *m = k->env.model;
    const tr_param_info *p = &m->info[i];
    tr_ckpt_param_role role = tr_train_ckpt_param_role(k, i);
    block b = {.kind = p->name,
               .layer = -1,
               .full_rows = p->full_rows,
               .full_cols = p->full_cols,
               .rows = p->rows,
               .cols = p->cols,
               .tp_dim = p->split_dim,
               .expert = p->expert,
               .data = data};
    int consumed = 0;
    /* An MoE model's MLP tensors (routers, experts, the dense layers' MLPs) exist in some
     * layers only: one logical tensor per layer (and per expert), not a stack. */
    if (sscanf(p->name, "decoder.layers.%d.%n", &b.layer, &consumed) == 1 && consumed > 0 &&
        !(m->full.moe.experts > 0 && strncmp(p->name + consumed, "mlp.", 4) == 0))
        b.kind = p->name + consumed;
    else
        b.layer = -1;
    /* The same kind of parameter in successive layers goes to successive writers. */
    int layer_turn = b.layer > 0 ? b.layer : 0;
    if (p->kv_rep > 1)
        return add_kv_blocks(l, k, prefix, &b, p, role, turn0 + i + layer_turn, for_save);
    /* an expert's shard under expert TP is replicated over expert DP only, like its whole
     * tensor under EP: no TP axis (any TP loads it) */
    tr_tp_shard sh = tr_model_param_shard(m, p);
    if (p->expert) b.tp_dim = -1;
    if (p->split_dim == 0) b.row0 = (int64_t)sh.rank * p->rows;
    if (p->split_dim == 1) b.col0 = (int64_t)sh.rank * p->cols;
    /* Padding rows of the vocabulary depend on TP: only the real ids are stored. */
    if (is_vocab_param(p->name) && m->full.vocab_real > 0 && m->full.vocab_real < b.full_rows) {
        b.full_rows = m->full.vocab_real;
        if (b.row0 + b.rows > b.full_rows) b.rows = b.full_rows - b.row0;
        if (b.rows <= 0) return TR_OK;
    }
    /* LoRA's fc1 adapter: B's rows are [gate; up] like the layer's, A is one tensor. */
    bool gate_up = m->full.swiglu && b.layer >= 0 && strncmp(b.kind, "mlp.linear_fc1.", 15) == 0 &&
                   !strstr(b.kind, "adapter.linear_in");
    /* A whole-named SwiGLU fc1 (an MoE model's experts and dense MLPs): the shard's slices of
     * gate and of up are two blocks of the one logical [gate; up] tensor. */
    if (!gate_up && p->swiglu_split && b.layer < 0)
        return add_gate_up_blocks(l, k, prefix, &b, p, sh, role, turn0 + i, for_save);
    if (!gate_up)
        return add_block(l, k, prefix, &b, role, p->split_dim, turn0 + i + layer_turn, for_save);
    /* SwiGLU's fc1 holds [gate; up] (each TP rank its slice of both, see
     * tr_model_logical_index): two logical tensors, so that any TP concatenates them the
     * same way. The weight stacks along rows, the bias (one row) along columns. */
    int dim = p->rows > 1 ? 0 : 1;
    char kind[96];
    const char *leaf = b.kind + 15;
    block half = b;
    half.kind = kind;
    half.tp_dim = dim;
    for (int part = 0; part < 2; part++) {
        snprintf(kind, sizeof kind, "mlp.linear_fc1.%s.%s", part ? "up" : "gate", leaf);
        if (dim == 0) {
            half.full_rows = b.full_rows / 2;
            half.rows = b.rows / 2;
            half.row0 = (int64_t)m->tp.rank * half.rows;
            half.data = b.data + (int64_t)part * half.rows * b.cols;
        } else {
            half.full_cols = b.full_cols / 2;
            half.cols = b.cols / 2;
            half.col0 = (int64_t)m->tp.rank * half.cols;
            half.data = b.data + (int64_t)part * half.cols;
        }
        TR_TRY(add_block(l, k, prefix, &half, role, p->split_dim, turn0 + i + layer_turn + part,
                         for_save));
    }
    return TR_OK;
}

tr_status tr_ckpt_list_add_scalar(tr_ckpt_list *l, const tr_train_ckpt *k, const char *name,
                                  int64_t *value) {
    tr_ckpt_tensor t = tr_ckpt_tensor_full(name, TR_CKPT_I64, 0, NULL, value);
    t.replica_id = k->rank;
    return list_push(l, name, &t);
}

tr_status tr_ckpt_list_add_f64(tr_ckpt_list *l, const tr_train_ckpt *k, const char *name,
                               double *values, int64_t n) {
    tr_ckpt_tensor t = tr_ckpt_tensor_full(name, TR_CKPT_F64, 1, &n, values);
    t.replica_id = k->rank;
    return list_push(l, name, &t);
}
