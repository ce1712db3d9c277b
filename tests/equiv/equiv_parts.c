/* What each rank holds under a parallel layout (tests/equiv/equiv.h): its stages' parameters
 * and activation sets, and with expert parallelism its experts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline.h"
#include "tests/equiv/equiv.h"

static void in_flight(const tr_pp_schedule *s, int *max, int vpp) {
    int live[64] = {0};
    for (int c = 0; c < vpp; c++) max[c] = 0;
    for (int i = 0; i < s->n; i++) {
        const tr_pp_action *a = &s->actions[i];
        if (a->op == TR_PP_FWD && ++live[a->chunk] > max[a->chunk]) max[a->chunk] = live[a->chunk];
        if (a->op == TR_PP_BWD) live[a->chunk]--;
    }
}

/* The sum of the stages' parameters over the pipeline group, tied copy left out, is the whole TP
 * shard's; under EP or expert TP that holds for the dense ones, and the experts' sum over the
 * expert model-parallel group is every logical expert's. */
int equiv_check_memory(const run_out *o, const tr_model *m) {
    const tr_config *c = o->c;
    int pp = (int)c->model.pipeline_model_parallel_size, rank, bad = 0, pp_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (o->pp != MPI_COMM_NULL) MPI_Comm_rank(o->pp, &pp_rank);
    tr_model_part whole = {0, m->full.num_layers, true, true, 1};
    tr_param_info *info = NULL;
    int n_info = 0;
    int64_t whole_numel = 0, whole_shard = 0, mine = 0, copy = 0, sum = 0;
    int64_t whole_experts = 0, experts = 0;
    bool ep = m->spec.moe.ep_size > 1 || m->spec.moe.etp_size > 1; /* an expert buffer */
    if (tr_model_param_list(&m->full, m->tp, &whole, 1, &info, &n_info, &whole_numel) != TR_OK)
        return 1;
    for (int i = 0; i < n_info; i++) {
        bool expert = ep && strstr(info[i].name, ".mlp.experts.local_experts.") != NULL;
        *(expert ? &whole_experts : &whole_shard) += info[i].numel;
    }
    free(info);
    for (int i = 0; i < m->n_info; i++)
        *(m->info[i].tied_copy ? &copy : m->info[i].expert ? &experts : &mine) += m->info[i].numel;
    sum = mine;
    if (o->pp != MPI_COMM_NULL) MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT64_T, MPI_SUM, o->pp);
    if (sum != whole_shard) bad++;
    if (ep) {
        int64_t all = experts;
        MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT64_T, MPI_SUM, o->emp);
        printf(
            "memory: rank %d: %lld expert parameters; the expert ranks together %lld of %lld%s\n",
            rank, (long long)experts, (long long)all, (long long)whole_experts,
            all == whole_experts ? "" : " MISMATCH");
        bad += all != whole_experts;
    }
    printf("memory: rank %d (pp rank %d of %d): %lld parameters (+%lld tied copy) of the whole "
           "TP shard's %lld (%.2f); stages together %lld%s; buffer %lld floats, activations "
           "%lld floats; activation sets per layer:",
           rank, pp_rank, pp, (long long)mine, (long long)copy, (long long)whole_shard,
           (double)mine / (double)whole_shard, (long long)sum,
           sum == whole_shard ? "" : " MISMATCH", (long long)m->n_params, (long long)m->act_numel);
    int want[512] = {0};
    if (pp > 1 && m->full.num_layers <= 512) {
        tr_diags d;
        tr_diags_init(&d);
        tr_pp_layout lay;
        tr_pp_schedule s;
        int max[64];
        if (tr_pp_layout_build(c, &lay, &d) != TR_OK) return 1;
        if (tr_pp_schedule_build(c, pp_rank, &s, &d) != TR_OK) return 1;
        in_flight(&s, max, lay.vpp);
        for (int ch = 0; ch < lay.vpp; ch++) {
            const tr_pp_stage *st = tr_pp_layout_stage(&lay, pp_rank, ch);
            for (int l = 0; l < st->num_layers; l++) want[st->first_layer + l] = max[ch];
        }
        tr_pp_schedule_free(&s);
        tr_pp_layout_free(&lay);
        tr_diags_free(&d);
    } else {
        for (int l = 0; l < m->full.num_layers && l < 512; l++) want[l] = 1;
    }
    for (int l = 0; l < m->full.num_layers && l < 512; l++) {
        int got = tr_model_layer_slots(m, l);
        printf(" %d%s", got, got == want[l] ? "" : "(MISMATCH)");
        bad += got != want[l];
    }
    printf("\n");
    return bad;
}

static int tensor_of(const run_out *o, const char *name) {
    for (int i = 0; i < o->n_tensors; i++)
        if (strcmp(o->names[i], name) == 0) return i;
    return -1;
}

