/* Per-rank memory of a plan (runtime/plan/plan.h): each allocation the runtime makes, sized by
 * the functions the runtime sizes it with, in the order the runtime makes it, rounded as its
 * device rounds it. The order matters where buffers are replaced: the data-parallel path lays
 * the parameters out again (tr_model_relayout), through host memory, so the device holds the
 * larger of the two layouts, never both. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context_parallel/cp.h"
#include "runtime/device/device.h"
#include "runtime/distributed/ddp.h"
#include "runtime/distributed/grad_buffer.h"
#include "runtime/model/model.h"
#include "runtime/moe/moe.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/peft/lora.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/plan/plan_internal.h"

/* The alignment of the half-precision weight copy (runtime/model/wcopy.c), in elements. */
enum { WCOPY_ALIGN = 128 };

int64_t tr_plan_round(const tr_plan_gpu *g, int64_t bytes) {
    int64_t a = g->alloc_align > 0 ? g->alloc_align : 1;
    int64_t r = (bytes + a - 1) / a * a;
    /* a zero-byte request still takes a page on cpu-strict (it maps one) */
    return r > 0 ? r : a;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* The tensors the forward's GEMMs read as weights (runtime/model/wcopy.c marks them through the
 * views: the four linear layers of every decoder layer and the output weight, which is the word
 * embedding on any stage holding it when tied). */
static int64_t weight_copy_elems(const tr_model_spec *s, const tr_param_info *info, int n) {
    if (!s->lowp || s->no_weight_copy) return 0;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = info[i].name;
        bool used = ends_with(nm, "linear_qkv.weight") || ends_with(nm, "linear_proj.weight") ||
                    ends_with(nm, "linear_fc1.weight") || ends_with(nm, "linear_fc2.weight") ||
                    (!s->tied && strcmp(nm, "output_layer.weight") == 0) ||
                    (s->tied && strcmp(nm, "embedding.word_embeddings.weight") == 0);
        /* the views wcopy.c marks are the decoder's dense layers': an MoE layer's experts and
         * the MTP depths' layers run their GEMMs on the fp32 weights */
        if (used && !strstr(nm, ".adapter.") && !strstr(nm, ".mlp.experts.") &&
            !strstr(nm, ".mlp.shared_experts.") && strncmp(nm, "mtp.", 4) != 0)
            total += (info[i].numel + WCOPY_ALIGN - 1) / WCOPY_ALIGN * WCOPY_ALIGN;
    }
    return total ? total : 1;
}

/* The data-parallel layout's view of the parameters (runtime/train/dp.c). */
static tr_grad_param *grad_params(const tr_config *c, const tr_model_spec *s, tr_tp_shard tp,
                                  const tr_param_info *info, int n) {
    bool pipelined = c->model.pipeline_model_parallel_size > 1;
    tr_grad_param *gp = calloc((size_t)(n ? n : 1), sizeof *gp);
    if (!gp) return NULL;
    for (int i = 0; i < n; i++) {
        memcpy(gp[i].name, info[i].name, sizeof info[i].name);
        gp[i].numel = info[i].numel;
        gp[i].no_weight_decay = info[i].no_decay;
        gp[i].frozen = info[i].frozen;
        gp[i].tp_replicated = tp.size > 1 && info[i].split_dim < 0 && !info[i].expert;
        gp[i].own_bucket = pipelined && tr_model_spec_shares_embedding(s) &&
                           strcmp(info[i].name, "embedding.word_embeddings.weight") == 0;
    }
    return gp;
}

/* The data-parallel layout of runtime/train/dp.c for these parameters (total: their numel):
 * its elements, buckets and rank 0's optimizer-state share. Memoized by what the layout reads,
 * its options and each parameter's size and own-bucket flag (their names only name an error),
 * so lists that differ elsewhere (a CP rank's spec) share it. */
typedef struct grad_val {
    int64_t numel, n_buckets, state;
} grad_val;

