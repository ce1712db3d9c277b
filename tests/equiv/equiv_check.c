/* Layout equivalence on real ranks: trains a recipe for a few iterations under a parallel layout
 * (mpirun -np N) and compares every iteration's loss and the final parameters with the
 * single-rank run of the same config, which rank 0 trains in-process first.
 *
 *   equiv_check [--tol X] [--param-tol X] [--rank-order] [--expect-differ] [--expect-overlap]
 * [--check-volume] RECIPE KEY=VALUE... -- LAYOUT_KEY=VALUE...
 *
 * Keys before "--" configure both runs; keys after it only the parallel run (its world is the
 * mpirun world). Reports the largest relative errors; exit 0 when every one is <= tol
 * (parameters: <= --param-tol when given, see tests/equiv/tests.cmake on bf16). Also
 * checks that every rank ends with the same parameters as rank 0. --expect-differ inverts the
 * verdict of a completed comparison (a run that fails to train still fails), to show that the
 * comparison detects a real difference. --expect-overlap also requires some gradient bucket's
 * reduction to have started during backward (ddp.overlap_grad_reduce at work). --check-volume
 * also requires the bytes the comm layer counted on the TP, DP and PP groups to equal the analytic
 * volume (see check_volume). Every rank must skip as many steps for inf/NaN gradients (loss
 * scaling) as the single-rank run and end at its loss scale; --min-skips N also requires that
 * run to have skipped at least N, so a dynamic-scaling test shows the skips agreeing.
 *
 *   equiv_check --same-layout [--fewer-acts] [--expect-differ] RECIPE KEY=VALUE... --
 * LAYOUT_KEY=VALUE... -- RUN_KEY=VALUE...
 *
 * compares against a reference on the same layout instead: both runs train on the mpirun world
 * with the keys before the second "--", the tested run also with those after it (activation
 * recomputation, say); every iteration's loss and every final parameter must be BITWISE equal.
 * --fewer-acts also requires the tested run to hold fewer activation floats on every rank. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/train/train.h"

#include "tests/equiv/equiv.h"

static int index_of(char (*names)[128], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

/* The most microbatches of each chunk in flight in the pp rank's action list, counted here
 * independently of the executor. */
/* The logical tensors: each rank scatters the shards it holds (its stages' tensors, its TP
 * slice) to the logical positions, TP rank 0 also the parameters every TP rank holds whole; a
 * sum over the model-parallel group (adding zeros, exact) assembles them on every rank. The tied
 * copy is assembled on its own. */
static tr_status capture(void *ctx, const tr_model *m) {
    run_out *o = ctx;
    tr_model_part whole = {0, m->full.num_layers, true, true, 1};
    tr_param_info *info = NULL;
    int n_info = 0;
    int64_t numel = 0;
    TR_TRY(tr_model_param_list(&m->full, (tr_tp_shard){0, 1}, &whole, 1, &info, &n_info, &numel));
    o->names = malloc((size_t)n_info * sizeof *o->names);
    o->starts = malloc((size_t)(n_info + 1) * sizeof *o->starts);
    if (!o->names || !o->starts) return TR_ERR_NOMEM;
    o->n = 0;
    for (int i = 0; i < n_info; i++) {
        snprintf(o->names[i], sizeof o->names[i], "%s", info[i].name);
        o->starts[i] = o->n;
        o->n += info[i].numel;
    }
    free(info);
    o->starts[n_info] = o->n;
    o->n_tensors = n_info;
    o->params = calloc((size_t)o->n, sizeof(float));
    int emb = index_of(o->names, n_info, "embedding.word_embeddings.weight");
    int64_t emb_n = o->starts[emb + 1] - o->starts[emb];
    bool pipelined_tied =
        tr_model_spec_shares_embedding(&m->full) && o->c->model.pipeline_model_parallel_size > 1;
    if (pipelined_tied) o->tied_copy = calloc((size_t)emb_n, sizeof(float));
    if (!o->params || (pipelined_tied && !o->tied_copy)) return TR_ERR_NOMEM;
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        int t = index_of(o->names, n_info, p->name);
        if (t < 0) return TR_ERR_INVALID;
        float *dst = p->tied_copy ? o->tied_copy : o->params + o->starts[t];
        /* A key-value copy (TP larger than the query groups) from its group's first rank. */
        int64_t kv_off = 0, kv_n = 0;
        if (p->kv_rep > 1 && m->tp.rank % p->kv_rep != 0) tr_param_kv_range(p, &kv_off, &kv_n);
        if (!p->expert && (p->split_dim >= 0 || m->tp.rank == 0))
            for (int64_t e = 0; e < p->numel; e++)
                if (e < kv_off || e >= kv_off + kv_n)
                    dst[tr_model_logical_index(m, p, e)] = m->params[p->offset + e];
        if (strstr(p->name, "mlp.router.expert_bias")) o->expert_bias += p->numel;
        /* (MLA's latent norms are whole on each rank, their gradients the same: not summed.)
         * The MoE layers' whole tensors under SP are partial per chunk, like the norms. */
        if (!p->sp_partial) continue;
        if (strstr(p->name, "q_layernorm") || strstr(p->name, "k_layernorm"))
            o->head_grads += p->numel;
        else if (strstr(p->name, "layernorm") || strstr(p->name, "position_embeddings") ||
                 strstr(p->name, ".enorm.") || strstr(p->name, ".hnorm.") || /* MTP's norms */
                 strstr(p->name, ".mlp."))                                   /* MoE under SP */
            o->sp_grads += p->numel;
    }
    o->buffer_numel = m->n_params;
    for (int i = 0; m->moe && i < m->full.num_layers + m->full.mtp_layers; i++) {
        o->moe_layers += m->moe[i] != NULL;
        int64_t fwd = 0, bwd = 0;
        if (m->moe[i]) tr_moe_rows_run(m->moe[i], &fwd, &bwd);
        o->moe_rows += fwd + bwd;
    }
    for (int k = 0; k < m->n_parts; k++) {
        o->local_layers += m->parts[k].num_layers;
        o->has_embedding |= m->parts[k].has_embedding;
        o->has_loss |= m->parts[k].has_loss;
    }
    if (o->mp != MPI_COMM_NULL) {
        MPI_Allreduce(MPI_IN_PLACE, o->params, (int)o->n, MPI_FLOAT, MPI_SUM, o->mp);
        if (o->tied_copy)
            MPI_Allreduce(MPI_IN_PLACE, o->tied_copy, (int)emb_n, MPI_FLOAT, MPI_SUM, o->mp);
    }
    TR_TRY(equiv_gather_experts(o, m));
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        int64_t kv_off = 0, kv_n = 0;
        if (p->kv_rep > 1 && m->tp.rank % p->kv_rep != 0) tr_param_kv_range(p, &kv_off, &kv_n);
        const float *logical = o->params + o->starts[index_of(o->names, n_info, p->name)];
        for (int64_t e = kv_off; e < kv_off + kv_n; e++) {
            float a = m->params[p->offset + e], b = logical[tr_model_logical_index(m, p, e)];
            o->kv_drift += memcmp(&a, &b, sizeof a) != 0 && !(a == 0.0f && b == 0.0f);
        }
    }
    o->memory_bad = equiv_check_memory(o, m);
    /* the MoE layers' states count too: recomputation shares them */
    o->act_numel = m->act_numel + m->moe_act_bytes / (int64_t)sizeof(float);
    return TR_OK;
}