tr_status equiv_gather_experts(run_out *o, const tr_model *m) {
    if (m->spec.moe.ep_size <= 1 && m->spec.moe.etp_size <= 1) return TR_OK;
    float *mine = calloc((size_t)o->n, sizeof *mine);
    if (!mine) return TR_ERR_NOMEM;
    tr_status s = TR_OK;
    for (int i = 0; i < m->n_info && s == TR_OK; i++) {
        const tr_param_info *p = &m->info[i];
        int t = p->expert ? tensor_of(o, p->name) : -1;
        if (p->expert && t < 0) s = TR_ERR_INVALID;
        /* an expert-TP shard at its logical elements (the group's shards are disjoint) */
        for (int64_t e = 0; t >= 0 && e < p->numel; e++)
            mine[o->starts[t] + tr_model_logical_index(m, p, e)] = m->params[p->offset + e];
    }
    if (s == TR_OK) MPI_Allreduce(MPI_IN_PLACE, mine, (int)o->n, MPI_FLOAT, MPI_SUM, o->emp);
    /* The dense assembly left the experts' elements zero: nobody of the TP-PP group wrote them. */
    for (int64_t e = 0; s == TR_OK && e < o->n; e++) o->params[e] += mine[e];
    free(mine);
    return s;
}

/* The allgather dispatcher's bytes on TR_GROUP_TP_EP (EP at expert TP 1), per rank and whatever
 * the router dropped: per forward the T tokens' hidden states, probabilities and choices
 * (topk each, f32 and i32) gathered and the outputs of the group's EP x T tokens reduce-scattered;
 * per backward the output gradient gathered, the input gradient (EP x T x h) and the
 * probabilities' gradient (EP x T x topk) reduce-scattered; and nothing on the EP group. */
static int ag_volume(const tr_comm *comm, int rank, int64_t T, int64_t h, int64_t k, int64_t ep,
                     int64_t fwds, int64_t bwds) {
    const tr_comm_counters *n = &comm->counters;
    uint64_t gat = tr_comm_counters_bytes(n, TR_GROUP_TP_EP, TR_COMM_ALL_GATHER);
    uint64_t rs = tr_comm_counters_bytes(n, TR_GROUP_TP_EP, TR_COMM_REDUCE_SCATTER);
    uint64_t a2a = tr_comm_counters_bytes(n, TR_GROUP_EP, TR_COMM_ALL_TO_ALL) +
                   tr_comm_counters_bytes(n, TR_GROUP_EP, TR_COMM_ALL_TO_ALLV);
    uint64_t want_gat = (uint64_t)(4 * T * (fwds * (h + 2 * k) + bwds * h));
    uint64_t want_rs = (uint64_t)(4 * ep * T * (fwds * h + bwds * (h + k)));
    bool ok = gat == want_gat && rs == want_rs && a2a == 0;
    if (rank == 0 || !ok)
        printf("rank %d: allgather dispatcher: TP x EP all-gather %llu bytes, analytic %llu; "
               "reduce-scatter %llu bytes, analytic %llu; EP all-to-all(v) %llu bytes%s\n",
               rank, (unsigned long long)gat, (unsigned long long)want_gat, (unsigned long long)rs,
               (unsigned long long)want_rs, (unsigned long long)a2a, ok ? "" : "  MISMATCH");
    return !ok;
}