static tr_status grad_layout(const tr_config *c, const tr_grad_param *gp, int n, int64_t total,
                             int dp, tr_plan_cache *cache, grad_val *v, tr_diags *d) {
    tr_grad_layout_options lo;
    tr_ddp_options ddp;
    TR_TRY(tr_ddp_options_from_config(c, dp, total, &lo, &ddp, d));
    size_t head = 5 * sizeof(int64_t), klen = head + (size_t)n * sizeof(int64_t);
    int64_t *key = cache ? malloc(klen) : NULL;
    if (key) {
        key[0] = lo.dp_size, key[1] = lo.bucket_size, key[2] = lo.sharded;
        key[3] = lo.param_align, key[4] = lo.bucket_align;
        for (int i = 0; i < n; i++)
            key[5 + i] = (int64_t)((uint64_t)gp[i].numel | (uint64_t)gp[i].own_bucket << 63);
        if (tr_plan_cache_get(cache, TR_PLAN_MEMO_GRADS, key, klen, v, sizeof *v)) {
            free(key);
            return TR_OK;
        }
    }
    tr_grad_layout L = {0};
    tr_grad_owned own = {0};
    tr_status st = tr_grad_layout_build(&L, gp, n, &lo, d);
    if (st == TR_OK) st = tr_grad_owned_build(&own, &L, 0);
    if (st == TR_OK) {
        *v = (grad_val){L.numel, L.n_buckets, own.state_numel};
        if (key) tr_plan_cache_put(cache, TR_PLAN_MEMO_GRADS, key, klen, v, sizeof *v);
    }
    free(key);
    tr_grad_owned_free(&own);
    tr_grad_layout_free(&L);
    return st;
}

/* What the schedule of pp_rank gives: its chunks' microbatches in flight and its transfer
 * buffers. Keyed by what tr_pp_schedule_build reads (the schedule parameters but the message
 * size, the message dtype, the rank) and which chunks hold the embedding and the loss. */
typedef struct sched_key {
    tr_pp_plan plan;
    int32_t dtype;
    int pp_rank, vpp;
    unsigned char flags[64]; /* per chunk: 1 the embedding, 2 the loss (the first vpp count) */
} sched_key;

typedef struct sched_val {
    int slots[64];
    int fp32, half;
} sched_val;

static tr_status rank_parts(const tr_config *c, const tr_pp_layout *lay, int pp_rank,
                            tr_plan_cache *cache, tr_model_part *parts, tr_plan_rank *r,
                            tr_diags *d) {
    sched_key k;
    memset(&k, 0, sizeof k);
    TR_TRY(tr_pp_plan_from_config(c, &k.plan, d));
    /* the counts below read the list's shape, never an action's bytes: layouts that differ
     * only in the message size (TP with SP, CP, micro batch) share one entry */
    k.plan.message_bytes = 0;
    k.dtype = tr_pp_message_dtype(c);
    k.pp_rank = pp_rank;
    k.vpp = lay->vpp;
    bool emb[64], loss[64];
    for (int ch = 0; ch < lay->vpp; ch++) {
        const tr_pp_stage *sg = tr_pp_layout_stage(lay, pp_rank, ch);
        emb[ch] = sg->has_embedding;
        loss[ch] = sg->has_loss;
        k.flags[ch] = (unsigned char)(emb[ch] | loss[ch] << 1);
    }
    sched_val v;
    size_t klen = offsetof(sched_key, flags) + (size_t)lay->vpp;
    if (!tr_plan_cache_get(cache, TR_PLAN_MEMO_SCHEDULE, &k, klen, &v, sizeof v)) {
        memset(&v, 0, sizeof v);
        /* the slots and the transfer buffers counted as the list is made (the list itself,
         * thousands of actions, is never stored) */
        tr_pp_counts cnt;
        tr_pp_counts_init(&cnt, emb, loss, lay->vpp, k.dtype != TR_DTYPE_FP32);
        TR_TRY(tr_pp_schedule_count_plan(&k.plan, pp_rank, &cnt));
        int max = 0;
        TR_TRY(tr_pp_counts_finish(&cnt, v.slots, &max, &v.fp32, &v.half));
        tr_plan_cache_put(cache, TR_PLAN_MEMO_SCHEDULE, &k, klen, &v, sizeof v);
    }
    for (int ch = 0; ch < lay->vpp; ch++) {
        const tr_pp_stage *sg = tr_pp_layout_stage(lay, pp_rank, ch);
        r->slots[ch] = v.slots[ch];
        parts[ch] = (tr_model_part){sg->first_layer, sg->num_layers, sg->has_embedding,
                                    sg->has_loss, v.slots[ch]};
    }
    r->p2p_fp32 = v.fp32;
    r->p2p_half = v.half;
    return TR_OK;
}

