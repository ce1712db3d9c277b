/* Internal to runtime/context_parallel/: the blocks both exchanges compute (blocks.c) and the
 * buffers' sizes (buffers.c). A block is piece qh of one document of row b against piece kh of
 * the same document as rank `owner` holds it: step i of rank r meets the KV of owner
 * r - i (mod CP). */
#ifndef TR_RUNTIME_CONTEXT_PARALLEL_INTERNAL_H
#define TR_RUNTIME_CONTEXT_PARALLEL_INTERNAL_H

#include <stdbool.h>

#include "runtime/context_parallel/cp.h"

/* One block: piece qh of document `seg` of row b against piece kh of the same document held
 * by rank `owner` (the KV block's). */
typedef struct tr_cp_block {
    int b, p;       /* the row; rows of each piece */
    int64_t qr, kr; /* first rows of the pieces in [B, 2c, .] */
    int64_t lse;    /* the query piece's first lse entry in [B, H, 2c] */
    int64_t gq, gk; /* the pieces' first tokens in the whole sequence */
    bool causal;    /* a piece against itself */
} tr_cp_block;

/* K (or V) of this rank's rows: B x 2c x G x D floats. */
int64_t tr_cp_kv_numel(const tr_cp *cp);
/* d describes the local tensors the ring was made for (causal). */
tr_status tr_cp_check_desc(const tr_cp *cp, const tr_attn_desc *d);
/* The documents of each local row, from d's document mask (one per row without). */
tr_status tr_cp_find_segments(tr_cp *cp, const tr_attn_desc *d);
tr_cp_block tr_cp_block_at(const tr_cp *cp, int b, int seg, int qh, int kh, int owner);
tr_attn_desc tr_cp_block_desc(const tr_cp *cp, const tr_attn_desc *d, const tr_cp_block *k);
/* Step i's (query piece, key piece) pairs, and the KV block's owner. */
int tr_cp_step_blocks(const tr_cp *cp, int i, int qh[3], int kh[3], int *owner);
/* Whether step 0 runs as one call on the local rows (no dropout) instead of its blocks. */
bool tr_cp_step0_whole(const tr_attn_desc *d);
/* Step i's forward against the owner's K, V (ck, cv), merged into out and lse. */
tr_status tr_cp_fwd_blocks(tr_cp *cp, int i, float *out, float *lse, const float *q,
                           const float *ck, const float *cv, const tr_attn_desc *d);
/* Step i's backward: dq accumulates (zeroed at step 0), the owner's dK/dV share into dkv_k,
 * dkv_v (zeroed first). */
tr_status tr_cp_bwd_blocks(tr_cp *cp, int i, float *dq, float *dkv_k, float *dkv_v,
                           const float *dout, const float *q, const float *ck, const float *cv,
                           const float *out, const float *lse, const tr_attn_desc *d);

/* The all_gather exchange (gather.c), behind tr_cp_attn_fwd / _bwd. */
tr_status tr_cp_ag_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                       const float *v, const tr_attn_desc *d);
tr_status tr_cp_ag_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                       const float *q, const float *k, const float *v, const float *out,
                       const float *lse, const tr_attn_desc *d);
/* The a2a exchange (a2a.c). */
tr_status tr_cp_a2a_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                        const float *v, const tr_attn_desc *d);
tr_status tr_cp_a2a_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *out,
                        const float *lse, const tr_attn_desc *d);

#endif