int equiv_check_ep_volume(const tr_config *c, const tr_comm *comm, const run_out *run,
                          int64_t eval_mbs) {
    const tr_model_config *m = &c->model;
    if (m->expert_model_parallel_size <= 1 || run->ep == MPI_COMM_NULL) return 0;
    int64_t cp = m->context_parallel_size > 1 ? m->context_parallel_size : 1;
    int64_t tp = m->tensor_model_parallel_size, ep = m->expert_model_parallel_size;
    int64_t T = c->train.micro_batch_size * m->seq_length / cp / (m->sequence_parallel ? tp : 1);
    int64_t E = m->num_moe_experts, k = m->moe_router_topk, h = m->hidden_size;
    int64_t passes = run->iters * c->derived.num_microbatches * run->moe_layers;
    int64_t fwd_only = eval_mbs * run->moe_layers;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (m->moe_token_dispatcher_type == TR_DISPATCH_ALLGATHER)
        return ag_volume(comm, rank, T, h, k, ep, passes + fwd_only, passes);
    uint64_t counts = tr_comm_counters_bytes(&comm->counters, TR_GROUP_EP, TR_COMM_ALL_TO_ALL);
    uint64_t rows = tr_comm_counters_bytes(&comm->counters, TR_GROUP_EP, TR_COMM_ALL_TO_ALLV);
    uint64_t want_counts = (uint64_t)((passes + fwd_only) * 4 * E);
    uint64_t group_rows = rows;
    MPI_Allreduce(MPI_IN_PLACE, &group_rows, 1, MPI_UINT64_T, MPI_SUM, run->ep);
    int64_t max_layers = run->moe_layers;
    MPI_Allreduce(MPI_IN_PLACE, &max_layers, 1, MPI_INT64_T, MPI_MAX, run->ep);
    /* a rank's rows per pass: dropless its T topk; padded to the capacity E x capacity */
    double factor = m->moe_expert_capacity_factor;
    bool capped = !tr_is_null_float(factor) && factor > 0.0;
    int64_t cap = capped ? (int64_t)ceil((double)T * k / E * factor) : 0;
    int64_t R = capped && m->moe_pad_expert_input_to_capacity ? E * cap : T * k;
    /* the EP group's ranks run the same layers (they share the pipeline stage) */
    uint64_t want_rows = (uint64_t)((4 * passes + 2 * fwd_only) * ep * R * h * 4);
    int bad = 0;
    if (capped && !m->moe_pad_expert_input_to_capacity) {
        /* drops without padding: the rows the layers kept, each moved twice per pass, at most
         * the dropless rows and E x capacity a pass */
        int64_t kept = run->moe_rows, bound = T * k < E * cap ? T * k : E * cap;
        MPI_Allreduce(MPI_IN_PLACE, &kept, 1, MPI_INT64_T, MPI_SUM, run->ep);
        bool within = kept <= (2 * passes + fwd_only) * ep * bound;
        if (!within)
            printf("rank %d: the layers kept %lld rows, more than the capacity lets\n", rank,
                   (long long)kept);
        bad += !within;
        want_rows = (uint64_t)(2 * kept * h * 4);
    }
    bool ok_c = counts == want_counts, ok_r = group_rows == want_rows;
    if (rank == 0 || !ok_c || !ok_r)
        printf("rank %d: EP all-to-all (counts): %llu bytes, analytic %llu%s; EP all-to-all-v "
               "(rows), the EP group's sum: %llu bytes, analytic %llu%s\n",
               rank, (unsigned long long)counts, (unsigned long long)want_counts,
               ok_c ? "" : "  MISMATCH", (unsigned long long)group_rows,
               (unsigned long long)want_rows, ok_r ? "" : "  MISMATCH");
    bad += !ok_c + !ok_r + (max_layers != run->moe_layers);
    return bad;
}

int equiv_check_etp_volume(const tr_config *c, const tr_comm *comm, const run_out *run,
                           int64_t eval_mbs) {
    const tr_model_config *m = &c->model;
    int64_t etp = m->expert_tensor_parallel_size;
    if (m->num_moe_experts == TR_NULL_INT || etp <= 1) return 0;
    int64_t cp = m->context_parallel_size > 1 ? m->context_parallel_size : 1;
    int64_t tp = m->tensor_model_parallel_size, ep = m->expert_model_parallel_size;
    int64_t T = c->train.micro_batch_size * m->seq_length / cp / (m->sequence_parallel ? tp : 1);
    int64_t E = m->num_moe_experts, k = m->moe_router_topk, h = m->hidden_size, El = E / ep;
    int64_t passes = run->iters * c->derived.num_microbatches * run->moe_layers;
    int64_t fwd_only = eval_mbs * run->moe_layers;
    uint64_t counts =
        tr_comm_counters_bytes(&comm->counters, TR_GROUP_EXPERT_TP, TR_COMM_ALL_GATHER);
    uint64_t rows =
        tr_comm_counters_bytes(&comm->counters, TR_GROUP_EXPERT_TP, TR_COMM_ALL_TO_ALLV);
    uint64_t want_counts = (uint64_t)((passes + fwd_only) * 4 * El);
    double factor = m->moe_expert_capacity_factor;
    bool capped = !tr_is_null_float(factor) && factor > 0.0;
    int64_t cap = capped ? (int64_t)ceil((double)T * k / E * factor) : 0;
    int64_t R = capped && m->moe_pad_expert_input_to_capacity ? E * cap : T * k;
    /* this rank's own rows, each in etp x (4 a training pass, 2 an evaluation one) */
    int64_t mine = (4 * passes + 2 * fwd_only) * R;
    if (capped && !m->moe_pad_expert_input_to_capacity) mine = 2 * run->moe_rows;
    uint64_t want_rows = (uint64_t)(etp * mine * h * 4), group_rows = rows;
    if (run->emp != MPI_COMM_NULL) {
        MPI_Allreduce(MPI_IN_PLACE, &want_rows, 1, MPI_UINT64_T, MPI_SUM, run->emp);
        MPI_Allreduce(MPI_IN_PLACE, &group_rows, 1, MPI_UINT64_T, MPI_SUM, run->emp);
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bool ok_c = counts == want_counts, ok_r = group_rows == want_rows && rows > 0;
    if (rank == 0 || !ok_c || !ok_r)
        printf("rank %d: expert-TP all-gather (counts): %llu bytes, analytic %llu%s; expert-TP "
               "all-to-all-v (rows gathered, partial sums reduce-scattered), the expert "
               "model-parallel group's sum: %llu bytes, analytic %llu%s\n",
               rank, (unsigned long long)counts, (unsigned long long)want_counts,
               ok_c ? "" : "  MISMATCH", (unsigned long long)group_rows,
               (unsigned long long)want_rows, ok_r ? "" : "  MISMATCH");
    return !ok_c + !ok_r;
}