/* The parameter list and the data-parallel layout of a rank's parts: keyed by the spec (less its
 * recomputation choice, which only the activations read: tr_model_param_list lays out the same
 * tensors whatever it is, so a search's three choices share one entry), the TP size, the parts
 * (slots aside) and what tr_ddp_options_from_config reads. */
typedef struct param_key {
    tr_model_spec ms;
    int tp, dp, edp, n_parts;
    bool distributed, pipelined, sharded, overlap, pad;
    int64_t num_buckets, bucket_size;
    struct {
        int first, num;
        bool emb, loss;
    } parts[64];
} param_key;

typedef struct param_val {
    int64_t real, numel, wc, L, state, n_buckets;
} param_val;

/* The parameter list itself reads the spec, the TP size and the parts alone: the last ones
 * made (one per rank role of a plan) are kept (the memo's aux) for the layouts that differ
 * only in what the data-parallel layout reads (the search tries each with and without the
 * distributed optimizer in turn), with what is summed from them. */
typedef struct param_list {
    param_key key; /* the data-parallel fields zeroed */
    size_t klen;
    tr_param_info *info;
    int n_info;
    int64_t numel, real, wc;
    tr_grad_param *gp; /* made when a layout first needs it (grad_params) */
} param_list;

static void free_list(void *p) {
    param_list *pl = p;
    if (pl) free(pl->info), free(pl->gp);
    free(pl);
}

enum { KEPT_LISTS = 4 };
typedef struct kept_lists {
    param_list *l[KEPT_LISTS];
    int next; /* the one replaced next */
} kept_lists;

static void free_kept(void *p) {
    kept_lists *k = p;
    if (k)
        for (int i = 0; i < KEPT_LISTS; i++) free_list(k->l[i]);
    free(k);
}

static tr_status the_list(const param_key *k, size_t klen, const tr_model_spec *ms,
                          tr_tp_shard shard, const tr_model_part *parts, int n_parts,
                          tr_plan_cache *cache, param_list **out) {
    param_key ka;
    memcpy(&ka, k, sizeof ka); /* the padding too: the key is compared as bytes */
    ka.dp = ka.edp = 0;
    ka.distributed = ka.sharded = ka.overlap = ka.pad = false;
    ka.num_buckets = ka.bucket_size = 0;
    kept_lists *kept = tr_plan_cache_aux(cache);
    if (cache && !kept) {
        kept = calloc(1, sizeof *kept);
        if (kept) tr_plan_cache_set_aux(cache, kept, free_kept);
    }
    for (int i = 0; kept && i < KEPT_LISTS; i++) {
        param_list *l = kept->l[i];
        if (l && l->klen == klen && !memcmp(&l->key, &ka, klen)) {
            *out = l;
            return TR_OK;
        }
    }
    param_list *pl = calloc(1, sizeof *pl);
    if (!pl) return TR_ERR_NOMEM;
    tr_status st =
        tr_model_param_list(ms, shard, parts, n_parts, &pl->info, &pl->n_info, &pl->numel);
    if (st != TR_OK) {
        free_list(pl);
        return st;
    }
    memcpy(&pl->key, &ka, klen);
    pl->klen = klen;
    for (int i = 0; i < pl->n_info; i++) pl->real += pl->info[i].numel;
    pl->wc = weight_copy_elems(ms, pl->info, pl->n_info);
    if (kept) {
        free_list(kept->l[kept->next]);
        kept->l[kept->next] = pl;
        kept->next = (kept->next + 1) % KEPT_LISTS;
    }
    *out = pl;
    return TR_OK;
}

