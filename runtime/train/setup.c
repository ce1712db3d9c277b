/* Setting a training run up and tearing it down (runtime/train/trainer.h): the specs read from the
 * config, the layout checks the runtime makes, the model (or this rank's stages), data,
 * optimizer, data-parallel state and checkpoint load. */
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "runtime/peft/lora.h"
#include "runtime/train/trainer.h"

static int check_layout(const tr_config *c, bool distributed, tr_diags *d) {
    const tr_model_config *mc = &c->model;
    int bad = 0;
    if (!distributed && mc->pipeline_model_parallel_size > 1)
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.no_communicator", NULL,
                           "model.pipeline_model_parallel_size",
                           "launch through run_recipe under mpirun (one rank per stage), or set "
                           "it to 1",
                           "pipeline parallelism (PP %lld) needs a communicator; this caller gave "
                           "none",
                           (long long)mc->pipeline_model_parallel_size) != TR_OK;
    else if (!distributed && (c->derived.data_parallel_size > 1 ||
                              mc->tensor_model_parallel_size > 1 || mc->context_parallel_size > 1))
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.no_communicator", NULL, "derived.world_size",
                           "launch through run_recipe under mpirun (it creates the communicator)",
                           "data, tensor and context parallelism need a communicator; this caller "
                           "gave none") != TR_OK;
    return bad;
}

