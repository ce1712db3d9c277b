/* See runtime/pipeline/executor.h. */
#include "runtime/pipeline/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device/device.h"

/* One tag per direction is enough: the static check proved the per-channel order (a batch uses
 * the comm layer's own tag, the same on both sides). */
enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_EVAL = 3 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The most microbatches of each chunk forwarded but not yet backwarded at any point of the
 * list: the activation sets the chunk needs (counted as the planner counts them). */
static tr_status count_in_flight(tr_pp_exec *e) {
    int slots[64];
    TR_TRY(tr_pp_slots_in_flight(&e->sched, e->vpp, slots, &e->max_slots));
    for (int ch = 0; ch < e->vpp; ch++) e->parts[ch].slots = slots[ch];
    return TR_OK;
}

tr_status tr_pp_exec_create(tr_pp_exec *e, const tr_config *c, tr_comm *comm, tr_diags *d) {
    memset(e, 0, sizeof *e);
    e->comm = comm;
    /* The runtime refuses a schedule the static check rejects (deadlock or mismatched order). */
    TR_TRY(tr_pp_schedule_check_all(c, d));
    e->pp = tr_comm_group_size(comm, TR_GROUP_PP);
    e->pp_rank = tr_comm_group_rank(comm, TR_GROUP_PP);
    TR_TRY(tr_pp_layout_build(c, &e->layout, d));
    TR_TRY(tr_pp_schedule_build(c, e->pp_rank, &e->sched, d));
    e->vpp = e->layout.vpp;
    e->nmb = e->sched.num_microbatches;
    e->per_token_loss = c->model.calculate_per_token_loss;
    int32_t dt = e->sched.message_dtype;
    e->lowp = dt == TR_DTYPE_BF16 ? TR_LOWP_BF16 : dt == TR_DTYPE_FP16 ? TR_LOWP_F16 : 0;
    if (e->vpp > 64) return TR_ERR_INVALID;
    e->parts = calloc((size_t)e->vpp, sizeof *e->parts);
    size_t slots = (size_t)e->nmb * (size_t)e->vpp;
    e->input = calloc(slots, sizeof *e->input);
    e->output = calloc(slots, sizeof *e->output);
    e->grad_in = calloc(slots, sizeof *e->grad_in);
    e->grad_out = calloc(slots, sizeof *e->grad_out);
    if (!e->parts || !e->input || !e->output || !e->grad_in || !e->grad_out) return TR_ERR_NOMEM;
    for (int ch = 0; ch < e->vpp; ch++) {
        const tr_pp_stage *st = tr_pp_layout_stage(&e->layout, e->pp_rank, ch);
        /* The model runs its MTP depths with the loss (runtime.mtp_layout refuses others). */
        int64_t mtp = c->model.mtp_num_layers == TR_NULL_INT ? 0 : c->model.mtp_num_layers;
        if (st->num_mtp_layers > 0 && (!st->has_loss || st->num_mtp_layers != mtp))
            return tr_diag_add(d, TR_SEV_ERROR, "runtime.mtp_layout", NULL,
                               "model.pipeline_model_parallel_layout",
                               "put every 'm' in the last stage, with the loss",
                               "multi-token prediction runs on the loss stage only");
        e->parts[ch] =
            (tr_model_part){st->first_layer, st->num_layers, st->has_embedding, st->has_loss, 0};
    }
    TR_TRY(count_in_flight(e));
    e->slot_mb = malloc((size_t)e->vpp * (size_t)e->max_slots * sizeof *e->slot_mb);
    if (!e->slot_mb) return TR_ERR_NOMEM;
    for (int i = 0; i < e->vpp * e->max_slots; i++) e->slot_mb[i] = -1;
    return TR_OK;
}

/* Bytes of one message on the wire. */
static int64_t wire_bytes(const tr_pp_exec *e) {
    return e->act_numel * (int64_t)(e->lowp ? sizeof(uint16_t) : sizeof(float));
}