static tr_status param_sizes(const tr_config *c, const tr_model_spec *ms, tr_tp_shard shard,
                             const tr_model_part *parts, int n_parts, bool distributed, int dp,
                             int edp, tr_plan_cache *cache, param_val *v, tr_diags *d) {
    param_key k;
    memset(&k, 0, sizeof k);
    memcpy(&k.ms, ms, sizeof *ms);
    k.ms.recompute = 0;
    k.ms.recompute_block = 0;
    k.ms.recompute_layers = 0;
    k.ms.recompute_modules = 0;
    k.tp = shard.size;
    k.dp = dp;
    k.edp = edp;
    k.n_parts = n_parts;
    k.distributed = distributed;
    k.pipelined = c->model.pipeline_model_parallel_size > 1;
    k.sharded = c->ddp.use_distributed_optimizer || c->optimizer.use_distributed_optimizer;
    k.overlap = c->ddp.overlap_grad_reduce;
    k.pad = c->ddp.pad_buckets_for_high_nccl_busbw;
    k.num_buckets = c->ddp.num_buckets;
    k.bucket_size = c->ddp.bucket_size;
    for (int i = 0; i < n_parts; i++) {
        k.parts[i].first = parts[i].first_layer;
        k.parts[i].num = parts[i].num_layers;
        k.parts[i].emb = parts[i].has_embedding;
        k.parts[i].loss = parts[i].has_loss;
    }
    size_t klen = offsetof(param_key, parts) + (size_t)n_parts * sizeof k.parts[0];
    if (tr_plan_cache_get(cache, TR_PLAN_MEMO_PARAMS, &k, klen, v, sizeof *v)) return TR_OK;
    param_list *pl = NULL;
    TR_TRY(the_list(&k, klen, ms, shard, parts, n_parts, cache, &pl));
    const tr_param_info *info = pl->info;
    int n_info = pl->n_info;
    int64_t numel = pl->numel;
    memset(v, 0, sizeof *v);
    v->real = pl->real;
    v->numel = numel;
    v->wc = pl->wc;
    v->L = numel;
    v->state = numel;
    tr_status st = TR_OK;
    if (distributed) {
        grad_val gv;
        if (!pl->gp) pl->gp = grad_params(c, ms, shard, info, n_info);
        st = pl->gp ? grad_layout(c, pl->gp, n_info, pl->real, dp, cache, &gv, d) : TR_ERR_NOMEM;
        if (st == TR_OK) {
            v->L = gv.numel;
            v->state = gv.state > 0 ? gv.state : 1;
            v->n_buckets = gv.n_buckets;
            /* EP or expert TP > 1: the experts' optimizer state is sharded over the expert
             * data-parallel group (world / (PP x EP x ETP)), not DP x CP */
            if (k.sharded && edp != dp && edp > 0) {
                int64_t experts = 0;
                for (int i = 0; i < n_info; i++)
                    if (strstr(info[i].name, ".mlp.experts.")) experts += info[i].numel;
                v->state += (experts + edp - 1) / edp - (experts + dp - 1) / dp;
            }
        }
    }
    if (!tr_plan_cache_aux(cache)) free_list(pl); /* kept by none */
    TR_TRY(st);
    tr_plan_cache_put(cache, TR_PLAN_MEMO_PARAMS, &k, klen, v, sizeof *v);
    return TR_OK;
}

/* The activation arena of the parts (slots included) and of one slot per chunk. The latter is
 * keyed without the slots (a kind of its own): it is the same for every schedule, and it is
 * the floor tr_plan_rank_floor bounds a role's activations with. */
typedef struct act_key {
    tr_model_spec ms;
    int tp, mbs, n_parts;
    tr_model_part parts[64];
} act_key;

