/* The description of an MoE router top-k (kernels/ops.h, moe_topk), in kernels/common so that
 * the per-token body (kernels/common/moe_route.h) both backends run can read it. */
#ifndef TR_KERNELS_MOE_DESC_H
#define TR_KERNELS_MOE_DESC_H

/* MoE router top-k (Megatron's TopKRouter scores and selection, kernels/common/moe_route.h):
 * from logits [tokens, experts], each token's topk experts (idx [tokens, topk], best first,
 * ties to the lower expert) and their probabilities (prob [tokens, topk]). */
enum { TR_ROUTE_SOFTMAX = 0, TR_ROUTE_SIGMOID = 1, TR_ROUTE_SQRTSOFTPLUS = 2 };
#define TR_ROUTE_MAX_EXPERTS 1024
typedef struct tr_route_desc {
    int tokens, experts, topk; /* 1 <= topk <= experts <= TR_ROUTE_MAX_EXPERTS */
    int score;                 /* TR_ROUTE_*: softmax, sigmoid or sqrt(softplus) */
    /* softmax only: 1 takes the top k of the softmax over all experts, 0 the softmax over the
     * top k logits */
    int pre_softmax;
    /* group-limited routing when groups > 0: experts split into `groups` equal groups, each
     * scored by the sum of its best topk / group_topk values, the best group_topk groups kept;
     * groups divides experts, group_topk divides topk, topk / group_topk <= experts / groups */
    int groups, group_topk;
    float topk_scale; /* every probability is multiplied by it (1 for none) */
    /* [experts] or NULL: added to the sigmoid-type scores for the selection only (DeepSeek's
     * aux-loss-free balancing); the probabilities are the unbiased scores, normalised over the
     * chosen k when k > 1. Not with softmax (the op returns TR_ERR_INVALID). Backend memory. */
    const float *bias;
} tr_route_desc;

#endif
