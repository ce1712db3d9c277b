/* Context parallelism (Megatron-Core's CP with TransformerEngine's p2p ring; docs/parallel.md,
 * "Context parallelism"): each sequence of S tokens is viewed as 2 x CP chunks of c = S / (2 CP)
 * and CP rank r keeps chunks r and 2CP-1-r, concatenated in that order, so every rank holds the
 * same share of the causal work. Everything outside attention is per token and runs on the local
 * 2c rows unchanged (positions are the global ones); attention is the ring below.
 *
 * Call sequence: tr_cp_create once per model (sizes of the local rows), then per layer and
 * microbatch tr_cp_attn_fwd in place of tr_ops.attention_fwd and tr_cp_attn_bwd in place of
 * attention_bwd, on the same tensors and descriptor; tr_cp_free at the end. The ring is
 * collective over the CP group: every CP rank makes the same calls in the same order. */
#ifndef TR_RUNTIME_CONTEXT_PARALLEL_CP_H
#define TR_RUNTIME_CONTEXT_PARALLEL_CP_H

#include <stdint.h>

#include "kernels/ops.h"

struct tr_comm;
struct tr_device;

/* cp_comm_type: the p2p ring, all_gather (Megatron's "allgather": every rank gathers the
 * whole sequence's K and V at once, the dK/dV are reduce-scattered back; no overlap), or a2a
 * (Ulysses: all-to-alls trade heads for sequence, then each rank attends the whole sequence
 * for its share of the heads). */
enum { TR_CP_P2P, TR_CP_ALL_GATHER, TR_CP_A2A };

typedef struct tr_cp {
    int size, rank; /* the CP group */
    int type;       /* TR_CP_* */
    struct tr_comm *comm;
    int group;
    struct tr_device *dev;
    const tr_ops *ops;
    int batch, seq, heads, groups, head_dim; /* seq: the local 2c rows */
    /* Device buffers: the KV block being received while the current one is used (k, v), the
     * dK/dV travelling with it in backward, this step's own contribution, and one c-row block
     * of the attention's outputs and gradients. */
    float *kv[2][2], *dkv[2][2], *dstep[2];
    float *o_blk, *lse_blk, *dq_blk, *dk_blk, *dv_blk;
    /* all_gather: every rank's K and V, [size][B, 2c, G, D], and their gradients. a2a: the
     * whole sequence of this rank's heads, [B, S, H / size, D] for q, out, dout, dq (in
     * ag_q, ag_o, ag_do, ag_dq), [B, S, G / size, D] for k, v and their gradients (in ag_k,
     * ag_v, ag_dk, ag_dv), the exchange's send and receive blocks, and the whole sequence's
     * document starts. */
    float *ag_k, *ag_v, *ag_dk, *ag_dv;
    float *ag_q, *ag_o, *ag_do, *ag_dq, *a2a_send, *a2a_recv;
    int32_t *ag_ds, *ag_ds_host;
    /* Packed sequences: the host's copy of the local document starts and the documents
     * (start, length) of each row found in it. */
    int32_t *ds_host, *seg_start, *seg_len; /* [batch * seq] */
    int *n_seg;
} tr_cp;

/* The global position of local row t (0 <= t < seq_local) of CP rank `rank` of `size` (t
 * itself for size 1). */
int64_t tr_cp_global_pos(int size, int rank, int seq_local, int t);
/* How many local rows from t on (before `end`) hold consecutive tokens of the whole sequence. */
int tr_cp_run(int size, int seq_local, int t, int end);

/* This rank's rows of one sequence: local[t] = full[tr_cp_global_pos(t)] for the seq_full /
 * size local rows (seq_full divisible by 2 size). */
void tr_cp_take(int size, int rank, const int32_t *full, int seq_full, int32_t *local);

/* Packed sequences (documents): each document of a sequence is split on its own, as a sequence
 * is, into 2 x size pieces of which this rank keeps pieces rank and 2 size-1-rank; the local
 * row is those pairs, document after document. index[t] (seq_full / size entries) is the
 * position in the whole sequence of local row t and local_doc_start[t] the local row its
 * document starts at (NULL: not wanted). doc_start is the whole sequence's (tr_attn_desc's
 * form), NULL for one document. TR_ERR_INVALID when a document's length is not a multiple of
 * 2 x size (dataset.pad_seq_to_mult pads them to one). */
tr_status tr_cp_index(int size, int rank, const int32_t *doc_start, int seq_full, int32_t *index,
                      int32_t *local_doc_start);

/* The device buffers of one exchange type, in the order tr_cp_create (TR_CP_P2P: the ring's),
 * tr_cp_use_all_gather and tr_cp_use_a2a allocate them (the last two on top of the ring's):
 * their sizes in bytes in bytes[0..n), n returned (0: invalid shape). The runtime allocates with
 * these sizes and the planner (runtime/plan) sizes a CP rank's activations with them. */
enum { TR_CP_MAX_BUFFERS = 16 };
int tr_cp_buffer_bytes(int type, int size, int batch, int seq_local, int heads, int groups,
                       int head_dim, int64_t *bytes);

/* Buffers for micro batches of `batch` sequences of seq_local rows of this rank (even), heads
 * and groups of this TP rank, on dev; the ring runs over group `group` of comm (size > 1). */
tr_status tr_cp_create(tr_cp *cp, struct tr_device *dev, struct tr_comm *comm, int group, int batch,
                       int seq_local, int heads, int groups, int head_dim);
void tr_cp_free(tr_cp *cp);
/* Switches to the all_gather exchange (its whole-sequence buffers on the device). */
tr_status tr_cp_use_all_gather(tr_cp *cp);
/* Switches to the a2a exchange (Ulysses: heads scattered, the sequence gathered; heads and
 * groups divisible by the CP size, else TR_ERR_INVALID). */
tr_status tr_cp_use_a2a(tr_cp *cp);

/* Causal attention over the whole sequence for this rank's queries: q, out [B, 2c, H, D], k, v
 * [B, 2c, G, D] (local rows), lse [B, H, 2c]; d describes the local tensors (seq = 2c, causal,
 * no dropout; with a document mask, the local rows as tr_cp_index lays them out: every
 * document's two pieces, each document attending only to itself). The KV blocks of the other ranks
 * arrive over the ring while the current one is used; the partial outputs meet by log-sum-exp. */
tr_status tr_cp_attn_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d);

/* Its backward (dq, dk, dv overwritten): the KV blocks travel the ring again with the dK/dV
 * accumulated for them, which reach their owner after the last step. */
tr_status tr_cp_attn_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *out,
                         const float *lse, const tr_attn_desc *d);

/* Bytes this rank sends over the ring per attention forward and backward of one microbatch:
 * forward size-1 KV blocks; backward size-1 KV blocks and size dK/dV blocks (p2p). */
int64_t tr_cp_ring_bytes_fwd(const tr_cp *cp);
int64_t tr_cp_ring_bytes_bwd(const tr_cp *cp);

#endif