typedef struct act_val {
    tr_model_act_size all, one;
} act_val;

static tr_status act_size(const tr_model_spec *ms, tr_tp_shard shard, int mbs,
                          const tr_model_part *parts, int n_parts, bool one, tr_plan_cache *cache,
                          tr_model_act_size *v) {
    act_key k;
    memset(&k, 0, sizeof k);
    memcpy(&k.ms, ms, sizeof *ms);
    k.tp = shard.size;
    k.mbs = mbs;
    k.n_parts = n_parts;
    for (int i = 0; i < n_parts; i++) {
        k.parts[i].first_layer = parts[i].first_layer;
        k.parts[i].num_layers = parts[i].num_layers;
        k.parts[i].has_embedding = parts[i].has_embedding;
        k.parts[i].has_loss = parts[i].has_loss;
        k.parts[i].slots = one ? 1 : parts[i].slots;
    }
    int kind = one ? TR_PLAN_MEMO_ACTS_ONE : TR_PLAN_MEMO_ACTS;
    size_t klen = offsetof(act_key, parts) + (size_t)n_parts * sizeof k.parts[0];
    if (tr_plan_cache_get(cache, kind, &k, klen, v, sizeof *v)) return TR_OK;
    tr_model shape;
    TR_TRY(tr_model_shape(&shape, ms, shard, mbs, k.parts, n_parts));
    TR_TRY(tr_model_act_sizes(&shape, v));
    tr_plan_cache_put(cache, kind, &k, klen, v, sizeof *v);
    return TR_OK;
}

static tr_status act_sizes(const tr_model_spec *ms, tr_tp_shard shard, int mbs,
                           const tr_model_part *parts, int n_parts, tr_plan_cache *cache,
                           act_val *v) {
    TR_TRY(act_size(ms, shard, mbs, parts, n_parts, false, cache, &v->all));
    return act_size(ms, shard, mbs, parts, n_parts, true, cache, &v->one);
}

/* The exchange's buffers as runtime/train/setup.c makes them: the ring's always, the
 * all-gather's or the all-to-all's on top for those cp_comm_types (bytes and rounded bytes). */
static tr_status cp_buffers(const tr_config *c, const tr_model_spec *ms, const tr_model *shape,
                            int mbs, const tr_plan_gpu *g, int64_t *bytes, int64_t *rounded) {
    const tr_str_list *ct = &c->model.cp_comm_type;
    int types[2] = {TR_CP_P2P, -1};
    if (!ct->null && ct->n > 0 && strcmp(ct->v[0], "allgather") == 0) types[1] = TR_CP_ALL_GATHER;
    if (!ct->null && ct->n > 0 && strcmp(ct->v[0], "a2a") == 0) types[1] = TR_CP_A2A;
    for (int t = 0; t < 2 && types[t] >= 0; t++) {
        int64_t b[TR_CP_MAX_BUFFERS];
        int n = tr_cp_buffer_bytes(types[t], ms->cp, mbs, ms->seq, shape->spec.heads,
                                   shape->spec.groups, ms->head_dim, b);
        if (n == 0) return TR_ERR_INVALID;
        for (int i = 0; i < n; i++) *bytes += b[i], *rounded += tr_plan_round(g, b[i]);
    }
    return TR_OK;
}

/* The MoE layers' states and scratch (runtime/moe/layer.c allocates them as activations, one
 * set per layer this rank holds, with its part's slots, less what recomputation shares in one
 * recompute state; an MTP depth's layer on the loss stage):
 * tr_moe_buffer_bytes, the sizing tr_moe_create allocates with (dropless: the worst case). */
