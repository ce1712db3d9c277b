/* The plan as text (per role breakdown, FLOPs, bytes per group, bubble, time, MFU, and the
 * assumptions the numbers rest on) and as JSON. */
#include <inttypes.h>

#include "runtime/plan/plan_internal.h"

static double gib(double b) {
    return b / (1024.0 * 1024.0 * 1024.0);
}

static const char *role_name(const tr_plan_rank *r) {
    return r->first && r->last ? "whole model"
           : r->first          ? "first stage"
           : r->last           ? "last stage"
                               : "middle stage";
}

void tr_plan_print(FILE *out, const tr_config *c, const tr_plan *p) {
    static const char *const rc[] = {"none", "selective", "full"};
    fprintf(out,
            "plan for %s on %d x %s: TP %d, PP %d, VPP %d, CP %d, DP %d; micro batch %d, "
            "global batch %d, %d microbatches; SP %s, distributed optimizer %s, "
            "recomputation %s, %s\n",
            c->recipe_name ? c->recipe_name : "(config)", p->world, p->gpu->name, p->tp, p->pp,
            p->vpp, p->cp, p->dp, p->mbs, p->gbs, p->nmb, p->sp ? "on" : "off",
            p->dist_opt ? "on" : "off", rc[p->recompute], p->lowp ? "bf16/fp16 mixed" : "fp32");
    if (p->ep > 1 || p->etp > 1) fprintf(out, "experts: EP %d, ETP %d\n", p->ep, p->etp);
    if (p->predicted_only)
        fprintf(out,
                "PREDICTED ONLY: the runtime refuses this configuration (%s); the numbers follow "
                "Megatron's semantics where the runtime has no allocation to size them by\n",
                p->refused_by);
    fprintf(out,
            "assumptions: fp32 master parameters and fp32 gradients (the runtime keeps both "
            "in fp32 whatever grad_reduce_in_fp32 says), Adam m and v in fp32, a half-precision "
            "weight copy in mixed precision, activations as the runtime saves them, "
            "allocations rounded to %" PRId64 " bytes, %.1f GiB reserved per device for "
            "context and libraries\n",
            p->gpu->alloc_align, gib(p->gpu->reserved_bytes));
    for (int i = 0; i < p->n_ranks; i++) {
        const tr_plan_rank *r = &p->ranks[i];
        fprintf(out,
                "rank role: pp rank %d (%s), %d layers, %" PRId64 " parameters, microbatches "
                "in flight per chunk:",
                r->pp_rank, role_name(r), r->layers, r->n_params);
        for (int k = 0; k < r->vpp; k++) fprintf(out, " %d", r->slots[k]);
        fprintf(out, "\n");
        fprintf(out, "  parameters (fp32)        %10.3f GiB\n", gib(r->params));
        fprintf(out, "  weight copy (half)       %10.3f GiB\n", gib(r->param_copy));
        fprintf(out,
                "  gradients (fp32)         %10.3f GiB  (DDP buffer, %" PRId64
                " buckets, %.3f GiB padding)\n",
                gib(r->grads), r->n_buckets, gib(r->ddp_padding));
        fprintf(out, "  optimizer state          %10.3f GiB  (%s)\n", gib(r->optimizer),
                p->dist_opt && p->dp * (p->cp > 1 ? p->cp : 1) > 1 ? "sharded over DP x CP"
                                                                   : "not sharded");
        fprintf(out, "  activations / microbatch %10.3f GiB\n", gib(r->act_per_slot));
        fprintf(out,
                "  activation arena         %10.3f GiB  (every slot, recompute sets, scratch)\n",
                gib(r->act_arena));
        fprintf(out, "  token buffers            %10.3f GiB\n", gib(r->tokens));
        fprintf(out, "  p2p buffers              %10.3f GiB  (%d fp32, %d half)\n", gib(r->p2p),
                r->p2p_fp32, r->p2p_half);
        if (p->cp > 1)
            fprintf(out, "  CP exchange buffers      %10.3f GiB  (KV and dK/dV blocks)\n",
                    gib(r->cp_buffers));
        if (r->moe_buffers)
            fprintf(out,
                    "  MoE token buffers        %10.3f GiB  (router, expert rows at the dropless "
                    "worst case: every token's top-k on this rank's experts; shared expert)\n",
                    gib(r->moe_buffers));
        fprintf(out, "  workspace                %10.3f GiB\n", gib(r->workspace));
        fprintf(out,
                "  peaks per kind: params %.3f, grads %.3f, optimizer %.3f, activations %.3f, "
                "workspace %.3f GiB\n",
                gib(r->peak[TR_MEM_PARAMS]), gib(r->peak[TR_MEM_GRADS]),
                gib(r->peak[TR_MEM_OPTIMIZER]), gib(r->peak[TR_MEM_ACTIVATIONS]),
                gib(r->peak[TR_MEM_WORKSPACE]));
        fprintf(out, "  total %.2f GiB (+ %.1f reserved = %.2f GiB) of %.1f GiB: %s\n",
                gib(r->total), gib(p->gpu->reserved_bytes), gib(r->device_total),
                gib(p->gpu->mem_bytes),
                r->device_total <= p->gpu->mem_bytes ? "fits" : "DOES NOT FIT");
    }
    fprintf(out, "flops per step: model %.4g, with recomputation %.4g\n", p->model_flops,
            p->hw_flops);
    for (int i = 0; i < p->n_comm; i++)
        fprintf(out, "comm %-9s group of %d: %.4g bytes per step per rank (%s), %.4f s exposed\n",
                p->comm[i].group, p->comm[i].size, p->comm[i].bytes,
                p->comm[i].cross_node ? "network" : "NVLink", p->comm[i].seconds);
    double sim = 0.0;
    tr_diags d;
    tr_diags_init(&d);
    bool simulated = tr_plan_sim_bubble(c, &sim, &d) == TR_OK;
    tr_diags_free(&d);
    fprintf(out,
            "pipeline bubble %.4f of the compute time ((p - 1) / (v m)); every rank's action list "
            "simulated: ",
            p->bubble);
    if (simulated)
        fprintf(out, "%.4f\n", sim);
    else
        fprintf(out, "not available\n");
    fprintf(out,
            "step time %.4f s predicted (compute %.4f, bubble %.4f, exposed comm %.4f, "
            "optimizer %.4f); MFU %.1f%%\n",
            p->step_s, p->t_compute, p->t_bubble, p->t_comm, p->t_optimizer, 100.0 * p->mfu);
    fprintf(out, "plan: %s (largest rank %.2f GiB of %.1f GiB)\n",
            p->fits ? "fits" : "does not fit", gib((double)p->peak_total), gib(p->gpu->mem_bytes));
}