tr_status tr_pp_exec_attach(tr_pp_exec *e, tr_model *m, tr_diags *d) {
    e->m = m;
    e->act_numel = (int64_t)m->batch * m->spec.seq * m->spec.hidden;
    if (m->spec.sequence_parallel) e->act_numel /= m->tp.size;
    e->pool.bytes = (size_t)e->act_numel * sizeof(float);
    e->lpool.bytes = (size_t)e->act_numel * sizeof(uint16_t);
    bool same_parts = m->n_parts == e->vpp;
    for (int ch = 0; same_parts && ch < e->vpp; ch++)
        same_parts = memcmp(&m->parts[ch], &e->parts[ch], sizeof e->parts[ch]) == 0;
    if (e->layout.pp != e->pp || !same_parts || e->sched.message_bytes != wire_bytes(e))
        return tr_diag_add(
            d, TR_SEV_ERROR, "runtime.pp_mismatch", NULL, "model.pipeline_model_parallel_size",
            "report this: the schedule and the runtime disagree",
            "the pipeline schedule (PP %d, %lld-byte messages) does not match "
            "the runtime (PP %d, %lld-byte messages of %lld activations, %s "
            "stages)",
            e->layout.pp, (long long)e->sched.message_bytes, e->pp, (long long)wire_bytes(e),
            (long long)e->act_numel, same_parts ? "the same" : "different");
    return tr_loss_buffer_create(&e->losses, m->dev, e->nmb > 0 ? e->nmb : 1);
}

static tr_device *dev_of(const tr_pp_exec *e) {
    return e->m ? e->m->dev : tr_device_host();
}

/* Transfer buffers live where the model's activations do; a given-back buffer goes to its pool
 * (or, when the pool cannot grow, back to the device). */
static void pool_give(tr_pp_exec *e, tr_pp_pool *pl, void *p) {
    if (!p) return;
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 8;
        void **q = realloc(pl->items, (size_t)cap * sizeof *q);
        if (!q) {
            tr_device_free(dev_of(e), TR_MEM_ACTIVATIONS, p);
            return;
        }
        pl->items = q;
        pl->cap = cap;
    }
    pl->items[pl->n++] = p;
}

static void *pool_take(tr_pp_exec *e, tr_pp_pool *pl) {
    if (pl->n > 0) return pl->items[--pl->n];
    void *p = NULL;
    tr_device_alloc(e->m->dev, TR_MEM_ACTIVATIONS, pl->bytes, &p);
    return p;
}

static void pool_free(tr_pp_exec *e, tr_pp_pool *pl) {
    for (int i = pl->n - 1; i >= 0; i--)
        tr_device_free(dev_of(e), TR_MEM_ACTIVATIONS, pl->items[i]);
    free(pl->items);
}

static void free_act(tr_pp_exec *e, float *p) {
    pool_give(e, &e->pool, p);
}

static float *alloc_act(tr_pp_exec *e) {
    return pool_take(e, &e->pool);
}

static void give_back(tr_pp_exec *e, const tr_pp_pending *p) {
    pool_give(e, p->packed ? &e->lpool : &e->pool, p->free_after);
}

static void free_slots(tr_pp_exec *e) {
    size_t slots = (size_t)e->nmb * (size_t)e->vpp;
    for (size_t i = 0; i < slots; i++) {
        free_act(e, e->input[i]);
        free_act(e, e->output[i]);
        free_act(e, e->grad_in[i]);
        free_act(e, e->grad_out[i]);
        e->input[i] = e->output[i] = e->grad_in[i] = e->grad_out[i] = NULL;
    }
}

void tr_pp_exec_free(tr_pp_exec *e) {
    if (!e->poisoned) {
        if (e->input) free_slots(e);
        for (int i = 0; i < e->n_pending; i++) give_back(e, &e->pending[i]);
        free(e->input);
        free(e->output);
        free(e->grad_in);
        free(e->grad_out);
        free(e->pending);
    }
    pool_free(e, &e->lpool);
    pool_free(e, &e->pool);
    free(e->parts);
    free(e->slot_mb);
    tr_loss_buffer_free(&e->losses);
    tr_pp_schedule_free(&e->sched);
    tr_pp_layout_free(&e->layout);
    memset(e, 0, sizeof *e);
}