static tr_status moe_buffers(const tr_model_spec *ms, int tp, int mbs, const tr_model_part *parts,
                             int n_parts, const tr_plan_gpu *g, int64_t *bytes, int64_t *rounded) {
    if (ms->moe.experts <= 0) return TR_OK;
    /* a sequence-parallel rank routes its own rows */
    int seq = ms->sequence_parallel && tp > 1 ? ms->seq / tp : ms->seq;
    /* the recompute states: one per set, the largest of its layers' (runtime/model/layout.c) */
    int64_t rc[TR_MOE_MAX_LAYERS][2] = {{0}};
    for (int k = 0; k < n_parts; k++) {
        const tr_model_part *p = &parts[k];
        int n = p->num_layers + (p->has_loss ? ms->mtp_layers : 0);
        for (int i = 0; i < n; i++) {
            int layer = i < p->num_layers ? p->first_layer + i : ms->num_layers + i - p->num_layers;
            if (!tr_model_is_moe_layer(ms, layer)) continue;
            int set;
            tr_moe_dims dm = {.hidden = ms->hidden,
                              .batch = mbs,
                              .seq = seq,
                              .slots = p->slots,
                              .layer = layer,
                              .swiglu = ms->swiglu,
                              .gelu_tanh = ms->gelu_tanh,
                              .lowp = ms->lowp,
                              .rc = tr_model_moe_rc(ms, p, layer, &set)};
            int64_t b[TR_MOE_MAX_BUFFERS], ints, floats = tr_moe_rc_bytes(&ms->moe, &dm, &ints);
            if (set < 0 || set >= TR_MOE_MAX_LAYERS) return TR_ERR_INVALID;
            rc[set][0] = floats > rc[set][0] ? floats : rc[set][0];
            rc[set][1] = ints > rc[set][1] ? ints : rc[set][1];
            int nb = tr_moe_buffer_bytes(&ms->moe, &dm, b);
            if (nb == 0) return TR_ERR_INVALID;
            for (int j = 0; j < nb; j++) *bytes += b[j], *rounded += tr_plan_round(g, b[j]);
        }
    }
    for (int r = 0; r < TR_MOE_MAX_LAYERS; r++)
        for (int j = 0; j < 2 && rc[r][0]; j++)
            *bytes += rc[r][j], *rounded += tr_plan_round(g, rc[r][j]);
    return TR_OK;
}

/* Phase one of a rank role: its parts (without their slots, which only the activations read),
 * its parameters, gradients and optimizer state and their peaks. */
tr_status tr_plan_rank_state(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                             const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                             tr_plan_rank *r, tr_diags *d) {
    int tp = (int)c->model.tensor_model_parallel_size, dp = (int)c->derived.data_parallel_size;
    int pp = (int)c->model.pipeline_model_parallel_size, cp = ms->cp > 1 ? ms->cp : 1;
    bool distributed = dp > 1 || tp > 1 || pp > 1 || cp > 1;
    tr_tp_shard shard = {0, tp};
    tr_model_part parts[64];
    memset(r, 0, sizeof *r);
    r->pp_rank = pp_rank;
    r->vpp = 1;
    if (pp > 1) {
        r->vpp = lay->vpp;
        if (r->vpp < 1 || r->vpp > 64) return TR_ERR_INVALID;
        for (int ch = 0; ch < lay->vpp; ch++) {
            const tr_pp_stage *sg = tr_pp_layout_stage(lay, pp_rank, ch);
            parts[ch] = (tr_model_part){sg->first_layer, sg->num_layers, sg->has_embedding,
                                        sg->has_loss, 0};
        }
    } else {
        parts[0] = (tr_model_part){0, ms->num_layers, true, true, 1};
    }
    for (int k = 0; k < r->vpp; k++) {
        r->first |= parts[k].has_embedding;
        r->last |= parts[k].has_loss;
        r->layers += parts[k].num_layers;
    }

    param_val pv;
    /* the gradients reduce over data and context parallel ranks together (TR_GROUP_DP_CP) */
    int edp = (int)c->derived.expert_data_parallel_size;
    if (ms->moe.experts <= 0 || (ms->moe.ep_size <= 1 && c->model.expert_tensor_parallel_size <= 1))
        edp = dp * cp; /* the runtime's layout: every gradient over DP x CP */
    TR_TRY(param_sizes(c, ms, shard, parts, r->vpp, distributed, dp * cp, edp, cache, &pv, d));
    r->n_params = pv.real;
    r->n_buckets = pv.n_buckets;
    int64_t A = pv.numel * 4, W = pv.wc * 2, L = pv.L * 4, state = pv.state;
    r->params = A;
    r->param_copy = W;
    r->grads = L;
    r->ddp_padding = L - pv.real * 4;
    tr_optimizer_spec os;
    TR_TRY(tr_optimizer_spec_from_config(c, &os, d));
    int states = distributed || !os.sgd ? 2 : 1;
    r->optimizer = states * state * 4;
    /* peaks per kind in allocation order, rounded */
    int64_t rA = tr_plan_round(g, A), rW = W ? tr_plan_round(g, W) : 0, rL = tr_plan_round(g, L);
    /* model: params A, copy W; the DDP path stages the params on the host, frees W, the grads
     * and the params (newest first, so an arena takes each back), then makes L-sized params
     * and grads and W again */
    int64_t pk = rA + rW;
    if (distributed && rL + rW > pk) pk = rL + rW;
    r->peak[TR_MEM_PARAMS] = pk;
    r->peak[TR_MEM_GRADS] = distributed && rL > rA ? rL : rA;
    r->peak[TR_MEM_OPTIMIZER] = states * tr_plan_round(g, state * 4);
    return TR_OK;
}

