/* A plan (runtime/plan/plan.h): the rank roles' memory (memory.c), then FLOPs, bytes per process
 * group, the pipeline bubble and the step time from the device model (device_model.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan/plan_internal.h"

static double ring(int n) {
    return n > 1 ? (double)(n - 1) / n : 0.0;
}

/* Which pp ranks are distinct roles: the first, one in the middle, the last. */
static int roles(int pp, int *which) {
    int n = 0;
    which[n++] = 0;
    if (pp > 2) which[n++] = pp / 2;
    if (pp > 1) which[n++] = pp - 1;
    return n;
}

static void add_comm(tr_plan *p, const char *g, int size, double bytes, double bw_gbs, double eff,
                     double hidden, bool cross) {
    if (size <= 1 || bytes <= 0) return;
    tr_plan_comm *k = &p->comm[p->n_comm++];
    k->group = g;
    k->size = size;
    k->bytes = bytes;
    k->cross_node = cross;
    k->seconds = bytes / (bw_gbs * 1e9 * eff) * (1.0 - hidden);
}

static void step_time(const tr_config *c, const tr_model_spec *ms, tr_plan *p) {
    const tr_plan_gpu *g = p->gpu;
    /* ms->seq is a CP rank's share: the FLOPs count whole sequences, the messages local rows */
    int cp = p->cp > 1 ? p->cp : 1;
    tr_model_spec whole = *ms;
    whole.seq = ms->seq * cp;
    double seq = whole.seq, tokens = (double)p->gbs * seq, seq_local = ms->seq;
    p->model_flops = c->derived.flops_per_token * tokens;
    /* recomputation reruns forwards: all of a layer's (full) or its attention core (selective) */
    double fwd = tr_model_flops_per_seq(&whole) * p->gbs;
    double head = 2.0 * seq * ms->hidden * ms->vocab * p->gbs;
    double attn =
        2.0 * 2.0 * ms->heads * ms->head_dim * (seq / 2.0) * seq * ms->num_layers * p->gbs;
    double extra = p->recompute == 2 ? fwd - head : p->recompute == 1 ? attn : 0.0;
    p->hw_flops = 3.0 * fwd + extra;
    double peak = (p->lowp ? g->tflops_bf16 : g->tflops_fp32) * 1e12;
    int model_ranks = p->tp * p->pp * cp;
    double per_gpu = p->hw_flops / ((double)p->dp * model_ranks);
    const tr_plan_rank *busy = &p->ranks[0];
    for (int i = 1; i < p->n_ranks; i++)
        if (p->ranks[i].act_per_slot > busy->act_per_slot) busy = &p->ranks[i];
    double t_gemm = per_gpu / (peak * TR_PLAN_EFF_GEMM);
    double t_mem = (double)p->nmb * busy->act_per_slot * TR_PLAN_ACT_TRAFFIC /
                   (g->hbm_gbs * 1e9 * TR_PLAN_EFF_HBM);
    p->t_compute = t_gemm + t_mem;
    p->t_bubble = p->t_compute * p->bubble;
    int64_t owned = 0;
    for (int i = 0; i < p->n_ranks; i++)
        if (p->ranks[i].optimizer > owned) owned = p->ranks[i].optimizer;
    p->t_optimizer =
        (double)owned / 8.0 * TR_PLAN_OPT_BYTES_PER_PARAM / (g->hbm_gbs * 1e9 * TR_PLAN_EFF_HBM);
    /* bytes per step per group (what one rank sends) */
    int gpn = g->gpus_per_node;
    double dtype = p->lowp ? 2.0 : 4.0;
    double msg_full = (double)p->mbs * seq_local * ms->hidden * dtype;
    int layers = busy->layers;
    p->n_comm = 0;
    int tp_colls = 4 + (p->recompute == 2 ? 2 : 0);
    bool tp_over = c->model.tp_comm_overlap && p->sp;
    bool tp_cross = p->tp > gpn;
    add_comm(p, "tp", p->tp, (double)layers * p->nmb * tp_colls * 2.0 * ring(p->tp) * msg_full,
             tp_cross ? g->net_gbs : g->nvlink_gbs, tp_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK,
             tp_over ? TR_PLAN_TP_HIDDEN : 0.0, tp_cross);
    /* context parallel (TP ranks innermost, CP next): per layer and microbatch the fp32 K and V
     * of this rank's rows (its KV groups) travel the ring cp-1 times forward and cp-1 times with
     * cp hops of dK/dV backward (tests/equiv/equiv_check.c's volume); the all-gather gathers
     * them forward and backward and reduce-scatters cp slots of dK/dV; the all-to-all trades
     * q, k, v, out forward and twice as many tensors backward. A recomputed forward (full or
     * selective: both rerun the attention core) runs its exchange again. */
    if (cp > 1) {
        double gl = ms->groups < p->tp ? 1 : ms->groups / p->tp, hl = ms->heads / p->tp;
        double rows = (double)p->mbs * seq_local, kv = 2.0 * rows * gl * ms->head_dim * 4.0;
        const tr_str_list *ct = &c->model.cp_comm_type;
        bool ag = !ct->null && ct->n > 0 && strcmp(ct->v[0], "allgather") == 0;
        bool a2a = !ct->null && ct->n > 0 && strcmp(ct->v[0], "a2a") == 0;
        double fwd_b = ag    ? kv
                       : a2a ? (2.0 * hl + 2.0 * gl) * rows * ms->head_dim * 4.0
                             : (cp - 1) * kv;
        double bwd_b = ag ? kv + cp * kv : a2a ? 2.0 * fwd_b : (cp - 1) * kv + cp * kv;
        double per = fwd_b + bwd_b + (p->recompute ? fwd_b : 0.0);
        bool cp_cross = (int64_t)p->tp * cp > gpn;
        add_comm(p, "cp", cp, (double)busy->layers * p->nmb * per,
                 cp_cross ? g->net_gbs : g->nvlink_gbs,
                 cp_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK, 0.0, cp_cross);
    }
    /* expert parallel: per MoE layer and microbatch the alltoall dispatcher sends each routed
     * row (top-k per token) and brings its output back, forward and backward, (EP - 1) / EP of
     * them to other ranks; the allgather dispatcher gathers the group's tokens (with their top-k
     * probabilities and choices) and the output gradients, and reduce-scatters the outputs, the
     * input gradients and the probabilities' gradients: four hidden-wide and three top-k-wide
     * collectives over EP x the rank's tokens */
    if (p->ep > 1 && ms->moe.experts > 0) {
        int n_moe = 0;
        for (int i = 0; i < ms->num_layers; i++) n_moe += tr_model_is_moe_layer(ms, i);
        double toks = (double)p->mbs * seq_local / (p->sp ? p->tp : 1), k = ms->moe.topk;
        double per = ms->moe.dispatcher == TR_MOE_DISPATCH_ALLGATHER
                         ? ring(p->ep) * p->ep * toks * (4.0 * ms->hidden * dtype + 3.0 * k * 4.0)
                         : 4.0 * ring(p->ep) * toks * k * ms->hidden * dtype;
        bool ep_cross = (int64_t)p->ep * (p->sp ? 1 : p->tp) > gpn;
        add_comm(p, "ep", p->ep, (double)n_moe / p->pp * p->nmb * per,
                 ep_cross ? g->net_gbs : g->nvlink_gbs,
                 ep_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK, 0.0, ep_cross);
    }
    /* expert TP (runtime/moe/etp.c): per MoE layer and microbatch the rows a rank's experts
     * receive (on average its own routed rows) all-gathered over ETP and fc2's partial sums
     * reduce-scattered back, forward and backward: four collectives of ETP x those rows, of which
     * (ETP - 1) / ETP cross the links */
    if (p->etp > 1 && ms->moe.experts > 0) {
        int n_moe = 0;
        for (int i = 0; i < ms->num_layers; i++) n_moe += tr_model_is_moe_layer(ms, i);
        double rows = (double)p->mbs * seq_local / (p->sp ? p->tp : 1) * ms->moe.topk;
        double per = 4.0 * ring(p->etp) * p->etp * rows * ms->hidden * dtype;
        bool etp_cross = (int64_t)p->etp * (p->sp ? 1 : p->tp) > gpn;
        add_comm(p, "etp", p->etp, (double)n_moe / p->pp * p->nmb * per,
                 etp_cross ? g->net_gbs : g->nvlink_gbs,
                 etp_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK, 0.0, etp_cross);
    }
    double msg = msg_full / (p->sp ? p->tp : 1);
    bool pp_cross = (int64_t)p->tp * cp * p->dp >= gpn && p->world > gpn;
    add_comm(p, "pp", p->pp, 2.0 * p->nmb * p->vpp * msg, pp_cross ? g->net_gbs : g->nvlink_gbs,
             pp_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK, TR_PLAN_PP_HIDDEN, pp_cross);
    /* data parallel: fp32 gradients reduce-scattered and fp32 parameters gathered (dist.
     * optimizer) or all-reduced, over the largest role's buffer */
    int64_t buf = 0;
    for (int i = 0; i < p->n_ranks; i++)
        if (p->ranks[i].grads > buf) buf = p->ranks[i].grads;
    bool dp_cross = (int64_t)p->tp * cp * p->dp > gpn;
    add_comm(p, "dp", p->dp * cp, 2.0 * ring(p->dp * cp) * (double)buf,
             dp_cross ? g->net_gbs : g->nvlink_gbs, dp_cross ? TR_PLAN_EFF_NET : TR_PLAN_EFF_NVLINK,
             c->ddp.overlap_grad_reduce ? TR_PLAN_DP_HIDDEN : 0.0, dp_cross);
    if (tr_model_spec_shares_embedding(ms) && p->pp > 1)
        add_comm(p, "embedding", 2, 2.0 * 0.5 * ms->vocab / p->tp * ms->hidden * 4.0, g->net_gbs,
                 TR_PLAN_EFF_NET, 0.0, true);
    p->t_comm = 0.0;
    for (int i = 0; i < p->n_comm; i++) p->t_comm += p->comm[i].seconds;
    p->step_s = p->t_compute + p->t_bubble + p->t_comm + p->t_optimizer;
    p->mfu = p->step_s > 0 ? p->model_flops / (p->step_s * p->world * peak) : 0.0;
}

