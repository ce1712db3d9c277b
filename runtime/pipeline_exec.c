/* See runtime/pipeline_exec.h. */
#include "runtime/pipeline_exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device.h"

/* One tag per direction is enough: the static check proved the per-channel order (a batch uses
 * the comm layer's own tag, the same on both sides). */
enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_EVAL = 3 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The most microbatches of each chunk forwarded but not yet backwarded at any point of the
 * list: the activation sets the chunk needs. */
static void count_in_flight(tr_pp_exec *e) {
    int live[64] = {0};
    for (int i = 0; i < e->sched.n; i++) {
        const tr_pp_action *a = &e->sched.actions[i];
        if (a->chunk < 0 || a->chunk >= e->vpp || a->chunk >= 64) continue;
        if (a->op == TR_PP_FWD && ++live[a->chunk] > e->parts[a->chunk].slots)
            e->parts[a->chunk].slots = live[a->chunk];
        if (a->op == TR_PP_BWD) live[a->chunk]--;
    }
    for (int ch = 0; ch < e->vpp; ch++) {
        if (e->parts[ch].slots < 1) e->parts[ch].slots = 1;
        if (e->parts[ch].slots > e->max_slots) e->max_slots = e->parts[ch].slots;
    }
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
        if (st->num_mtp_layers > 0)
            return tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL, "model.mtp_num_layers",
                               "set model.mtp_num_layers=0",
                               "the CPU runtime does not run multi-token prediction layers");
        e->parts[ch] =
            (tr_model_part){st->first_layer, st->num_layers, st->has_embedding, st->has_loss, 0};
    }
    count_in_flight(e);
    e->slot_mb = malloc((size_t)e->vpp * (size_t)e->max_slots * sizeof *e->slot_mb);
    if (!e->slot_mb) return TR_ERR_NOMEM;
    for (int i = 0; i < e->vpp * e->max_slots; i++) e->slot_mb[i] = -1;
    return TR_OK;
}

tr_status tr_pp_exec_attach(tr_pp_exec *e, tr_model *m, tr_diags *d) {
    e->m = m;
    e->act_numel = (int64_t)m->batch * m->spec.seq * m->spec.hidden;
    if (m->spec.sequence_parallel) e->act_numel /= m->tp.size;
    bool same_parts = m->n_parts == e->vpp;
    for (int ch = 0; same_parts && ch < e->vpp; ch++)
        same_parts = memcmp(&m->parts[ch], &e->parts[ch], sizeof e->parts[ch]) == 0;
    if (e->layout.pp != e->pp || !same_parts ||
        e->sched.message_bytes != e->act_numel * (int64_t)sizeof(float))
        return tr_diag_add(d, TR_SEV_ERROR, "runtime.pp_mismatch", NULL,
                           "model.pipeline_model_parallel_size",
                           "report this: the schedule and the runtime disagree",
                           "the pipeline schedule (PP %d, %lld-byte messages) does not match "
                           "the runtime (PP %d, %lld-byte activations, %s stages)",
                           e->layout.pp, (long long)e->sched.message_bytes, e->pp,
                           (long long)(e->act_numel * (int64_t)sizeof(float)),
                           same_parts ? "the same" : "different");
    return tr_loss_buffer_create(&e->losses, m->dev, e->nmb > 0 ? e->nmb : 1);
}

/* Transfer buffers live where the model's activations do; a given-back buffer goes to the
 * pool (or, when the pool cannot grow, back to the device). */
static void free_act(tr_pp_exec *e, float *p) {
    if (!p) return;
    if (e->n_pool == e->cap_pool) {
        int cap = e->cap_pool ? 2 * e->cap_pool : 8;
        float **q = realloc(e->pool, (size_t)cap * sizeof *q);
        if (!q) {
            tr_device_free(e->m ? e->m->dev : tr_device_host(), TR_MEM_ACTIVATIONS, p);
            return;
        }
        e->pool = q;
        e->cap_pool = cap;
    }
    e->pool[e->n_pool++] = p;
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
        for (int i = 0; i < e->n_pending; i++) free_act(e, e->pending[i].free_after);
        free(e->input);
        free(e->output);
        free(e->grad_in);
        free(e->grad_out);
        free(e->pending);
    }
    for (int i = e->n_pool - 1; i >= 0; i--)
        tr_device_free(e->m ? e->m->dev : tr_device_host(), TR_MEM_ACTIVATIONS, e->pool[i]);
    free(e->pool);
    free(e->parts);
    free(e->slot_mb);
    tr_loss_buffer_free(&e->losses);
    tr_pp_schedule_free(&e->sched);
    tr_pp_layout_free(&e->layout);
    memset(e, 0, sizeof *e);
}