/* p: what to do once the transfer is complete; its group and request are set here. */
static tr_status push_pending(tr_pp_exec *e, int group, tr_comm_request *req, tr_pp_pending p) {
    if (e->n_pending == e->cap_pending) {
        int cap = e->cap_pending ? 2 * e->cap_pending : 16;
        tr_pp_pending *q = realloc(e->pending, (size_t)cap * sizeof *q);
        if (!q) return TR_ERR_NOMEM;
        e->pending = q;
        e->cap_pending = cap;
    }
    p.group = group;
    p.req = req;
    e->pending[e->n_pending++] = p;
    return TR_OK;
}

/* The wire form of one message in x (count and dtype; buf is the caller's). */
static void wire_of(const tr_pp_exec *e, tr_comm_p2p *x) {
    x->count = (size_t)e->act_numel * (e->lowp ? sizeof(uint16_t) : 1);
    x->dtype = e->lowp ? TR_COMM_BYTES : TR_COMM_F32;
}

/* A half-precision message of the fp32 activation src, into a packed buffer from the pool. */
static tr_status pack(tr_pp_exec *e, const float *src, void **out) {
    *out = pool_take(e, &e->lpool);
    if (!*out) return TR_ERR_NOMEM;
    tr_status st = e->m->ops->cast_lowp((tr_lowp)e->lowp, *out, src, e->act_numel);
    if (st != TR_OK) {
        pool_give(e, &e->lpool, *out);
        *out = NULL;
    }
    return st;
}

/* The buffer of a transfer action: the send source (taken from its slot, given back after the
 * WAIT; with half-precision messages its packed copy, the fp32 source going back at once) or
 * the receive target (allocated into its slot; with half-precision messages a packed buffer
 * that the WAIT widens into the slot's). */
static tr_status transfer_buffer(tr_pp_exec *e, const tr_pp_action *a, tr_comm_p2p *x,
                                 tr_pp_pending *done) {
    size_t slot = (size_t)a->mb * (size_t)e->vpp + (size_t)a->chunk;
    float **from = NULL, **into = NULL;
    switch (a->op) {
    case TR_PP_SEND_ACT:
        from = &e->output[slot];
        break;
    case TR_PP_SEND_GRAD:
        from = &e->grad_out[slot];
        break;
    case TR_PP_RECV_ACT:
        into = &e->input[slot];
        break;
    case TR_PP_RECV_GRAD:
        into = &e->grad_in[slot];
        break;
    default:
        return TR_ERR_INVALID;
    }
    memset(done, 0, sizeof *done);
    x->peer = a->peer;
    wire_of(e, x);
    x->is_send = from != NULL;
    if (from) {
        if (!*from) return TR_ERR_INVALID; /* sent before computed: the check forbids it */
        if (e->lowp) {
            TR_TRY(pack(e, *from, &done->free_after));
            done->packed = true;
            free_act(e, *from); /* ops on the one stream: the cast reads it before any reuse */
        } else {
            done->free_after = *from;
        }
        x->buf = done->free_after;
        *from = NULL;
        return TR_OK;
    }
    if (*into) return TR_ERR_INVALID; /* received twice */
    *into = alloc_act(e);
    if (!*into) return TR_ERR_NOMEM;
    x->buf = *into;
    if (e->lowp) {
        if (!(x->buf = done->free_after = pool_take(e, &e->lpool))) return TR_ERR_NOMEM;
        done->packed = true;
        done->widen_into = *into;
    }
    return TR_OK;
}

static bool is_transfer(tr_pp_op op) {
    return op == TR_PP_SEND_ACT || op == TR_PP_RECV_ACT || op == TR_PP_SEND_GRAD ||
           op == TR_PP_RECV_GRAD;
}