void tr_plan_print_json(FILE *out, const tr_plan *p) {
    static const char *const kinds[] = {"params", "grads", "optimizer", "activations", "workspace"};
    fprintf(out,
            "{\"gpu\":\"%s\",\"world\":%d,\"tp\":%d,\"pp\":%d,\"vpp\":%d,\"cp\":%d,\"dp\":%d,"
            "\"mbs\":%d,\"gbs\":%d,\"sp\":%s,\"dist_opt\":%s,\"recompute\":%d,\"fits\":%s,"
            "\"peak_total\":%" PRId64 ",\"step_s\":%.6g,\"mfu\":%.6g,\"bubble\":%.6g,"
            "\"model_flops\":%.6g,\"ep\":%d,\"etp\":%d,\"predicted_only\":%s,"
            "\"refused_by\":\"%s\",\"ranks\":[",
            p->gpu->name, p->world, p->tp, p->pp, p->vpp, p->cp, p->dp, p->mbs, p->gbs,
            p->sp ? "true" : "false", p->dist_opt ? "true" : "false", p->recompute,
            p->fits ? "true" : "false", p->peak_total, p->step_s, p->mfu, p->bubble, p->model_flops,
            p->ep, p->etp, p->predicted_only ? "true" : "false", p->refused_by);
    for (int i = 0; i < p->n_ranks; i++) {
        const tr_plan_rank *r = &p->ranks[i];
        fprintf(out,
                "%s{\"pp_rank\":%d,\"n_params\":%" PRId64 ",\"params\":%" PRId64
                ",\"param_copy\":%" PRId64 ",\"grads\":%" PRId64 ",\"optimizer\":%" PRId64
                ",\"act_per_slot\":%" PRId64 ",\"act_arena\":%" PRId64 ",\"p2p\":%" PRId64
                ",\"moe_buffers\":%" PRId64 ",\"total\":%" PRId64 ",\"peak\":{",
                i ? "," : "", r->pp_rank, r->n_params, r->params, r->param_copy, r->grads,
                r->optimizer, r->act_per_slot, r->act_arena, r->p2p, r->moe_buffers, r->total);
        for (int k = 0; k < TR_MEM_KIND_COUNT; k++)
            fprintf(out, "%s\"%s\":%" PRId64, k ? "," : "", kinds[k], r->peak[k]);
        fprintf(out, "}}");
    }
    fprintf(out, "],\"comm\":[");
    for (int i = 0; i < p->n_comm; i++)
        fprintf(out, "%s{\"group\":\"%s\",\"size\":%d,\"bytes\":%.6g,\"seconds\":%.6g}",
                i ? "," : "", p->comm[i].group, p->comm[i].size, p->comm[i].bytes,
                p->comm[i].seconds);
    fprintf(out, "]}\n");
}