/* A floor under a role's activation peak (after tr_plan_rank_state): the arena and token
 * buffers of one slot per chunk. The arena is a fixed part plus each part's per-slot floats
 * times its slots, and a part holds at least one slot (tr_model_act_sizes), so the schedule's
 * slots can only add to it; the other activation buffers only add too. */
tr_status tr_plan_rank_floor(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                             const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                             const tr_plan_rank *r, int64_t *act_floor) {
    tr_model_part parts[64];
    int n = r->vpp;
    if (c->model.pipeline_model_parallel_size > 1) {
        for (int ch = 0; ch < n; ch++) {
            const tr_pp_stage *sg = tr_pp_layout_stage(lay, pp_rank, ch);
            parts[ch] = (tr_model_part){sg->first_layer, sg->num_layers, sg->has_embedding,
                                        sg->has_loss, 1};
        }
    } else {
        parts[0] = (tr_model_part){0, ms->num_layers, true, true, 1};
    }
    tr_model_act_size one;
    TR_TRY(act_size(ms, (tr_tp_shard){0, (int)c->model.tensor_model_parallel_size},
                    (int)c->train.micro_batch_size, parts, n, true, cache, &one));
    *act_floor = tr_plan_round(g, one.tok_bytes) + tr_plan_round(g, one.act_bytes);
    return TR_OK;
}

/* Phase two, after tr_plan_rank_state: the schedule's slots and transfers, the activations,
 * the exchange and MoE buffers, the workspace and the totals. */
