/* Megatron's tensor-parallel mappings on the TP group, as the model uses them. Without sequence
 * parallelism the activations outside the TP regions are replicated on every TP rank:
 *   - entering a column-parallel region is the identity forward and an all-reduce of the input
 *     gradient backward;
 *   - leaving a row-parallel region (and the vocab-parallel embedding) all-reduces forward and is
 *     the identity backward.
 * With sequence parallelism (spec.sequence_parallel) the activations outside the TP regions are
 * split along the sequence: rank r holds tokens [r*T/tp, (r+1)*T/tp) of every sequence of the
 * microbatch, rows [b][T/tp]. Entering a TP region all-gathers them (backward: reduce-scatter),
 * leaving it reduce-scatters (backward: all-gather).
 * Every call is a no-op on a model with one shard. */
#ifndef TR_RUNTIME_TENSOR_PARALLEL_H
#define TR_RUNTIME_TENSOR_PARALLEL_H

#include <stdint.h>

#include "runtime/comm/comm.h"
#include "runtime/model/model.h"

/* Sum of x [n] over the TP group, in place. */
tr_status tr_tp_all_reduce(const tr_model *m, float *x, int64_t n);

/* Rows of the activations outside the TP regions: batch*seq, or batch*seq/tp with sequence
 * parallelism. */
int tr_tp_local_rows(const tr_model *m);

/* Sequence parallel: this rank's rows local [batch*T/tp, width] -> every rank's rows in
 * sequence order, full [batch*T, width]. Uses m->sp_perm as scratch (full must not be it). */
tr_status tr_tp_seq_gather(const tr_model *m, const float *local, float *full, int width);

/* Sequence parallel: this rank's rows of full [batch*T, width] (the same on every rank) into
 * local [batch*T/tp, width], without communication. */
tr_status tr_tp_seq_rows(const tr_model *m, const float *full, float *local, int width);

/* Sequence parallel: the sum over the TP group of full [batch*T, width], this rank's rows of it
 * into local [batch*T/tp, width]. Uses m->sp_perm as scratch (full may not be it). */
tr_status tr_tp_seq_reduce_scatter(const tr_model *m, const float *full, float *local, int width);

/* Megatron's TP communication overlap (spec.tp_overlap, runtime/model/linear.c): a sequence-
 * parallel exchange split into pieces so that a GEMM on one piece runs while the others travel.
 * Piece p = (sequence b, part j) is rows [j*sub, (j+1)*sub) of every rank's chunk of sequence b
 * (tr_tp_overlap_parts parts of sub rows per chunk); the pieces move exactly the bytes of the
 * whole exchange, as the same collective kind (more calls). A tr_tp_rows_fn computes the layer's
 * GEMM for the n whole-sequence rows from `row` on: into dst ([n, width]) or, dst NULL, into the
 * layer's own output. */
typedef tr_status (*tr_tp_rows_fn)(void *ctx, int64_t row, int n, float *dst);

/* Parts per sequence chunk: the largest divisor of seq/tp not above tp. */
int tr_tp_overlap_parts(const tr_model *m);

/* tr_tp_seq_gather into full (not m->sp_perm), with every piece's all-gather started first; as
 * each arrives (in order) it is placed into full and fn runs on its rows while the later pieces
 * are still in flight. */
tr_status tr_tp_seq_gather_overlap(const tr_model *m, const float *local, float *full, int width,
                                   tr_tp_rows_fn fn, void *ctx);

/* tr_tp_seq_reduce_scatter of an output fn produces piece by piece: each piece's rows (of every
 * rank's chunk) are computed into a packed block of m->sp_full and their reduce-scatter started
 * before the next piece's GEMM; all are waited at the end. */
tr_status tr_tp_seq_reduce_scatter_overlap(const tr_model *m, float *local, int width,
                                           tr_tp_rows_fn fn, void *ctx);

/* tr_tp_seq_reduce_scatter started: full is free again once it returns (with several sequences
 * it is reordered into m->sp_perm first, which stays in use); local is written when *req is
 * waited (tr_comm_wait). */
tr_status tr_tp_seq_ireduce_scatter(const tr_model *m, const float *full, float *local, int width,
                                    tr_comm_request **req);

/* Cross entropy over the vocab shards: this rank's stats [3, rows] of its logits are combined into
 * the global row max, sum of exponentials and target logit (max all-reduce, rebase, sum
 * all-reduce), so no rank ever holds the full logits. scratch holds rows floats. */
tr_status tr_tp_ce_combine(const tr_model *m, float *stats, float *scratch, int rows);

/* TP larger than the query groups: the gradient of parameter `param`'s key and value rows (a
 * copy on each of the kv_rep TP ranks sharing a query group, each holding what its own query
 * heads contributed) summed over exactly those ranks, in place; a no-op for other parameters and
 * frozen ones. One all-reduce over the TP group of one slot per query group, each rank's part in
 * its group's slot and zeros in the others: the sums are exact sums of the replicas' parts and
 * the same on each of them. Call it once the gradient is complete (last microbatch). */
tr_status tr_model_reduce_kv_grad(const tr_model *m, int param);

#endif