tr_status tr_plan_make(const tr_config *c, const tr_plan_gpu *gpu, tr_plan *p, tr_diags *d) {
    return tr_plan_make_cached(c, gpu, NULL, p, d);
}

static tr_status make(const tr_config *c, const tr_plan_gpu *gpu, tr_plan_cache *cache, bool bound,
                      tr_plan *p, tr_diags *d) {
    memset(p, 0, sizeof *p);
    const tr_model_config *m = &c->model;
    p->gpu = gpu;
    p->world = (int)c->derived.world_size;
    p->tp = (int)m->tensor_model_parallel_size;
    p->pp = (int)m->pipeline_model_parallel_size;
    p->vpp = m->virtual_pipeline_model_parallel_size == TR_NULL_INT
                 ? 1
                 : (int)m->virtual_pipeline_model_parallel_size;
    p->cp = (int)m->context_parallel_size;
    p->ep = m->num_moe_experts != TR_NULL_INT ? (int)m->expert_model_parallel_size : 1;
    p->etp = m->num_moe_experts != TR_NULL_INT ? (int)m->expert_tensor_parallel_size : 1;
    p->dp = (int)c->derived.data_parallel_size;
    p->mbs = (int)c->train.micro_batch_size;
    p->gbs = (int)c->train.global_batch_size;
    p->nmb = (int)c->derived.num_microbatches;
    p->sp = m->sequence_parallel && p->tp > 1;
    p->dist_opt = c->ddp.use_distributed_optimizer;
    tr_model_spec ms;
    TR_TRY(tr_plan_model_spec(c, &ms, d));
    p->lowp = ms.lowp != 0;
    p->recompute = ms.recompute == TR_RECOMPUTE_FULL ? 2 : ms.recompute == TR_RECOMPUTE_SELECTIVE;
    tr_pp_layout lay = {0};
    if (p->pp > 1) TR_TRY(tr_pp_layout_build(c, &lay, d));
    int which[3];
    p->n_ranks = roles(p->pp, which);
    tr_status st = TR_OK;
    for (int i = 0; i < p->n_ranks && st == TR_OK; i++)
        st = tr_plan_rank_state(c, &ms, gpu, &lay, which[i], cache, &p->ranks[i], d);
    for (int i = 0; i < p->n_ranks && st == TR_OK && bound; i++) {
        const tr_plan_rank *r = &p->ranks[i];
        int64_t held = r->peak[TR_MEM_PARAMS] + r->peak[TR_MEM_GRADS] + r->peak[TR_MEM_OPTIMIZER];
        int64_t acts = 0;
        /* the state alone may prove it; else with the activations' floor */
        if ((double)(int64_t)((double)held + gpu->reserved_bytes) <= gpu->mem_bytes) {
            st = tr_plan_rank_floor(c, &ms, gpu, &lay, which[i], cache, r, &acts);
            if (st != TR_OK) break;
        }
        held += acts;
        /* the same conversions as the full plan's peak_total and fits below, on a smaller sum */
        int64_t low = (int64_t)((double)held + gpu->reserved_bytes);
        if ((double)low > gpu->mem_bytes) {
            p->bounded = true;
            p->peak_total = low;
            p->fits = false;
            if (p->pp > 1) tr_pp_layout_free(&lay);
            return TR_OK;
        }
    }
    for (int i = 0; i < p->n_ranks && st == TR_OK; i++) {
        st = tr_plan_rank_rest(c, &ms, gpu, &lay, which[i], cache, &p->ranks[i], d);
        /* one role over the device is the plan over it (peak_total is the largest role's) */
        int64_t low = (int64_t)p->ranks[i].device_total;
        if (st == TR_OK && bound && i + 1 < p->n_ranks && (double)low > gpu->mem_bytes) {
            p->bounded = true;
            p->peak_total = low;
            p->fits = false;
            if (p->pp > 1) tr_pp_layout_free(&lay);
            return TR_OK;
        }
    }
    if (p->pp > 1) tr_pp_layout_free(&lay);
    TR_TRY(st);
    p->peak_total = 0;
    for (int i = 0; i < p->n_ranks; i++)
        if ((int64_t)p->ranks[i].device_total > p->peak_total)
            p->peak_total = (int64_t)p->ranks[i].device_total;
    p->fits = (double)p->peak_total <= gpu->mem_bytes;
    p->bubble = tr_pp_bubble_expected(p->pp, p->vpp, p->nmb);
    step_time(c, &ms, p);
    return TR_OK;
}