tr_status tr_plan_rank_rest(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                            const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                            tr_plan_rank *r, tr_diags *d) {
    int tp = (int)c->model.tensor_model_parallel_size;
    int pp = (int)c->model.pipeline_model_parallel_size, mbs = (int)c->train.micro_batch_size;
    int nmb = (int)c->derived.num_microbatches, cp = ms->cp > 1 ? ms->cp : 1;
    tr_tp_shard shard = {0, tp};
    tr_model_part parts[64];
    if (pp > 1) {
        TR_TRY(rank_parts(c, lay, pp_rank, cache, parts, r, d));
    } else {
        parts[0] = (tr_model_part){0, ms->num_layers, true, true, 1};
        r->slots[0] = 1;
    }
    act_val av;
    TR_TRY(act_sizes(ms, shard, mbs, parts, r->vpp, cache, &av));
    tr_model_act_size as = av.all;
    r->act_arena = as.act_bytes;
    r->tokens = as.tok_bytes;
    int64_t msg = (int64_t)mbs * ms->seq * ms->hidden / (ms->sequence_parallel && tp > 1 ? tp : 1);
    r->p2p = (int64_t)r->p2p_fp32 * msg * 4 + (int64_t)r->p2p_half * msg * 2;
    r->workspace = (pp > 1 ? 2 : 1) * (int64_t)(nmb > 0 ? nmb : 1) * 4;
    /* one slot's share: the arena of one more microbatch in flight on every chunk */
    int slots = 0;
    for (int k = 0; k < r->vpp; k++) slots += r->slots[k];
    r->act_per_slot =
        slots > r->vpp ? (as.act_bytes - av.one.act_bytes) / (slots - r->vpp) : av.one.act_bytes;
    tr_model shape;
    TR_TRY(tr_model_shape(&shape, ms, shard, mbs, parts, r->vpp));
    /* fine-tuning data brings document starts and position ids, and a CP rank's rows carry
     * their global positions (runtime/train/step.c): the model gathers positions */
    int64_t pos_local = 0, pos_table = 0;
    if (c->dataset.type == TR_DS_SFT || cp > 1)
        tr_model_position_bytes(&shape, &pos_local, &pos_table);
    r->tokens += pos_local + 2 * pos_table;
    r->peak[TR_MEM_ACTIVATIONS] = (pos_local ? tr_plan_round(g, pos_local) : 0) +
                                  (pos_table ? 2 * tr_plan_round(g, pos_table) : 0) +
                                  tr_plan_round(g, as.tok_bytes) + tr_plan_round(g, as.act_bytes) +
                                  r->p2p_fp32 * tr_plan_round(g, msg * 4) +
                                  r->p2p_half * tr_plan_round(g, msg * 2);
    int64_t mb = 0, mr = 0;
    TR_TRY(moe_buffers(ms, tp, mbs, parts, r->vpp, g, &mb, &mr));
    r->moe_buffers = mb;
    r->peak[TR_MEM_ACTIVATIONS] += mr;
    if (cp > 1) {
        int64_t cpb = 0, cpr = 0;
        TR_TRY(cp_buffers(c, ms, &shape, mbs, g, &cpb, &cpr));
        r->cp_buffers = cpb;
        r->peak[TR_MEM_ACTIVATIONS] += cpr;
    }
    r->peak[TR_MEM_WORKSPACE] = (pp > 1 ? 2 : 1) * tr_plan_round(g, (nmb > 0 ? nmb : 1) * 4);
    /* the device's own scratch, and the overflow flag of a step that rounds or unscales the
     * gradients (runtime/train/precision.c: half precision without grad_reduce_in_fp32, or
     * fp16 loss scaling) */
    r->peak[TR_MEM_WORKSPACE] += tr_plan_round(g, (int64_t)tr_device_scratch_bytes());
    if ((ms->lowp && !c->ddp.grad_reduce_in_fp32) || ms->lowp == TR_LOWP_F16)
        r->peak[TR_MEM_WORKSPACE] += tr_plan_round(g, 4);
    r->total = 0;
    for (int k = 0; k < TR_MEM_KIND_COUNT; k++) r->total += r->peak[k];
    r->device_total = (double)r->total + g->reserved_bytes;
    return TR_OK;
}

tr_status tr_plan_model_spec(const tr_config *c, tr_model_spec *ms, tr_diags *d) {
    TR_TRY(tr_model_spec_from_config(c, ms, d));
    ms->sizing_only = true;
    /* The expert layout the runtime builds (runtime/train/setup.c): a rank holds experts / EP
     * of them, each expert's fc1 columns and fc2 rows split over ETP (rank 0's shapes: every
     * rank's are the same), and the MoE buffers gain the expert-TP gathers' rows. */
    int64_t ep = c->model.expert_model_parallel_size, etp = c->model.expert_tensor_parallel_size;
    if (ms->moe.experts > 0 && ep > 1) ms->moe.ep_size = (int)ep;
    if (ms->moe.experts > 0 && etp > 1) ms->moe.etp_size = (int)etp;
    return tr_lora_spec_from_config(c, ms, d);
}