/* Posts the run of transfers of one post group starting at actions[i]; returns its length. */
static tr_status post_group(tr_pp_exec *e, int i, int *n_out) {
    const tr_pp_action *acts = e->sched.actions;
    int group = acts[i].group, n = 0;
    while (i + n < e->sched.n && is_transfer(acts[i + n].op) && acts[i + n].group == group) n++;
    *n_out = n;
    tr_comm_p2p ops[64];
    tr_pp_pending done[64];
    if (n > 64) return TR_ERR_INVALID;
    for (int k = 0; k < n; k++) TR_TRY(transfer_buffer(e, &acts[i + k], &ops[k], &done[k]));
    if (e->sched.batched) {
        /* The batch's request first: wait_group completes it before the entries after it. */
        tr_comm_request *req = NULL;
        TR_TRY(tr_comm_ip2p_batch(e->comm, TR_GROUP_PP, ops, n, &req));
        TR_TRY(push_pending(e, group, req, (tr_pp_pending){0}));
        for (int k = 0; k < n; k++)
            if (done[k].free_after) TR_TRY(push_pending(e, group, NULL, done[k]));
        return TR_OK;
    }
    for (int k = 0; k < n; k++) {
        tr_comm_request *req = NULL;
        bool act = acts[i + k].op == TR_PP_SEND_ACT || acts[i + k].op == TR_PP_RECV_ACT;
        int tag = act ? TAG_ACT : TAG_GRAD;
        if (ops[k].is_send)
            TR_TRY(tr_comm_isend(e->comm, TR_GROUP_PP, ops[k].buf, ops[k].count, ops[k].dtype,
                                 ops[k].peer, tag, &req));
        else
            TR_TRY(tr_comm_irecv(e->comm, TR_GROUP_PP, ops[k].buf, ops[k].count, ops[k].dtype,
                                 ops[k].peer, tag, &req));
        TR_TRY(push_pending(e, group, req, done[k]));
    }
    return TR_OK;
}

/* Completes every transfer of `group`, widens the half-precision messages received, then frees
 * the sent outputs (Megatron's deallocate_output_tensor). */
static tr_status wait_group(tr_pp_exec *e, int group) {
    double t0 = now_s();
    int kept = 0;
    tr_status st = TR_OK;
    for (int i = 0; i < e->n_pending; i++) {
        tr_pp_pending *p = &e->pending[i];
        if (p->group != group) {
            e->pending[kept++] = *p;
            continue;
        }
        if (st == TR_OK && p->req) st = tr_comm_wait(e->comm, &p->req);
        if (st != TR_OK) {
            e->poisoned = true;
            e->pending[kept++] = *p;
            continue;
        }
        if (p->widen_into)
            st =
                e->m->ops->widen_lowp((tr_lowp)e->lowp, p->widen_into, p->free_after, e->act_numel);
        give_back(e, p);
    }
    e->n_pending = kept;
    e->wait_s += now_s() - t0;
    return st;
}

/* The activation set of (mb, chunk): microbatches of a chunk run their forwards and their
 * backwards in increasing order, so with at most `slots` in flight mb % slots is free at its
 * forward; checked, as a wrong count would silently overwrite a pending backward's inputs. */
static int *slot_of(tr_pp_exec *e, int mb, int chunk, int *slot) {
    *slot = mb % e->parts[chunk].slots;
    return &e->slot_mb[chunk * e->max_slots + *slot];
}

static tr_status run_forward(tr_pp_exec *e, const tr_pp_exec_hooks *h, const tr_pp_action *a) {
    size_t at = (size_t)a->mb * (size_t)e->vpp + (size_t)a->chunk;
    const tr_model_part *p = &e->parts[a->chunk];
    int slot, *holder = slot_of(e, a->mb, a->chunk, &slot);
    if (*holder >= 0) return TR_ERR_INVALID;
    const int32_t *ids, *tgt;
    TR_TRY(h->load(h->ctx, a->mb, &ids, &tgt));
    if (!p->has_embedding && !e->input[at]) return TR_ERR_INVALID;
    if (!p->has_loss) {
        if (e->output[at]) return TR_ERR_INVALID;
        e->output[at] = alloc_act(e);
        if (!e->output[at]) return TR_ERR_NOMEM;
    }
    float *loss = NULL;
    if (p->has_loss) TR_TRY(tr_loss_buffer_slot(&e->losses, &loss));
    TR_TRY(
        tr_model_forward_part(e->m, a->chunk, slot, ids, tgt, e->input[at], e->output[at], loss));
    *holder = a->mb;
    /* The layers keep their own copy of the input. */
    free_act(e, e->input[at]);
    e->input[at] = NULL;
    if (h->after_forward) h->after_forward(h->ctx, a->mb);
    if (p->has_loss) tr_loss_buffer_commit(&e->losses, e->m->n_valid);
    return TR_OK;
}