tr_status tr_trainer_setup(trainer *t, const tr_config *c, tr_diags *d) {
    tr_model_spec ms;
    tr_optimizer_spec os;
    /* What the runtime cannot run is refused first, by the rules the dry run reports. */
    if (tr_runtime_check(c, d) != TR_OK) return TR_ERR_CONFIG;
    int bad = tr_model_spec_from_config(c, &ms, d) != TR_OK;
    bad |= tr_lora_spec_from_config(c, &ms, d) != TR_OK;
    ms.no_weight_copy = t->o->no_weight_copy;
    ms.no_half_acts = t->o->no_half_acts;
    bad |= tr_optimizer_spec_from_config(c, &os, d) != TR_OK;
    bad |= tr_lr_schedule_from_config(c, &t->sched, d) != TR_OK;
    bad |= tr_train_precision_from_config(c, &t->prec, d) != TR_OK;
    /* One rank keeps the plain loop (bitwise what it always computed); the distributed path
     * starts at two ranks. */
    t->distributed =
        t->o->comm != NULL &&
        (c->derived.data_parallel_size > 1 || c->model.tensor_model_parallel_size > 1 ||
         c->model.pipeline_model_parallel_size > 1 || c->model.context_parallel_size > 1);
    bad |= check_layout(c, t->distributed, d);
    if (bad) return TR_ERR_CONFIG;
    t->mbs = (int)c->train.micro_batch_size;
    t->gbs = (int)c->train.global_batch_size;
    t->nmb = (int)c->derived.num_microbatches;
    t->seq = ms.seq;
    t->cp_size = ms.cp > 1 ? ms.cp : 1;
    t->full_seq = ms.seq * t->cp_size;
    t->eod_mask = c->dataset.eod_mask_loss == 1;
    t->per_token_loss = c->model.calculate_per_token_loss;
    t->opt_spec = os;
    t->dp_size = 1;
    t->dp_rank = 0;
    t->data_dp_size = 1;
    t->data_dp_rank = 0;
    if (t->distributed) {
        t->dp_size = tr_comm_group_size(t->o->comm, TR_GROUP_DP_CP);
        t->dp_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_DP_CP);
        t->data_dp_size = tr_comm_group_size(t->o->comm, TR_GROUP_DP);
        t->data_dp_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_DP);
        t->cp_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_CP);
        if (t->data_dp_size != c->derived.data_parallel_size ||
            t->dp_size != t->data_dp_size * t->cp_size ||
            tr_comm_group_size(t->o->comm, TR_GROUP_CP) != t->cp_size)
            return TR_ERR_INVALID;
    }
    /* A launch input (the device is not part of the config), like the communicator. */
    if (ms.moe.experts > 0 && !tr_device_host_visible(t->dev))
        return tr_diag_add(d, TR_SEV_ERROR, "runtime.moe_device", NULL, "model.num_moe_experts",
                           "train MoE models on the cpu device (TRESTLE_DEVICE=cpu)",
                           "the MoE layer keeps its buffers in host memory: it does not run on "
                           "the %s device yet",
                           tr_device_name(t->dev));
    TR_TRY(tr_train_data_open(c, &t->data, d));
    /* Expert parallelism: this rank holds its EP group's share of every MoE layer's experts
     * (parallel state's expert grid) and sends tokens to the others' (runtime/moe/dispatch.c). */
    if (t->distributed && ms.moe.experts > 0 && c->model.expert_model_parallel_size > 1) {
        ms.moe.ep_size = tr_comm_group_size(t->o->comm, TR_GROUP_EP);
        ms.moe.ep_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_EP);
        if (ms.moe.ep_size != c->model.expert_model_parallel_size) return TR_ERR_INVALID;
    }
    /* Expert TP: its slice of each of those experts, over the expert-TP group (runtime/moe/etp.c)
     */
    if (t->distributed && ms.moe.experts > 0 && c->model.expert_tensor_parallel_size > 1) {
        ms.moe.etp_size = tr_comm_group_size(t->o->comm, TR_GROUP_EXPERT_TP);
        ms.moe.etp_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_EXPERT_TP);
        if (ms.moe.etp_size != c->model.expert_tensor_parallel_size) return TR_ERR_INVALID;
    }
    tr_tp_shard tp = {0, 1};
    if (t->distributed)
        tp = (tr_tp_shard){tr_comm_group_rank(t->o->comm, TR_GROUP_TP),
                           tr_comm_group_size(t->o->comm, TR_GROUP_TP)};
    /* runtime.tp_split has checked that TP divides every split dimension. */
    /* Pipeline parallel: the model is this rank's stages only (docs/pipeline.md). */
    if (t->distributed && c->model.pipeline_model_parallel_size > 1) {
        t->have_pp = true; /* freed even when creation fails halfway */
        TR_TRY(tr_pp_exec_create(&t->pp, c, t->o->comm, d));
        TR_TRY(
            tr_model_create_parts_on(&t->model, t->dev, &ms, tp, t->mbs, t->pp.parts, t->pp.vpp));
        TR_TRY(tr_pp_exec_attach(&t->pp, &t->model, d));
        t->pp_idx = malloc((size_t)t->mbs * sizeof *t->pp_idx);
        if (!t->pp_idx) return TR_ERR_NOMEM;
    } else {
        tr_model_part whole = {0, ms.num_layers, true, true, 1};
        TR_TRY(tr_model_create_parts_on(&t->model, t->dev, &ms, tp, t->mbs, &whole, 1));
    }
    t->model.comm = t->o->comm;
    tr_model_moe_set_comm(&t->model, t->o->comm);
    if (t->cp_size > 1) {
        TR_TRY(tr_cp_create(&t->cp, t->dev, t->o->comm, TR_GROUP_CP, t->mbs, ms.seq,
                            t->model.spec.heads, t->model.spec.groups, ms.head_dim));
        t->model.cp = &t->cp;
        /* runtime.context_parallel has left p2p (null), allgather or a2a, one for every layer. */
        const tr_str_list *ct = &c->model.cp_comm_type;
        if (!ct->null && ct->n > 0 && strcmp(ct->v[0], "allgather") == 0)
            TR_TRY(tr_cp_use_all_gather(&t->cp));
        if (!ct->null && ct->n > 0 && strcmp(ct->v[0], "a2a") == 0) TR_TRY(tr_cp_use_a2a(&t->cp));
    }
    TR_TRY(tr_loss_buffer_create(&t->losses, t->dev, t->nmb > 0 ? t->nmb : 1));
    TR_TRY(tr_model_init_weights(&t->model, (uint64_t)c->rng.seed));
    t->model.dropout_seed = (uint64_t)c->rng.seed * 0x9E3779B97F4A7C15ull + 1;
    if (t->distributed)
        TR_TRY(tr_train_dp_setup(&t->dp, c, t->o->comm, &t->model, &os, d));
    else
        TR_TRY(tr_optimizer_create_on(&t->opt, t->dev, &os, t->model.info, t->model.n_info,
                                      t->model.n_params));
    int64_t bt = (int64_t)t->mbs * t->seq;
    t->sample = malloc((size_t)(t->full_seq + 1) * sizeof *t->sample);
    t->full_ids = malloc((size_t)t->full_seq * sizeof *t->full_ids);
    t->full_tgt = malloc((size_t)t->full_seq * sizeof *t->full_tgt);
    t->full_ds = malloc((size_t)t->full_seq * sizeof *t->full_ds);
    t->full_pos = malloc((size_t)t->full_seq * sizeof *t->full_pos);
    t->cp_index = malloc((size_t)t->full_seq * sizeof *t->cp_index);
    if (!t->full_ids || !t->full_tgt || !t->full_ds || !t->full_pos || !t->cp_index)
        return TR_ERR_NOMEM;
    t->ids = malloc((size_t)bt * sizeof *t->ids);
    t->tgt = malloc((size_t)bt * sizeof *t->tgt);
    t->doc_start = malloc((size_t)bt * sizeof *t->doc_start);
    t->pos = malloc((size_t)bt * sizeof *t->pos);
    if (!t->sample || !t->ids || !t->tgt || !t->doc_start || !t->pos) return TR_ERR_NOMEM;
    /* checkpoint: load into the model and optimizer, and where the loop resumes */
    tr_train_ckpt_env ce = {.c = c,
                            .comm = t->distributed ? t->o->comm : NULL,
                            .model = &t->model,
                            .opt = t->distributed ? NULL : &t->opt,
                            .dp = t->distributed ? &t->dp : NULL,
                            .pp = t->have_pp ? &t->pp : NULL,
                            .scaler = &t->prec.scaler,
                            .log = t->o->log};
    return tr_train_ckpt_setup(&t->ckpt, &ce, d);
}

void tr_trainer_teardown(trainer *t) {
    tr_train_ckpt_free(&t->ckpt);
    tr_train_log_close(&t->log);
    tr_optimizer_free(&t->opt);
    if (t->have_pp) tr_pp_exec_free(&t->pp);
    tr_loss_buffer_free(&t->losses);
    tr_train_dp_free(&t->dp);
    tr_cp_free(&t->cp);
    tr_model_free(&t->model);
    tr_train_data_close(&t->data);
    free(t->pp_idx);
    free(t->sample);
    free(t->full_ids);
    free(t->full_tgt);
    free(t->full_ds);
    free(t->full_pos);
    free(t->cp_index);
    free(t->ids);
    free(t->tgt);
    free(t->doc_start);
    free(t->pos);
}