/* The two copies of a shared embedding must stay equal bit for bit (the embedding group's
 * all-reduce gives both the same gradient; the optimizer then does the same arithmetic).
 * Returns the number of differing elements. */
static int64_t tied_copy_drift(const run_out *run) {
    int emb = index_of(run->names, run->n_tensors, "embedding.word_embeddings.weight");
    if (!run->tied_copy || emb < 0) return 0;
    const float *first = run->params + run->starts[emb];
    int64_t n = run->starts[emb + 1] - run->starts[emb], differ = 0;
    for (int64_t e = 0; e < n; e++)
        differ += memcmp(&first[e], &run->tied_copy[e], sizeof(float)) != 0;
    printf("word embedding: the last stage's copy differs from the first stage's in %lld of "
           "%lld elements\n",
           (long long)differ, (long long)n);
    return differ;
}

/* A run of config c, on one rank until its groups are given. */
static run_out run_out_new(const tr_config *c) {
    return (run_out){.c = c,
                     .mp = MPI_COMM_NULL,
                     .pp = MPI_COMM_NULL,
                     .emp = MPI_COMM_NULL,
                     .ep = MPI_COMM_NULL};
}

static void run_out_free(run_out *o) {
    free(o->tied_copy);
    free(o->params);
    free(o->names);
    free(o->starts);
}

static tr_status resolve(const char *recipe, const char **keys, int n, int world, tr_config *c,
                         tr_diags *d) {
    tr_resolve_opts ro = {.recipe = recipe,
                          .overrides = keys,
                          .n_overrides = n,
                          .world = {world, world},
                          .validate = {.check_files = true}};
    return tr_resolve(&ro, c, d);
}

static tr_status train(const tr_config *c, tr_comm *comm, run_out *out, tr_diags *d) {
    tr_train_opts o = {.losses = out->losses,
                       .losses_cap = MAX_ITERS,
                       .comm = comm,
                       .on_finish = capture,
                       .on_finish_ctx = out};
    tr_train_result r;
    tr_status s = tr_train_run(c, &o, &r, d);
    out->iters = r.iterations;
    out->eval_loss = r.last_eval_loss;
    out->early = r.buckets_started_early;
    out->grad_numel[0] = r.grad_numel[0];
    out->grad_numel[1] = r.grad_numel[1];
    out->overflows = r.overflow_iterations;
    out->loss_scale = r.loss_scale;
    return s;
}

/* The key rows of a fused QKV bias get a gradient that is zero in exact arithmetic (softmax does
 * not change when one constant is added to every score of a row), so their values are Adam's
 * normalisation of rounding noise, a different noise in every summation order. They are left
 * out of the verdict (and reported); query and value rows are compared. */
typedef struct qkv_shape {
    int64_t per_group, q_rows, head_dim; /* per KV group: q_rows query rows, then K, then V */
} qkv_shape;

static qkv_shape qkv_of(const tr_config *c) {
    const tr_model_config *m = &c->model;
    int64_t heads = m->num_attention_heads;
    int64_t groups = m->num_query_groups != TR_NULL_INT ? m->num_query_groups : heads;
    int64_t D = m->kv_channels != TR_NULL_INT ? m->kv_channels : m->hidden_size / heads;
    return (qkv_shape){(heads / groups + 2) * D, heads / groups * D, D};
}