/* From the activations the forward stored in the microbatch's slot. */
static tr_status run_backward(tr_pp_exec *e, const tr_pp_exec_hooks *h, const tr_pp_action *a) {
    size_t at = (size_t)a->mb * (size_t)e->vpp + (size_t)a->chunk;
    const tr_model_part *p = &e->parts[a->chunk];
    int slot, *holder = slot_of(e, a->mb, a->chunk, &slot);
    if (*holder != a->mb || (!p->has_loss && !e->grad_in[at]) || e->grad_out[at])
        return TR_ERR_INVALID;
    if (!p->has_embedding && !(e->grad_out[at] = alloc_act(e))) return TR_ERR_NOMEM;
    TR_TRY(h->before_backward(h->ctx, a->mb == e->nmb - 1));
    /* Scaled like the single-rank run: 1/M of each microbatch mean, or the token sum (the
     * slot's count, restored by the model before it reads the scale's source). */
    const tr_slot_acts *sa = &e->m->slot_acts[e->m->slot_start[a->chunk] + slot];
    float scale = e->per_token_loss ? (float)sa->n_valid : 1.0f / (float)e->nmb;
    TR_TRY(tr_model_backward_part(e->m, a->chunk, slot, scale, e->grad_in[at], e->grad_out[at]));
    *holder = -1;
    free_act(e, e->grad_in[at]);
    e->grad_in[at] = NULL;
    return TR_OK;
}

/* Megatron's _allreduce_word_embedding_grads: the first stage's embedding and the last stage's
 * copy sum their (data-parallel reduced) gradients, so both step identically. */
static tr_status embed_grad_allreduce(tr_pp_exec *e) {
    const tr_param_info *p = tr_model_find_param(e->m, "embedding.word_embeddings.weight");
    if (!p) return TR_ERR_INVALID; /* the schedule puts the all-reduce only on stages holding it */
    return tr_comm_all_reduce_inplace(e->comm, TR_GROUP_EMBEDDING, e->m->grads + p->offset,
                                      (size_t)p->numel, TR_COMM_F32, TR_COMM_SUM);
}

tr_status tr_pp_exec_iteration(tr_pp_exec *e, const tr_pp_exec_hooks *h, double *loss_sum,
                               int64_t *tokens) {
    double t0 = now_s();
    *loss_sum = 0.0;
    *tokens = 0;
    e->wait_s = 0.0;
    tr_loss_buffer_begin(&e->losses, e->per_token_loss);
    for (int i = 0; i < e->sched.n;) {
        const tr_pp_action *a = &e->sched.actions[i];
        int step = 1;
        switch (a->op) {
        case TR_PP_FWD:
            TR_TRY(run_forward(e, h, a));
            break;
        case TR_PP_BWD:
            TR_TRY(run_backward(e, h, a));
            break;
        case TR_PP_SEND_ACT:
        case TR_PP_RECV_ACT:
        case TR_PP_SEND_GRAD:
        case TR_PP_RECV_GRAD:
            TR_TRY(post_group(e, i, &step));
            break;
        case TR_PP_WAIT:
            TR_TRY(wait_group(e, a->group));
            break;
        case TR_PP_DP_GRAD_REDUCE:
            /* The deferred output-layer weight gradients first (Megatron's
             * finish_embedding_wgrad_compute before finalize_model_grads): their parameter
             * joins the reduction, and the tied embedding's all-reduce, complete. */
            TR_TRY(tr_model_drain_wgrad(e->m));
            if (h->finish_grads) TR_TRY(h->finish_grads(h->ctx));
            break;
        case TR_PP_EMBED_GRAD_ALLREDUCE:
            TR_TRY(embed_grad_allreduce(e));
            break;
        default:
            return TR_ERR_INVALID;
        }
        i += step;
    }
    if (e->n_pending) return TR_ERR_INVALID; /* a transfer without its WAIT */
    /* The iteration's one read of the losses (microbatch order, as they were queued). */
    TR_TRY(tr_loss_buffer_flush(&e->losses));
    *loss_sum = e->losses.sum;
    *tokens = e->losses.n_tokens;
    e->iter_s = now_s() - t0;
    return TR_OK;
}

