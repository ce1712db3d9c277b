/* The ring's buffers (runtime/context_parallel/cp.h): the KV and dK/dV blocks in flight, one
 * block's outputs and gradients, the host's view of the documents; the all-gather exchange's
 * whole-sequence K, V and their gradients. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/context_parallel/internal.h"
#include "runtime/device/device.h"

int64_t tr_cp_kv_numel(const tr_cp *cp) {
    return (int64_t)cp->batch * cp->seq * cp->groups * cp->head_dim;
}

int tr_cp_buffer_bytes(int type, int size, int batch, int seq_local, int heads, int groups,
                       int head_dim, int64_t *bytes) {
    if (size < 2 || batch < 1 || seq_local < 2 || seq_local % 2 || heads < 1 || groups < 1 ||
        heads % groups || head_dim < 1)
        return 0;
    int64_t f = (int64_t)sizeof(float), kv = (int64_t)batch * seq_local * groups * head_dim * f;
    int64_t c = seq_local / 2, n = 0;
    if (type == TR_CP_P2P) {
        for (int i = 0; i < 10; i++) bytes[n++] = kv; /* kv[2][2], dkv[2][2], dstep[2] */
        bytes[n++] = c * heads * head_dim * f;        /* o_blk */
        bytes[n++] = c * heads * head_dim * f;        /* dq_blk */
        bytes[n++] = c * groups * head_dim * f;       /* dk_blk */
        bytes[n++] = c * groups * head_dim * f;       /* dv_blk */
        bytes[n++] = c * heads * f;                   /* lse_blk */
    } else if (type == TR_CP_ALL_GATHER) {
        for (int i = 0; i < 4; i++) bytes[n++] = size * kv;
    } else if (type == TR_CP_A2A) {
        if (heads % size || groups % size) return 0;
        int64_t q = (int64_t)batch * seq_local * heads * head_dim * f;
        for (int i = 0; i < 4; i++) bytes[n++] = q;  /* ag_q, ag_o, ag_do, ag_dq */
        for (int i = 0; i < 4; i++) bytes[n++] = kv; /* ag_k, ag_v, ag_dk, ag_dv */
        bytes[n++] = q, bytes[n++] = q;              /* a2a_send, a2a_recv */
        bytes[n++] = (int64_t)batch * seq_local * size * (int64_t)sizeof(int32_t); /* ag_ds */
    }
    return (int)n;
}

tr_status tr_cp_create(tr_cp *cp, struct tr_device *dev, struct tr_comm *comm, int group, int batch,
                       int seq_local, int heads, int groups, int head_dim) {
    memset(cp, 0, sizeof *cp);
    if (!dev || !comm || batch < 1 || seq_local < 2 || seq_local % 2 || heads < 1 || groups < 1 ||
        heads % groups || head_dim < 1)
        return TR_ERR_INVALID;
    cp->size = tr_comm_group_size(comm, group);
    cp->rank = tr_comm_group_rank(comm, group);
    if (cp->size < 2 || cp->rank < 0) return TR_ERR_INVALID;
    cp->comm = comm, cp->group = group, cp->dev = dev, cp->ops = tr_device_ops(dev);
    cp->batch = batch, cp->seq = seq_local, cp->heads = heads, cp->groups = groups;
    cp->head_dim = head_dim;
    int64_t bytes[TR_CP_MAX_BUFFERS];
    int nb =
        tr_cp_buffer_bytes(TR_CP_P2P, cp->size, batch, seq_local, heads, groups, head_dim, bytes);
    float **want[] = {&cp->kv[0][0],  &cp->kv[0][1],  &cp->kv[1][0],  &cp->kv[1][1], &cp->dkv[0][0],
                      &cp->dkv[0][1], &cp->dkv[1][0], &cp->dkv[1][1], &cp->dstep[0], &cp->dstep[1],
                      &cp->o_blk,     &cp->dq_blk,    &cp->dk_blk,    &cp->dv_blk,   &cp->lse_blk};
    if (nb != (int)(sizeof want / sizeof want[0])) return TR_ERR_INVALID;
    size_t rows = (size_t)batch * (size_t)seq_local;
    cp->ds_host = malloc(rows * sizeof *cp->ds_host);
    cp->seg_start = malloc(rows * sizeof *cp->seg_start);
    cp->seg_len = malloc(rows * sizeof *cp->seg_len);
    cp->n_seg = malloc((size_t)batch * sizeof *cp->n_seg);
    if (!cp->ds_host || !cp->seg_start || !cp->seg_len || !cp->n_seg) {
        tr_cp_free(cp);
        return TR_ERR_NOMEM;
    }
    for (int i = 0; i < nb; i++) {
        tr_status st = tr_device_alloc(dev, TR_MEM_ACTIVATIONS, (size_t)bytes[i], (void **)want[i]);
        if (st != TR_OK) {
            tr_cp_free(cp);
            return st;
        }
    }
    return TR_OK;
}

