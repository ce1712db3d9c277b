/* Multi-token prediction (DeepSeek-V3; Megatron-Core's MultiTokenPredictionBlock): after the
 * main model, D extra layers on the loss stage, layer k predicting the token k + 1 ahead. Layer
 * k embeds the input ids shifted left by k (the shared word embedding), normalises that
 * (enorm) and the previous depth's hidden state (hnorm; depth 0: the main model's final norm
 * output), projects their concatenation [embedding, hidden] (eh_proj, [hidden, 2 hidden],
 * column-parallel, its output gathered over TP), runs one transformer layer and its final
 * norm, and the shared output layer gives logits against the targets shifted by k (the last k
 * positions of each row are not trained). Its loss, mtp_loss_scaling_factor / D times the mean
 * over its trained tokens, is added to the main loss's gradient (the main loss reported stays
 * the main model's; each depth's loss is logged on its own).
 *
 * This folder holds what needs no tr_model: the shifted tokens, the buffers, and the
 * projection with its TP exchange; the model runs the rest (runtime/model/forward.c,
 * backward.c), its transformer layers numbered after the decoder's. */
#ifndef TR_RUNTIME_MTP_H
#define TR_RUNTIME_MTP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/ops.h"

struct tr_comm;

/* What one depth keeps for its backward (rows = batch * seq; the transformer layer's own
 * activations are the model's). */
typedef struct tr_mtp_acts {
    int32_t *ids, *targets;              /* [rows] shifted by the depth (device memory) */
    float *emb, *en, *en_mean, *en_rstd; /* the embedding of ids, enorm's output and stats */
    float *hn, *hn_mean, *hn_rstd;       /* hnorm of the previous depth's hidden state */
    float *cat;                          /* [rows, 2 hidden]: eh_proj's input */
    float *y;                            /* the transformer layer's output */
    float *h, *h_mean, *h_rstd;          /* final_layernorm's output: logits input, next depth */
    float *h_full; /* sequence parallel: h gathered, the output layer's input (else NULL) */
    float *logits, *ce_stats, *losses, *dloss, *loss; /* loss: one float */
    int64_t n_valid;
} tr_mtp_acts;

/* Shared by the depths: the projection's TP exchange, its input gradient, the carried hidden
 * gradient, the embedding's gradient; sum: the training losses of each depth since the last
 * read (device, [D]). */
typedef struct tr_mtp_scratch {
    float *gather, *dcat, *dh, *de, *sum;
} tr_mtp_scratch;

typedef float *(*tr_mtp_carve_fn)(void *ctx, int64_t n);
/* One depth's buffers; logits of vocab_local columns; id buffers as floats' room; h_full with
 * sequence parallelism (sp). */
void tr_mtp_carve_acts(int64_t rows, int hidden, int vocab_local, bool norm_mean, bool sp,
                       tr_mtp_acts *a, tr_mtp_carve_fn carve, void *ctx);
void tr_mtp_carve_scratch(int64_t rows, int hidden, int depths, tr_mtp_scratch *sc,
                          tr_mtp_carve_fn carve, void *ctx);

/* dst[b, t] = src[b, t + k] for t + k < seq, else fill (host arrays [batch, seq]); returns
 * how many dst entries are >= 0. */
int64_t tr_mtp_shift(const int32_t *src, int32_t *dst, int batch, int seq, int k, int32_t fill);

/* The projection of one depth on this rank: w [hidden / tp, 2 hidden]. */
typedef struct tr_mtp_run {
    const tr_ops *ops;
    struct tr_comm *comm;
    int group, tp, rank;
    int hidden, rows;
    int lowp; /* 0 or the tr_lowp eh_proj's GEMM operands are rounded to (mixed precision) */
    bool sp;  /* sequence parallel: the caller reduce-scatters the input gradient itself */
    const tr_mtp_scratch *sc;
} tr_mtp_run;

/* a->cat = [en, hn] (whole sequences: a->en and a->hn, or their rows gathered under sequence
 * parallelism); out [rows, hidden] = a->cat W^T gathered over TP (out not sc->gather). */
tr_status tr_mtp_proj_fwd(const tr_mtp_run *r, const float *w, const tr_mtp_acts *a,
                          const float *en, const float *hn, float *out);
/* From dout [rows, hidden]: dw += (this rank's columns of dout)^T cat; sc->dcat = the input
 * gradient [rows, 2 hidden] (embedding half first), summed over TP unless r->sp. */
tr_status tr_mtp_proj_bwd(const tr_mtp_run *r, const float *w, float *dw, const tr_mtp_acts *a,
                          const float *dout);

#endif