tr_status tr_pp_exec_forward_only(tr_pp_exec *e, const tr_pp_exec_hooks *h, int nmb,
                                  double *loss_sum) {
    *loss_sum = 0.0;
    tr_loss_buffer_begin(&e->losses, false);
    int stages = e->pp * e->vpp;
    float *in = alloc_act(e), *out = alloc_act(e);
    /* With half-precision messages both directions go through one packed buffer: the blocking
     * receive and send never overlap. */
    void *packed = e->lowp ? pool_take(e, &e->lpool) : NULL;
    tr_status st = in && out && (packed || !e->lowp) ? TR_OK : TR_ERR_NOMEM;
    if (st != TR_OK) {
        pool_give(e, &e->lpool, packed);
        free_act(e, out);
        free_act(e, in);
        return st;
    }
    tr_comm_p2p w;
    wire_of(e, &w);
    for (int mb = 0; mb < nmb && st == TR_OK; mb++)
        for (int s = e->pp_rank; s < stages && st == TR_OK; s += e->pp) {
            int chunk = s / e->pp, prev = (s - 1) % e->pp, next = (s + 1) % e->pp;
            const tr_model_part *p = &e->parts[chunk];
            const int32_t *ids = NULL, *tgt = NULL;
            float *loss = NULL;
            if (s > 0)
                st = tr_comm_recv(e->comm, TR_GROUP_PP, packed ? packed : (void *)in, w.count,
                                  w.dtype, prev, TAG_EVAL);
            if (st == TR_OK && s > 0 && packed)
                st = e->m->ops->widen_lowp((tr_lowp)e->lowp, in, packed, e->act_numel);
            if (st == TR_OK) st = h->load(h->ctx, mb, &ids, &tgt);
            /* Slot 0: no training microbatch is in flight between iterations. */
            if (st == TR_OK && p->has_loss) st = tr_loss_buffer_slot(&e->losses, &loss);
            if (st == TR_OK)
                st = tr_model_forward_part(e->m, chunk, 0, ids, tgt, s > 0 ? in : NULL,
                                           p->has_loss ? NULL : out, loss);
            if (st == TR_OK && p->has_loss && h->eval_loss) st = h->eval_loss(h->ctx, loss);
            if (st == TR_OK && p->has_loss) tr_loss_buffer_commit(&e->losses, 0);
            if (st == TR_OK && s + 1 < stages && packed)
                st = e->m->ops->cast_lowp((tr_lowp)e->lowp, packed, out, e->act_numel);
            if (st == TR_OK && s + 1 < stages)
                st = tr_comm_send(e->comm, TR_GROUP_PP, packed ? packed : (void *)out, w.count,
                                  w.dtype, next, TAG_EVAL);
        }
    /* A timed-out transfer may still own a buffer. */
    if (st == TR_OK) {
        pool_give(e, &e->lpool, packed);
        free_act(e, out);
        free_act(e, in);
        st = tr_loss_buffer_flush(&e->losses);
        *loss_sum = e->losses.sum;
    }
    return st;
}

double tr_pp_exec_bubble(const tr_pp_exec *e) {
    return e->iter_s > 0.0 ? e->wait_s / e->iter_s : 0.0;
}