static bool is_key_row(const qkv_shape *q, int64_t i) {
    int64_t in_group = i % q->per_group;
    return in_group >= q->q_rows && in_group < q->q_rows + q->head_dim;
}

static double rel_err(const float *a, const float *b, int64_t n, const qkv_shape *skip_keys) {
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (skip_keys && is_key_row(skip_keys, i)) continue;
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > diff || isnan(e)) diff = isnan(e) ? INFINITY : e;
        if (fabs((double)b[i]) > scale) scale = fabs((double)b[i]);
    }
    return scale > 0.0 ? diff / scale : diff;
}

/* Rank 0: losses and every tensor against the reference. Returns the largest loss error and
 * the largest parameter error in *param_err. */
static double compare(const run_out *run, const run_out *ref, const qkv_shape *qkv,
                      double *param_err) {
    *param_err = INFINITY;
    if (run->iters != ref->iters || run->n_tensors != ref->n_tensors) {
        fprintf(stderr, "equiv: shape mismatch: %lld vs %lld iterations, %lld vs %lld params\n",
                (long long)run->iters, (long long)ref->iters, (long long)run->n, (long long)ref->n);
        return INFINITY;
    }
    double worst_loss = 0.0, worst_param = 0.0;
    for (int64_t i = 0; i < ref->iters; i++) {
        double e = fabs((double)run->losses[i] - ref->losses[i]) / fabs((double)ref->losses[i]);
        if (!(e <= worst_loss)) worst_loss = isnan(e) ? INFINITY : e;
        printf("iteration %lld: loss %.9g (single rank %.9g), rel err %.3g\n", (long long)i + 1,
               run->losses[i], ref->losses[i], e);
    }
    /* Evaluation (validation.eval_iters > 0): under pipeline parallelism a forward-only pass
     * through the stages. */
    if (!isnan(ref->eval_loss)) {
        double e = fabs(run->eval_loss - ref->eval_loss) / fabs(ref->eval_loss);
        printf("validation loss %.9g (single rank %.9g), rel err %.3g\n", run->eval_loss,
               ref->eval_loss, e);
        if (!(e <= worst_loss)) worst_loss = isnan(e) ? INFINITY : e;
    }
    const char *worst_name = "";
    for (int t = 0; t < ref->n_tensors; t++) {
        if (strcmp(run->names[t], ref->names[t]) != 0) return INFINITY;
        /* A larger TP pads the vocabulary further: the rows both runs have are compared (the
         * extra rows are padding, outside every softmax). */
        int64_t a = ref->starts[t], len = ref->starts[t + 1] - a;
        int64_t b = run->starts[t], run_len = run->starts[t + 1] - b;
        if (run_len < len) len = run_len;
        bool qkv_bias = strstr(ref->names[t], "linear_qkv.bias") != NULL;
        double e = rel_err(run->params + b, ref->params + a, len, qkv_bias ? qkv : NULL);
        if (qkv_bias) {
            double key_max = 0.0;
            for (int64_t i = 0; i < len; i++)
                if (is_key_row(qkv, i) && fabs((double)ref->params[a + i]) > key_max)
                    key_max = fabs((double)ref->params[a + i]);
            printf("%s: key rows (zero gradient, not compared): max |value| %.3g\n", ref->names[t],
                   key_max);
        }
        if (getenv("EQUIV_VERBOSE")) printf("  %-60s %.3g\n", ref->names[t], e);
        if (!(e <= worst_param)) {
            worst_param = e;
            worst_name = ref->names[t];
        }
    }
    printf("max rel err: losses %.3g, parameters %.3g (%s)\n", worst_loss, worst_param, worst_name);
    *param_err = worst_param;
    return worst_loss;
}