static tr_status push_pending(tr_pp_exec *e, int group, tr_comm_request *req, float *free_after) {
    if (e->n_pending == e->cap_pending) {
        int cap = e->cap_pending ? 2 * e->cap_pending : 16;
        tr_pp_pending *p = realloc(e->pending, (size_t)cap * sizeof *p);
        if (!p) return TR_ERR_NOMEM;
        e->pending = p;
        e->cap_pending = cap;
    }
    e->pending[e->n_pending++] = (tr_pp_pending){group, req, free_after};
    return TR_OK;
}

static float *alloc_act(tr_pp_exec *e) {
    if (e->n_pool > 0) return e->pool[--e->n_pool];
    void *p = NULL;
    tr_device_alloc(e->m->dev, TR_MEM_ACTIVATIONS, (size_t)e->act_numel * sizeof(float), &p);
    return p;
}

/* The buffer of a transfer action: the send source (taken from its slot, freed after the WAIT)
 * or the receive target (allocated into its slot). */
static tr_status transfer_buffer(tr_pp_exec *e, const tr_pp_action *a, tr_comm_p2p *x,
                                 float **free_after) {
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
    *free_after = NULL;
    x->peer = a->peer;
    x->count = (size_t)e->act_numel;
    x->dtype = TR_COMM_F32;
    x->is_send = from != NULL;
    if (from) {
        if (!*from) return TR_ERR_INVALID; /* sent before computed: the check forbids it */
        x->buf = *from;
        *free_after = *from;
        *from = NULL;
        return TR_OK;
    }
    if (*into) return TR_ERR_INVALID; /* received twice */
    *into = alloc_act(e);
    if (!*into) return TR_ERR_NOMEM;
    x->buf = *into;
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
    float *frees[64];
    if (n > 64) return TR_ERR_INVALID;
    for (int k = 0; k < n; k++) TR_TRY(transfer_buffer(e, &acts[i + k], &ops[k], &frees[k]));
    if (e->sched.batched) {
        tr_comm_request *req = NULL;
        TR_TRY(tr_comm_ip2p_batch(e->comm, TR_GROUP_PP, ops, n, &req));
        TR_TRY(push_pending(e, group, req, NULL));
        for (int k = 0; k < n; k++)
            if (frees[k]) TR_TRY(push_pending(e, group, NULL, frees[k]));
        return TR_OK;
    }
    for (int k = 0; k < n; k++) {
        tr_comm_request *req = NULL;
        bool act = acts[i + k].op == TR_PP_SEND_ACT || acts[i + k].op == TR_PP_RECV_ACT;
        int tag = act ? TAG_ACT : TAG_GRAD;
        if (ops[k].is_send)
            TR_TRY(tr_comm_isend(e->comm, TR_GROUP_PP, ops[k].buf, ops[k].count, TR_COMM_F32,
                                 ops[k].peer, tag, &req));
        else
            TR_TRY(tr_comm_irecv(e->comm, TR_GROUP_PP, ops[k].buf, ops[k].count, TR_COMM_F32,
                                 ops[k].peer, tag, &req));
        TR_TRY(push_pending(e, group, req, frees[k]));
    }
    return TR_OK;
}

/* Completes every transfer of `group`, then frees the sent outputs (Megatron's
 * deallocate_output_tensor). */
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
        free_act(e, p->free_after);
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
    tr_status st = in && out ? TR_OK : TR_ERR_NOMEM;
    if (st != TR_OK) {
        free_act(e, out);
        free_act(e, in);
        return st;
    }
    for (int mb = 0; mb < nmb && st == TR_OK; mb++)
        for (int s = e->pp_rank; s < stages && st == TR_OK; s += e->pp) {
            int chunk = s / e->pp, prev = (s - 1) % e->pp, next = (s + 1) % e->pp;
            const tr_model_part *p = &e->parts[chunk];
            const int32_t *ids = NULL, *tgt = NULL;
            float *loss = NULL;
            if (s > 0)
                st = tr_comm_recv(e->comm, TR_GROUP_PP, in, (size_t)e->act_numel, TR_COMM_F32, prev,
                                  TAG_EVAL);
            if (st == TR_OK) st = h->load(h->ctx, mb, &ids, &tgt);
            /* Slot 0: no training microbatch is in flight between iterations. */
            if (st == TR_OK && p->has_loss) st = tr_loss_buffer_slot(&e->losses, &loss);
            if (st == TR_OK)
                st = tr_model_forward_part(e->m, chunk, 0, ids, tgt, s > 0 ? in : NULL,
                                           p->has_loss ? NULL : out, loss);
            if (st == TR_OK && p->has_loss) tr_loss_buffer_commit(&e->losses, 0);
            if (st == TR_OK && s + 1 < stages)
                st = tr_comm_send(e->comm, TR_GROUP_PP, out, (size_t)e->act_numel, TR_COMM_F32,
                                  next, TAG_EVAL);
        }
    /* A timed-out transfer may still own a buffer. */
    if (st == TR_OK) {
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
