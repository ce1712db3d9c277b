/* Which ranks share each process group, as a pure function of the layout: no MPI, so a dry run
 * can print the groups of a cluster we are not on, and tests can check them exhaustively.
 *
 * Ranks are laid out in the order tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp), leftmost fastest. Two
 * grids share the world: the dense grid [TP, CP, DP, PP] and the expert grid
 * [ETP, EP, EDP, PP]. A group named by axes holds the ranks that differ only along those axes
 * (Megatron's generate_masked_orthogonal_rank_groups): groups are listed by increasing index
 * over the other axes, first axis fastest, and members by increasing rank. */
#ifndef TR_RANK_GROUPS_H
#define TR_RANK_GROUPS_H

#include <stdio.h>

#include "core/status.h"
#include "runtime/parallel/dims.h"

/* The order of this enum is the order communicators are created in (every rank must create
 * them in the same order). */
typedef enum tr_group_kind {
    TR_GROUP_TP = 0,             /* "tp": tensor-parallel collectives */
    TR_GROUP_PP,                 /* "pp": pipeline send/recv */
    TR_GROUP_DP,                 /* "dp": which samples a rank reads */
    TR_GROUP_CP,                 /* "cp": ring-attention KV exchange */
    TR_GROUP_TP_CP,              /* "tp-cp": MoE aux-loss token counts */
    TR_GROUP_DP_CP,              /* "dp-cp": dense gradient reduction, dist-opt shards */
    TR_GROUP_TP_DP_CP,           /* "tp-dp-cp": FP8 amax, expert-bias token counts */
    TR_GROUP_TP_DP,              /* "tp-dp" */
    TR_GROUP_TP_PP,              /* "tp-pp": model parallel; grad norm without dist-opt */
    TR_GROUP_EP,                 /* "ep": token all-to-all */
    TR_GROUP_EXPERT_TP,          /* "expert-tp": expert weight tensor parallel */
    TR_GROUP_EXPERT_DP,          /* "expert-dp": expert gradient reduction */
    TR_GROUP_TP_EP,              /* "tp-ep": expert TP x EP */
    TR_GROUP_TP_EP_PP,           /* "tp-ep-pp": expert grad stats without dist-opt */
    TR_GROUP_EMBEDDING,          /* "embedding": first+last stage, shared embedding grads */
    TR_GROUP_POSITION_EMBEDDING, /* "position-embedding": first stage */
    TR_GROUP_INTRA_DP_CP,        /* "intra-dp-cp": dp-cp within one dist-opt instance */
    TR_GROUP_INTER_DP_CP,        /* "inter-dp-cp": same shard across dist-opt instances */
    TR_GROUP_INTRA_DIST_OPT,     /* "intra-dist-opt": grad norm / found-inf with dist-opt */
    TR_GROUP_COUNT
} tr_group_kind;

const char *tr_group_kind_name(tr_group_kind k);
const char *tr_group_kind_doc(tr_group_kind k);
tr_status tr_group_kind_from_name(const char *name, tr_group_kind *out); /* TR_ERR_NOTFOUND */

/* How many groups of this kind and how many ranks in each (all groups of a kind have the same
 * size). Embedding groups cover only the first and last stages; every other kind partitions
 * the world. TR_ERR_CONFIG if the dims fail tr_parallel_dims_check. */
tr_status tr_rank_groups_shape(const tr_parallel_dims *d, tr_group_kind k, int *n_groups,
                               int *group_size);

/* Every group of a kind: *ranks_out holds n_groups*group_size world ranks, group after group;
 * the caller frees it. */
tr_status tr_rank_groups_enumerate(const tr_parallel_dims *d, tr_group_kind k, int **ranks_out,
                                   int *n_groups, int *group_size);

/* The group of a kind that `rank` belongs to: its members (ascending) into members[0..cap),
 * their count and rank's position among them. A rank in no group of that kind (middle pipeline
 * stages for the embedding groups) gets *n = 0 and *rank_in_group = -1. TR_ERR_INVALID when
 * rank is outside the world or cap is too small. */
tr_status tr_rank_group_of(const tr_parallel_dims *d, tr_group_kind k, int rank, int *members,
                           int cap, int *n, int *rank_in_group);

/* Every group of every kind (run_recipe --dry-run --print-groups --world-size N). */
tr_status tr_rank_groups_print(FILE *out, const tr_parallel_dims *d);

/* One line: TP, PP, VPP, CP, EP, ETP, DP, expert DP, order, microbatches (<= 0: omitted). */
void tr_parallel_banner(FILE *out, const tr_parallel_dims *d, int num_microbatches);

#endif