/* The bytes the comm layer booked over the run against Megatron's volumes, per microbatch of
 * r = mbs x seq rows of width h, on TP (> 1), for the L layers this rank holds (all of them
 * without pipeline parallelism; each computed once: no stage recomputes its forward):
 *   without sequence parallelism, all-reduces of r x h: the vocab-parallel embedding (on the
 *   stage holding it), two row-parallel outputs per layer (forward), two column-parallel input
 *   gradients per layer and the output layer's (backward, on the last stage): r.h.(e + 4L + o)
 *   elements with e, o = 1 where the rank holds the embedding, the loss;
 *   with it, the same exchanges as reduce-scatters (embedding, proj and fc2 outputs; qkv, fc1
 *   and output-layer input gradients: r.h counted each) and all-gathers (norm outputs into qkv,
 *   fc1 and the output layer; proj and fc2 output gradients and the embedding's: r.h/tp each),
 *   plus once per iteration the all-reduce of the norm and position-embedding gradients the rank
 *   holds; the cross entropy's max (r) and sum (2r) all-reduces on the last stage; with
 *   qk_layernorm, once per iteration with or without SP, the all-reduce of the q/k norm
 *   gradients (each rank's covers its own heads); with TP larger than the G query groups, once
 *   per iteration and layer the all-reduce that sums the key-value gradient copies, one slot
 *   per group of 2.D.(h + qkv bias) elements: G.2D.(h + b). Multi-latent attention replaces
 *   the QKV input gradient (r.h) by those of its up projections' inputs and of the shared rotary
 *   key: r.(q_lora_rank, or h for linear_q_proj, + kv_lora_rank + qk_pos_emb_head_dim);
 *   under SP it gathers its input as the QKV layer does, its input gradient needs no
 *   reduce-scatter (it comes out whole on every rank) and those gradients stay all-reduces.
 *   Each MTP depth D on the last stage all-reduces its embedding, its layer's four exchanges,
 *   the output layer's input gradient and eh_proj's (two wide): 8.r.h, plus its cross entropy
 *   (3r), and all-gathers eh_proj's output: r.h/tp; under SP those eight are reduce-scatters
 *   and nine all-gathers of r.h/tp go with them (eh_proj's two inputs, the layer's four, the
 *   output layer's input, eh_proj's output gradient, the embedding's gradient).
 * On CP (> 1) the ring (runtime/context_parallel/cp.h): r counts this rank's rows of the
 * microbatch; per layer and microbatch K and V of them (2.r.g.D, g the query groups this TP rank
 * holds) sent and received cp-1 times forward, cp-1 times backward with the dK/dV of cp hops;
 * with cp_comm_type allgather, K and V all-gathered forward and backward and the cp dK/dV slots
 * reduce-scattered.
 * On DP per iteration: this rank's gradient buffer of B elements all-reduced (DDP) or
 * reduce-scattered with B/dp all-gathered (distributed optimizer), and the loss and token count
 * (two doubles); per evaluation split over DP (the batch's microbatches divide by dp), the loss
 * sum (one double); with MoE layers, the step's balancing-loss statistics (three doubles); on
 * TP x DP x CP with the expert bias, the token count per expert of the rank's MoE layers (a double
 * each), and per logged iteration the tokens per expert of every layer. On
 * PP (> 1) the point-to-point messages of r/tp (SP) or r rows of width h,
 * 4 bytes an element with pipeline_dtype fp32, 2 with bf16/fp16 (Megatron's pipeline_dtype): per
 * microbatch and virtual stage s this rank holds, the output sent on unless s is the last and its
 * input gradient sent back unless s is the first (received alike), and per evaluation microbatch
 * of this DP rank the outputs only. Returns the number of mismatches (printed). */
