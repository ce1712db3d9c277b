/* ddp.* and optimizer.* settings -> layout and reduction options, with Megatron's defaults. */
#include "runtime/distributed/ddp.h"

#include "core/field.h"
#include "runtime/optimizer/loss_scaler.h"

/* Megatron's DDP default when overlapping: max(40M, 1M * dp) elements per bucket. */
static int64_t default_bucket_size(int dp_size) {
    int64_t per_rank = 1000000LL * dp_size;
    return per_rank > 40000000LL ? per_rank : 40000000LL;
}

tr_status tr_ddp_options_from_config(const tr_config *c, int dp_size, int64_t total_numel,
                                     tr_grad_layout_options *layout, tr_ddp_options *ddp,
                                     tr_diags *diags) {
    const tr_ddp_config *d = &c->ddp;
    (void)diags;
    /* tr_runtime_check (runtime.distopt_instances) refuses this for every caller of the loop;
     * reaching it here is a caller that skipped the check. */
    if (d->num_distributed_optimizer_instances > 1) return TR_ERR_INVALID;
    bool sharded = d->use_distributed_optimizer || c->optimizer.use_distributed_optimizer;
    int64_t bucket_size = 0; /* one bucket */
    if (d->num_buckets != TR_NULL_INT && d->num_buckets > 0)
        bucket_size = (total_numel + d->num_buckets - 1) / d->num_buckets;
    else if (d->overlap_grad_reduce)
        bucket_size = d->bucket_size != TR_NULL_INT ? d->bucket_size : default_bucket_size(dp_size);
    *layout = tr_grad_layout_defaults(dp_size, bucket_size, sharded);
    /* Megatron: lcm(dp, 128, 2^16) instead of lcm(dp, 128); 2^16 is a multiple of 128. */
    if (d->pad_buckets_for_high_nccl_busbw) layout->bucket_align = 65536;
    *ddp = (tr_ddp_options){.group = TR_GROUP_DP_CP,
                            .overlap_grad_reduce = d->overlap_grad_reduce,
                            .average_in_collective = d->average_in_collective,
                            /* With a loss scaler inf/NaN gradients are expected: the scaler
                             * skips those steps instead of failing the run. */
                            .check_for_nan_in_grad =
                                d->check_for_nan_in_grad && !tr_loss_scaler_wanted(c)};
    return TR_OK;
}