tr_status tr_plan_make_cached(const tr_config *c, const tr_plan_gpu *gpu, tr_plan_cache *cache,
                              tr_plan *p, tr_diags *d) {
    return make(c, gpu, cache, false, p, d);
}

tr_status tr_plan_make_bounded(const tr_config *c, const tr_plan_gpu *gpu, tr_plan_cache *cache,
                               tr_plan *p, tr_diags *d) {
    return make(c, gpu, cache, true, p, d);
}

/* The bubble of the action lists: every rank's list simulated together with unit costs
 * (forward 1, backward 2; tr_pp_check), the idle time over the compute of the busiest rank. */
tr_status tr_plan_sim_bubble(const tr_config *c, double *bubble, tr_diags *d) {
    *bubble = 0.0;
    if (c->model.pipeline_model_parallel_size <= 1) return TR_OK;
    tr_pp_plan key;
    TR_TRY(tr_pp_plan_from_config(c, &key, d));
    tr_pp_schedule *ranks = calloc((size_t)key.pp, sizeof *ranks);
    if (!ranks) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int r = 0; r < key.pp && st == TR_OK; r++)
        st = tr_pp_schedule_build_plan(&key, r, &ranks[r]);
    tr_pp_sim sim = {0};
    if (st == TR_OK) st = tr_pp_check(ranks, key.pp, &sim, d);
    if (st == TR_OK) {
        tr_pp_bubble b;
        tr_pp_bubble_from_sim(&sim, key.pp, key.vpp, key.num_microbatches, &b);
        *bubble = b.simulated;
    }
    tr_pp_sim_free(&sim);
    for (int r = 0; r < key.pp; r++) tr_pp_schedule_free(&ranks[r]);
    free(ranks);
    return st;
}