static int check_volume(const tr_config *c, const tr_comm *comm, const run_out *run) {
    const tr_model_config *m = &c->model;
    int64_t iters = run->iters, nmb = c->derived.num_microbatches;
    int64_t cp = m->context_parallel_size > 1 ? m->context_parallel_size : 1;
    int64_t r = c->train.micro_batch_size * m->seq_length / cp, h = m->hidden_size;
    int64_t L = run->local_layers, dp = c->derived.data_parallel_size;
    int64_t tp = m->tensor_model_parallel_size;
    bool sp = tp > 1 && m->sequence_parallel;
    bool sharded = c->ddp.use_distributed_optimizer || c->optimizer.use_distributed_optimizer;
    int64_t B = run->grad_numel[0] ? run->grad_numel[0] : run->buffer_numel;
    int64_t BE = run->grad_numel[1], edp = tr_comm_group_size(comm, TR_GROUP_EXPERT_DP);
    int64_t sp_grads = sp ? run->sp_grads : 0;
    int64_t exchanges = r * h * (run->has_embedding + 4 * L + run->has_loss);
    int64_t depths = run->has_loss && m->mtp_num_layers != TR_NULL_INT ? m->mtp_num_layers : 0;
    exchanges += depths * 8 * r * h;
    int64_t mla_sp = 0, ag_extra = sp ? depths * r * h : 0; /* MTP under SP: en and hn gathered */
    if (m->multi_latent_attention) { /* the latents' input gradients replace the QKV one's */
        int64_t q = m->q_lora_rank != TR_NULL_INT ? m->q_lora_rank : h;
        int64_t mla = r * (q + m->kv_lora_rank + m->qk_pos_emb_head_dim - h);
        /* SP: the input gradient comes out whole (no reduce-scatter), the latents' all-reduced */
        if (sp) mla_sp = (L + depths) * (mla + r * h);
        if (sp) ag_extra += (L + depths) * r * h;
        exchanges += (L + depths) * (sp ? -r * h : mla);
    }
    /* An MoE layer (sequence parallel, whole experts) runs on the chunk: no fc1 input gather, no
     * fc2 output reduce-scatter, nor their gradients'. */
    if (sp) exchanges -= 2 * r * h * run->moe_layers;
    int64_t ce = run->has_loss ? 3 * r * (1 + depths) : 0;
    int64_t heads = m->num_attention_heads, G = m->num_query_groups;
    int64_t D = m->kv_channels != TR_NULL_INT ? m->kv_channels : h / heads;
    int64_t qkv_bias = m->add_bias_linear || m->add_qkv_bias;
    int64_t kv_sums =
        tp > G && !m->multi_latent_attention ? (L + depths) * G * 2 * D * (h + qkv_bias) : 0;
    int64_t tp_ar = tp > 1 ? iters * (nmb * (ce + (sp ? mla_sp : exchanges)) + sp_grads +
                                      run->head_grads + kv_sums)
                           : 0;
    /* MoE under SP or CP, on TP x CP: per layer and training microbatch the aux loss's counts
     * (a double per expert, per sequence for seq_aux_loss), and per iteration the balancing and
     * z losses (two doubles). */
    int64_t tp_cp_bytes = 0;
    if ((sp || cp > 1) && m->num_moe_experts != TR_NULL_INT) {
        bool aux = m->moe_router_load_balancing_type != TR_MOELB_NONE && m->moe_aux_loss_coeff > 0;
        int64_t nb = m->moe_router_load_balancing_type == TR_MOELB_SEQ_AUX_LOSS
                         ? c->train.micro_batch_size
                         : 1;
        tp_cp_bytes =
            iters * (16 + (aux ? nmb * run->moe_layers * 8 * nb * m->num_moe_experts : 0));
    }
    int64_t tp_rs = sp ? iters * nmb * exchanges : 0;
    int64_t tp_ag = sp ? iters * nmb * (exchanges + ag_extra) / tp : 0;
    if (tp > 1) tp_ag += iters * nmb * depths * r * h / tp; /* MTP's eh_proj output */
    const tr_validation_config *v = &c->validation;
    int64_t eval_gbs = v->eval_global_batch_size != TR_NULL_INT ? v->eval_global_batch_size
                                                                : c->train.global_batch_size;
    int64_t eval_nmb = eval_gbs / c->train.micro_batch_size;
    bool eval_split = dp > 1 && eval_nmb % dp == 0;
    /* Every eval_interval, and once more after the last iteration unless it just evaluated. */
    int64_t evals = v->eval_iters > 0 && v->eval_interval != TR_NULL_INT
                        ? iters / v->eval_interval + (iters % v->eval_interval != 0)
                        : 0;
    int64_t eval_bytes = eval_split || cp > 1 ? 8 * evals : 0;
    int64_t pp = m->pipeline_model_parallel_size, acts_out = 0, acts_in = 0;
    if (pp > 1) {
        int64_t vpp = m->virtual_pipeline_model_parallel_size == TR_NULL_INT
                          ? 1
                          : m->virtual_pipeline_model_parallel_size;
        int64_t pp_rank = tr_comm_group_rank(comm, TR_GROUP_PP), last = pp * vpp - 1;
        for (int64_t ch = 0; ch < vpp; ch++) {
            acts_out += ch * pp + pp_rank < last;
            acts_in += ch * pp + pp_rank > 0;
        }
    }
    /* and, per logged iteration (every log_interval and the last), the tokens per expert of every
     * layer, the MTP depths' included (a double each) */
    int64_t li = c->logger.log_interval > 0 ? c->logger.log_interval : 1;
    int64_t logged = iters / li + (iters % li != 0);
    int64_t moe_layers = m->num_layers + (m->mtp_num_layers != TR_NULL_INT ? m->mtp_num_layers : 0);
    bool moe = m->num_moe_experts != TR_NULL_INT;
    int64_t moe_bytes = moe ? iters * 24 : 0;
    int64_t moe_tokens =
        moe ? iters * 8 * run->expert_bias + logged * 8 * moe_layers * m->num_moe_experts : 0;
    int64_t msg = r / (sp ? tp : 1) * h * (m->pipeline_dtype == TR_DTYPE_FP32 ? 4 : 2);
    int64_t eval_mbs = evals * v->eval_iters * (eval_split ? eval_nmb / dp : eval_nmb);
    /* Gradients travel against the activations: a stage sends one per activation received. */
    int64_t pp_send = msg * (iters * nmb * (acts_out + acts_in) + eval_mbs * acts_out);
    int64_t pp_recv = msg * (iters * nmb * (acts_in + acts_out) + eval_mbs * acts_in);
    /* The ring: per layer and microbatch the K and V of this rank's rows (its groups: one when
     * TP exceeds them), cp-1 times forward, cp-1 times with the dK/dV of cp hops backward. */
    int64_t g_local = tp > G ? 1 : G / tp;
    int64_t kv = 2 * r * g_local * D * 4;
    const tr_str_list *ct = &m->cp_comm_type;
    bool cp_ag = cp > 1 && !ct->null && ct->n > 0 && strcmp(ct->v[0], "allgather") == 0;
    bool cp_a2a = cp > 1 && !ct->null && ct->n > 0 && strcmp(ct->v[0], "a2a") == 0;
    int64_t cp_bytes = cp > 1 && !cp_ag && !cp_a2a
                           ? L * kv * (iters * nmb * (3 * cp - 2) + eval_mbs * (cp - 1))
                           : 0;
    /* allgather: K and V gathered forward and again backward, the dK/dV slots reduce-scattered
     * (booked by their whole input, cp slots). */
    int64_t cp_gather = cp_ag ? L * kv * (iters * nmb * 2 + eval_mbs) : 0;
    int64_t cp_scatter = cp_ag ? L * kv * cp * iters * nmb : 0;
    /* a2a: all-to-alls of q, k, v and out forward, of q, k, v, out, dout and dq, dk, dv
     * backward, each booked by its whole send buffer (this rank's rows, all its heads). */
    int64_t qsz = r * (heads / tp) * D * 4;
    int64_t cp_a2a_bytes =
        cp_a2a ? L * ((iters * nmb * 6 + eval_mbs * 2) * qsz + (iters * nmb * 3 + eval_mbs) * kv)
               : 0;
    struct {
        const char *what;
        int group;
        tr_comm_kind kind;
        int64_t bytes;
    } want[] = {
        {"TP all-reduce", TR_GROUP_TP, TR_COMM_ALL_REDUCE, 4 * tp_ar},
        {"TP reduce-scatter", TR_GROUP_TP, TR_COMM_REDUCE_SCATTER, 4 * tp_rs},
        {"TP all-gather", TR_GROUP_TP, TR_COMM_ALL_GATHER, 4 * tp_ag},
        {"DP all-reduce", TR_GROUP_DP_CP, TR_COMM_ALL_REDUCE,
         iters * (sharded ? 16 : 4 * B + 16) + eval_bytes + moe_bytes},
        {"DP reduce-scatter", TR_GROUP_DP_CP, TR_COMM_REDUCE_SCATTER, sharded ? iters * 4 * B : 0},
        {"TP x DP x CP all-reduce", TR_GROUP_TP_DP_CP, TR_COMM_ALL_REDUCE, moe_tokens},
        {"TP x CP all-reduce", TR_GROUP_TP_CP, TR_COMM_ALL_REDUCE, tp_cp_bytes},
        {"DP all-gather", TR_GROUP_DP_CP, TR_COMM_ALL_GATHER,
         sharded ? iters * 4 * B / dp / cp : 0},
        {"expert DP all-reduce", TR_GROUP_EXPERT_DP, TR_COMM_ALL_REDUCE,
         sharded ? 0 : iters * 4 * BE},
        {"expert DP reduce-scatter", TR_GROUP_EXPERT_DP, TR_COMM_REDUCE_SCATTER,
         sharded ? iters * 4 * BE : 0},
        {"expert DP all-gather", TR_GROUP_EXPERT_DP, TR_COMM_ALL_GATHER,
         sharded ? iters * 4 * BE / edp : 0},
        {"CP send", TR_GROUP_CP, TR_COMM_SEND, cp_bytes},
        {"CP receive", TR_GROUP_CP, TR_COMM_RECV, cp_bytes},
        {"CP all-gather", TR_GROUP_CP, TR_COMM_ALL_GATHER, cp_gather},
        {"CP reduce-scatter", TR_GROUP_CP, TR_COMM_REDUCE_SCATTER, cp_scatter},
        {"CP all-to-all", TR_GROUP_CP, TR_COMM_ALL_TO_ALL, cp_a2a_bytes},
        {"PP send", TR_GROUP_PP, TR_COMM_SEND, pp_send},
        {"PP receive", TR_GROUP_PP, TR_COMM_RECV, pp_recv}};
    int bad = equiv_check_ep_volume(c, comm, run, eval_mbs), rank;
    bad += equiv_check_etp_volume(c, comm, run, eval_mbs);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        uint64_t got = comm->counters.bytes[want[i].group][want[i].kind];
        bool ok = got == (uint64_t)want[i].bytes;
        if (rank == 0 || !ok)
            printf("rank %d: %s: %llu bytes, analytic %lld%s\n", rank, want[i].what,
                   (unsigned long long)got, (long long)want[i].bytes, ok ? "" : "  MISMATCH");
        bad += !ok;
    }
    return bad;
}