tr_status tr_cp_use_all_gather(tr_cp *cp) {
    int64_t bytes[TR_CP_MAX_BUFFERS];
    int nb = tr_cp_buffer_bytes(TR_CP_ALL_GATHER, cp->size, cp->batch, cp->seq, cp->heads,
                                cp->groups, cp->head_dim, bytes);
    float **all[] = {&cp->ag_k, &cp->ag_v, &cp->ag_dk, &cp->ag_dv};
    if (nb != 4) return TR_ERR_INVALID;
    for (int i = 0; i < 4; i++)
        if (!*all[i])
            TR_TRY(tr_device_alloc(cp->dev, TR_MEM_ACTIVATIONS, (size_t)bytes[i], (void **)all[i]));
    cp->type = TR_CP_ALL_GATHER;
    return TR_OK;
}

tr_status tr_cp_use_a2a(tr_cp *cp) {
    int64_t bytes[TR_CP_MAX_BUFFERS];
    int nb = tr_cp_buffer_bytes(TR_CP_A2A, cp->size, cp->batch, cp->seq, cp->heads, cp->groups,
                                cp->head_dim, bytes);
    float **want[] = {&cp->ag_q, &cp->ag_o,  &cp->ag_do, &cp->ag_dq,    &cp->ag_k,
                      &cp->ag_v, &cp->ag_dk, &cp->ag_dv, &cp->a2a_send, &cp->a2a_recv};
    int nf = (int)(sizeof want / sizeof want[0]);
    if (nb != nf + 1) return TR_ERR_INVALID;
    for (int i = 0; i < nf; i++)
        if (!*want[i])
            TR_TRY(
                tr_device_alloc(cp->dev, TR_MEM_ACTIVATIONS, (size_t)bytes[i], (void **)want[i]));
    if (!cp->ag_ds) /* the gathered document starts, the last entry of the sizes */
        TR_TRY(
            tr_device_alloc(cp->dev, TR_MEM_ACTIVATIONS, (size_t)bytes[nf], (void **)&cp->ag_ds));
    size_t rows = (size_t)cp->batch * (size_t)cp->seq * (size_t)cp->size;
    if (!cp->ag_ds_host) cp->ag_ds_host = malloc(rows * sizeof(int32_t));
    if (!cp->ag_ds_host) return TR_ERR_NOMEM;
    cp->type = TR_CP_A2A;
    return TR_OK;
}

void tr_cp_free(tr_cp *cp) {
    free(cp->ds_host), free(cp->seg_start), free(cp->seg_len), free(cp->n_seg);
    cp->ds_host = cp->seg_start = cp->seg_len = NULL;
    cp->n_seg = NULL;
    if (!cp->dev) return;
    free(cp->ag_ds_host);
    cp->ag_ds_host = NULL;
    if (cp->ag_ds) tr_device_free(cp->dev, TR_MEM_ACTIVATIONS, cp->ag_ds);
    cp->ag_ds = NULL;
    float **ag[] = {&cp->ag_k, &cp->ag_v,  &cp->ag_dk, &cp->ag_dv,    &cp->ag_q,
                    &cp->ag_o, &cp->ag_do, &cp->ag_dq, &cp->a2a_send, &cp->a2a_recv};
    for (int i = 9; i >= 0; i--) {
        tr_device_free(cp->dev, TR_MEM_ACTIVATIONS, *ag[i]);
        *ag[i] = NULL;
    }
    float **all[] = {&cp->kv[0][0],  &cp->kv[0][1],  &cp->kv[1][0],  &cp->kv[1][1], &cp->dkv[0][0],
                     &cp->dkv[0][1], &cp->dkv[1][0], &cp->dkv[1][1], &cp->dstep[0], &cp->dstep[1],
                     &cp->o_blk,     &cp->dq_blk,    &cp->dk_blk,    &cp->dv_blk,   &cp->lse_blk};
    /* Newest first: the CUDA arena releases its most recent allocation at once. */
    for (int i = (int)(sizeof all / sizeof all[0]) - 1; i >= 0; i--) {
        tr_device_free(cp->dev, TR_MEM_ACTIVATIONS, *all[i]);
        *all[i] = NULL;
    }
    cp->dev = NULL;
}