/* Every rank's parameters must equal rank 0's bit for bit (replicas never drift apart). */
static double replica_diff(const run_out *run) {
    float *root = malloc((size_t)run->n * sizeof(float));
    if (!root) return INFINITY;
    memcpy(root, run->params, (size_t)run->n * sizeof(float));
    MPI_Bcast(root, (int)run->n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    double mine = memcmp(root, run->params, (size_t)run->n * sizeof(float)) ? 1.0 : 0.0, any;
    free(root);
    MPI_Allreduce(&mine, &any, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* Losses and parameters (and the tied copy) of two runs on the same layout, bit for bit; the
 * number of differing values (printed). */
static int64_t bitwise_diff(const run_out *run, const run_out *ref) {
    if (run->iters != ref->iters || run->n != ref->n) return -1;
    int64_t loss_d = 0, param_d = 0, copy_d = 0;
    for (int64_t i = 0; i < run->iters && i < MAX_ITERS; i++)
        loss_d += memcmp(&run->losses[i], &ref->losses[i], sizeof(float)) != 0;
    for (int64_t e = 0; e < run->n; e++)
        param_d += memcmp(&run->params[e], &ref->params[e], sizeof(float)) != 0;
    if (!run->tied_copy != !ref->tied_copy) return -1;
    int emb = index_of(ref->names, ref->n_tensors, "embedding.word_embeddings.weight");
    for (int64_t e = 0; run->tied_copy && emb >= 0 && e < ref->starts[emb + 1] - ref->starts[emb];
         e++)
        copy_d += memcmp(&run->tied_copy[e], &ref->tied_copy[e], sizeof(float)) != 0;
    printf("against the same layout: %lld of %lld losses, %lld of %lld parameters, %lld tied-copy "
           "elements differ bitwise\n",
           (long long)loss_d, (long long)run->iters, (long long)param_d, (long long)run->n,
           (long long)copy_d);
    return loss_d + param_d + copy_d;
}

/* Every rank leaves with rank 0's verdict, after freeing what both modes hold. */
static int finish(int code, run_out *ref, run_out *run, tr_comm *comm, tr_parallel_state *ps,
                  tr_config *ref_c, tr_config *c, tr_diags *d) {
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    run_out_free(ref);
    run_out_free(run);
    tr_comm_destroy(comm);
    if (ps) tr_parallel_state_free(ps);
    tr_config_free(ref_c);
    tr_config_free(c);
    tr_diags_free(d);
    MPI_Finalize();
    return code;
}

static int usage(void) {
    MPI_Finalize();
    fprintf(stderr, "usage: equiv_check [--tol X] [--param-tol X] [--rank-order] [--expect-differ] "
                    "[--expect-overlap] [--check-volume] [--min-skips N] RECIPE KEY=VALUE... -- "
                    "LAYOUT_KEY=VALUE...\n       equiv_check --same-layout [--fewer-acts] "
                    "[--expect-differ] RECIPE KEY=VALUE... -- LAYOUT_KEY=VALUE... -- "
                    "RUN_KEY=VALUE...\n");
    return 2;
}

/* --same-layout: the reference (keys[0, n_ref)) and the tested run (all keys) on the mpirun
 * world, one parallel state and communicator for both (the same layout); MPI is initialised. */
static int same_layout_main(const char *recipe, const char **keys, int n_ref, int n_all,
                            bool fewer_acts, bool expect_differ) {
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tr_diags d;
    tr_diags_init(&d);
    tr_config ref_c, c;
    memset(&ref_c, 0, sizeof ref_c);
    memset(&c, 0, sizeof c);
    run_out ref = run_out_new(&ref_c), run = run_out_new(&c);
    tr_parallel_dims dims;
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    tr_status s = resolve(recipe, keys, n_ref, world, &ref_c, &d);
    if (s == TR_OK) s = resolve(recipe, keys, n_all, world, &c, &d);
    if (s == TR_OK) s = tr_parallel_dims_from_config(&c, world, &dims);
    if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d);
    bool have_ps = s == TR_OK;
    tr_comm_options co = {.reduce_mode = TR_COMM_REDUCE_NATIVE};
    if (s == TR_OK) s = tr_comm_mpi_create(&ps, &co, &d, &comm);
    if (s == TR_OK && ps.groups[TR_GROUP_TP_PP].size > 1)
        run.mp = ref.mp = ps.groups[TR_GROUP_TP_PP].comm;
    if (s == TR_OK && ps.groups[TR_GROUP_PP].size > 1)
        run.pp = ref.pp = ps.groups[TR_GROUP_PP].comm;
    if (s == TR_OK && ps.groups[TR_GROUP_TP_EP_PP].size > 1)
        run.emp = ref.emp = ps.groups[TR_GROUP_TP_EP_PP].comm;
    if (s == TR_OK) s = train(&ref_c, comm, &ref, &d);
    if (s == TR_OK) s = train(&c, comm, &run, &d);
    int ok = s == TR_OK, all_ok, code = 1;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok) {
        int more = run.act_numel >= ref.act_numel, any_more = 0, mem_bad = 0;
        printf("rank %d: activations %lld floats, the reference %lld\n", rank,
               (long long)run.act_numel, (long long)ref.act_numel);
        MPI_Allreduce(&more, &any_more, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        int bad = run.memory_bad + ref.memory_bad;
        MPI_Allreduce(&bad, &mem_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        double replicas = replica_diff(&run);
        if (rank == 0) {
            int64_t differ = bitwise_diff(&run, &ref);
            bool same = differ == 0 && replicas == 0.0 && tied_copy_drift(&run) == 0;
            bool fail = same == expect_differ || mem_bad || (fewer_acts && any_more);
            if (fewer_acts && any_more) printf("a rank holds no fewer activations\n");
            if (mem_bad) printf("a rank holds parameters or activations outside its stages\n");
            code = fail ? 1 : 0;
            printf("%s: %s (%d ranks)\n", code ? "FAIL" : "OK",
                   same ? "bitwise equal to the same layout's reference"
                        : "differs from the same layout's reference",
                   world);
        }
    } else if (d.n > 0) {
        tr_diags_print_text(&d, stderr, false);
    }
    return finish(code, &ref, &run, comm, have_ps ? &ps : NULL, &ref_c, &c, &d);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double tol = 1e-5, param_tol = -1.0;
    bool rank_order = false, expect_differ = false, expect_overlap = false, volume = false;
    bool same_layout = false, fewer_acts = false;
    int64_t min_skips = 0;
    int a = 1;
    for (; a < argc && strncmp(argv[a], "--", 2) == 0 && argv[a][2]; a++) {
        if (strcmp(argv[a], "--tol") == 0 && a + 1 < argc)
            tol = atof(argv[++a]);
        else if (strcmp(argv[a], "--param-tol") == 0 && a + 1 < argc)
            param_tol = atof(argv[++a]);
        else if (strcmp(argv[a], "--rank-order") == 0)
            rank_order = true;
        else if (strcmp(argv[a], "--expect-differ") == 0)
            expect_differ = true;
        else if (strcmp(argv[a], "--expect-overlap") == 0)
            expect_overlap = true;
        else if (strcmp(argv[a], "--check-volume") == 0)
            volume = true;
        else if (strcmp(argv[a], "--same-layout") == 0)
            same_layout = true;
        else if (strcmp(argv[a], "--fewer-acts") == 0)
            fewer_acts = true;
        else if (strcmp(argv[a], "--min-skips") == 0 && a + 1 < argc)
            min_skips = atoll(argv[++a]);
        else
            return usage();
    }
    if (a >= argc) return usage();
    const char *recipe = argv[a++];
    const char *keys[MAX_KEYS];
    int n_common = 0, n_all = 0, n_ref = 0, seps = 0;
    for (; a < argc && n_all < MAX_KEYS; a++) {
        if (strcmp(argv[a], "--") == 0) {
            if (++seps > (same_layout ? 2 : 1)) return usage();
            continue;
        }
        keys[n_all++] = argv[a];
        if (seps == 0) n_common++;
        if (seps <= 1) n_ref++;
    }
    if (same_layout) return same_layout_main(recipe, keys, n_ref, n_all, fewer_acts, expect_differ);

    tr_diags d;
    tr_diags_init(&d);
    if (param_tol < 0) param_tol = tol;
    tr_config ref_c, c;
    memset(&ref_c, 0, sizeof ref_c);
    memset(&c, 0, sizeof c);
    run_out ref = run_out_new(&ref_c), run = run_out_new(&c);
    tr_status s = TR_OK;
    if (rank == 0) {
        s = resolve(recipe, keys, n_common, 1, &ref_c, &d);
        if (s == TR_OK) s = train(&ref_c, NULL, &ref, &d);
    }
    int ok = s == TR_OK, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

    tr_parallel_dims dims;
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    if (all_ok) s = resolve(recipe, keys, n_all, world, &c, &d);
    if (all_ok && s == TR_OK) s = tr_parallel_dims_from_config(&c, world, &dims);
    if (all_ok && s == TR_OK) s = tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d);
    bool have_ps = all_ok && s == TR_OK;
    tr_comm_options co = {.reduce_mode =
                              rank_order ? TR_COMM_REDUCE_RANK_ORDER : TR_COMM_REDUCE_NATIVE};
    if (all_ok && s == TR_OK) s = tr_comm_mpi_create(&ps, &co, &d, &comm);
    if (all_ok && s == TR_OK && ps.groups[TR_GROUP_TP_PP].size > 1)
        run.mp = ps.groups[TR_GROUP_TP_PP].comm;
    if (all_ok && s == TR_OK && ps.groups[TR_GROUP_PP].size > 1)
        run.pp = ps.groups[TR_GROUP_PP].comm;
    if (all_ok && s == TR_OK && ps.groups[TR_GROUP_TP_EP_PP].size > 1)
        run.emp = ps.groups[TR_GROUP_TP_EP_PP].comm;
    if (all_ok && s == TR_OK && ps.groups[TR_GROUP_EP].size > 1)
        run.ep = ps.groups[TR_GROUP_EP].comm;
    if (all_ok && s == TR_OK) s = train(&c, comm, &run, &d);
    ok = all_ok && s == TR_OK;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

    int code = 1;
    if (all_ok) {
        int vol_bad = volume ? check_volume(&c, comm, &run) : 0, any_vol_bad = 0;
        MPI_Allreduce(&vol_bad, &any_vol_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        int mem_bad = 0;
        MPI_Allreduce(&run.memory_bad, &mem_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        double replicas = replica_diff(&run);
        int64_t kv_drift = run.kv_drift;
        MPI_Allreduce(MPI_IN_PLACE, &kv_drift, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        int64_t skips[2] = {run.overflows, -run.overflows};
        MPI_Allreduce(MPI_IN_PLACE, skips, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        double scales[2] = {run.loss_scale, -run.loss_scale};
        MPI_Allreduce(MPI_IN_PLACE, scales, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            qkv_shape qkv = qkv_of(&ref_c);
            double param_err;
            double err = compare(&run, &ref, &qkv, &param_err);
            if (!(param_err <= param_tol)) err = INFINITY;
            if (replicas != 0.0) printf("ranks disagree on the final parameters\n");
            printf("gradient buckets started during backward: %lld\n", (long long)run.early);
            if (expect_overlap && run.early == 0) err = INFINITY;
            /* NaN scales (no scaler) compare equal here: the flags say whether both have one. */
            bool same_scale = isnan(ref.loss_scale)
                                  ? isnan(scales[0]) && isnan(scales[1])
                                  : scales[0] == ref.loss_scale && -scales[1] == ref.loss_scale;
            printf("inf/NaN steps skipped: single rank %lld, ranks %lld..%lld; loss scale %g, "
                   "ranks %g..%g\n",
                   (long long)ref.overflows, (long long)-skips[1], (long long)skips[0],
                   ref.loss_scale, -scales[1], scales[0]);
            if (skips[0] != ref.overflows || -skips[1] != ref.overflows || !same_scale ||
                ref.overflows < min_skips)
                err = INFINITY;
            if (any_vol_bad) {
                printf("communication volume differs from the analytic volume\n");
                err = INFINITY;
            }
            if (mem_bad) {
                printf("a rank holds parameters or activations outside its stages\n");
                err = INFINITY;
            }
            if (tied_copy_drift(&run) != 0) err = INFINITY;
            if (kv_drift != 0) {
                printf("key-value copies differ from their group's first rank in %lld elements\n",
                       (long long)kv_drift);
                err = INFINITY;
            }
            bool same = err <= tol && replicas == 0.0;
            code = same != expect_differ ? 0 : 1;
            printf("%s: %s (tolerance %g, parameters %g, %d ranks)\n", code ? "FAIL" : "OK",
                   same ? "equal to the single-rank run" : "differs from the single-rank run", tol,
                   param_tol, world);
        }
    } else if (d.n > 0) {
        tr_diags_print_text(&d, stderr, false);
    }
    return finish(code, &ref, &run, comm, have_ps ? &ps : NULL, &ref_c, &c, &d);
}
