/* run_recipe's reports; see scripts/cli_report.h. */
#include "scripts/cli_report.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/docs_gen.h"
#include "recipes/catalog.h"
#include "recipes/resolve.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/rank_groups.h"

void tr_cli_format_count(double x, char *buf, size_t cap) {
    static const struct {
        double scale;
        const char *suffix;
    } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (x >= units[i].scale) {
            snprintf(buf, cap, "%.3g%s", x / units[i].scale, units[i].suffix);
            return;
        }
    snprintf(buf, cap, "%.0f", x);
}

tr_status tr_cli_resolve_recipe(const char *name, const tr_world *world, bool skip_validate,
                                tr_config *c, tr_diags *d) {
    const tr_recipe *r = tr_recipe_find(name);
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = name;
    int min_world = r && r->min_world_size > 0 ? r->min_world_size : 1;
    o.world.world_size = world ? world->world_size : min_world;
    o.world.gpus_per_node = world ? world->gpus_per_node : (min_world < 8 ? min_world : 8);
    o.validate.catalog_mode = true;
    o.skip_validate = skip_validate;
    memset(c, 0, sizeof *c); /* a resolution that cannot start leaves c as it was */
    return tr_resolve(&o, c, d);
}

tr_status tr_cli_print_layout(FILE *out, const tr_config *c, bool groups, tr_diags *d) {
    tr_parallel_dims dims;
    TR_TRY(tr_parallel_dims_from_config(c, (int)c->derived.world_size, &dims));
    if (tr_parallel_dims_check(&dims, d) != TR_OK) return TR_ERR_CONFIG;
    tr_parallel_banner(out, &dims, (int)c->derived.num_microbatches);
    if (groups) TR_TRY(tr_rank_groups_print(out, &dims));
    return TR_OK;
}

static void row(FILE *out, const char *name, const char *value, const char *why) {
    if (why && why[0])
        fprintf(out, "  %-26s %-14s  %s\n", name, value, why);
    else
        fprintf(out, "  %-26s %s\n", name, value);
}

static void field_text(const tr_config *c, int fid, char *buf, size_t cap) {
    tr_config_field_format(c, &tr_fields[fid], buf, cap);
}

/* A count, and with MTP depths its main-model part (the number a model card quotes) first. */
static void mtp_split(double total, double mtp, char *why, size_t cap) {
    char a[32], b[32], t[32];
    tr_cli_format_count(total, t, sizeof t);
    if (mtp <= 0) {
        snprintf(why, cap, "%s", t);
        return;
    }
    tr_cli_format_count(total - mtp, a, sizeof a);
    tr_cli_format_count(mtp, b, sizeof b);
    snprintf(why, cap, "%s: %s main model + %s MTP depths", t, a, b);
}

void tr_cli_print_derived(FILE *out, const tr_config *c) {
    const tr_derived_config *x = &c->derived;
    const tr_model_config *m = &c->model;
    char v[64], why[192], a[64], b[64];

    fputs("derived values:\n", out);
    snprintf(v, sizeof v, "%" PRId64, x->world_size);
    snprintf(why, sizeof why, "%" PRId64 " per node", x->gpus_per_node);
    row(out, "world_size", v, why);
    snprintf(v, sizeof v, "%" PRId64, x->data_parallel_size);
    snprintf(why, sizeof why, "world / (TP %" PRId64 " x CP %" PRId64 " x PP %" PRId64 ")",
             m->tensor_model_parallel_size, m->context_parallel_size,
             m->pipeline_model_parallel_size);
    row(out, "data_parallel_size", v, why);
    snprintf(v, sizeof v, "%" PRId64, x->expert_data_parallel_size);
    row(out, "expert_data_parallel_size", v, "world / (ETP x EP x PP)");
    field_text(c, TR_FID_train_global_batch_size, a, sizeof a);
    field_text(c, TR_FID_train_micro_batch_size, b, sizeof b);
    snprintf(v, sizeof v, "%" PRId64, x->num_microbatches);
    snprintf(why, sizeof why, "global batch %s / (micro batch %s x DP %" PRId64 ")", a, b,
             x->data_parallel_size);
    row(out, "num_microbatches", v, why);
    field_text(c, TR_FID_derived_padded_vocab_size, v, sizeof v);
    field_text(c, TR_FID_model_vocab_size, a, sizeof a);
    snprintf(why, sizeof why, "vocab %s padded to a multiple of %" PRId64 " x TP %" PRId64, a,
             m->make_vocab_size_divisible_by, m->tensor_model_parallel_size);
    row(out, "padded_vocab_size", v, why);
    snprintf(v, sizeof v, "%" PRId64, x->num_params);
    mtp_split((double)x->num_params, (double)x->num_mtp_params, why, sizeof why);
    row(out, "num_params", v, why);
    snprintf(v, sizeof v, "%" PRId64, x->num_active_params);
    mtp_split((double)x->num_active_params, (double)x->num_mtp_active_params, why, sizeof why);
    row(out, "num_active_params", v, why);
    snprintf(v, sizeof v, "%.4g", x->flops_per_token);
    row(out, "flops_per_token", v, "forward + backward");
    if (c->train.global_batch_size != TR_NULL_INT) {
        double tokens = (double)c->train.global_batch_size * (double)m->seq_length;
        snprintf(v, sizeof v, "%.0f", tokens);
        snprintf(why, sizeof why, "global batch %" PRId64 " x seq_length %" PRId64,
                 c->train.global_batch_size, m->seq_length);
        row(out, "tokens_per_iteration", v, why);
        snprintf(v, sizeof v, "%.4g", tokens * x->flops_per_token);
        row(out, "flops_per_iteration", v, "flops_per_token x tokens_per_iteration");
    }
    field_text(c, TR_FID_train_train_iters, v, sizeof v);
    row(out, "train_iters", v, NULL);
    static const int sched[] = {TR_FID_derived_lr_warmup_steps, TR_FID_derived_lr_decay_steps,
                                TR_FID_derived_wd_incr_steps, TR_FID_derived_wsd_decay_steps};
    for (size_t i = 0; i < sizeof sched / sizeof sched[0]; i++) {
        field_text(c, sched[i], v, sizeof v);
        row(out, tr_fields[sched[i]].name, v, "samples");
    }
}

static const char *mode_name(int mode) {
    return mode >= 0 && mode < tr_enum_train_mode.n ? tr_enum_train_mode.values[mode].name : "?";
}

tr_status tr_cli_list_recipes(FILE *out) {
    int n = 0;
    const tr_recipe *all = tr_recipe_list(&n);
    fprintf(out, "%-40s %-9s %8s %9s  %s\n", "recipe", "mode", "min GPUs", "params", "description");
    for (int i = 0; i < n; i++) {
        const tr_recipe *r = &all[i];
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        char params[32] = "?";
        /* Parameters come from the resolved model, so they cannot disagree with --dry-run. */
        tr_status s = tr_cli_resolve_recipe(r->name, NULL, true, &c, &d);
        if (s == TR_OK) tr_cli_format_count((double)c.derived.num_params, params, sizeof params);
        char refused[512];
        int k = tr_catalog_refusals(r, refused, sizeof refused);
        fprintf(out, "%-40s %-9s %8d %9s  %s%s%s%s\n", r->name, mode_name(r->mode),
                r->min_world_size, params, r->doc ? r->doc : "", k ? " [refused: " : "",
                k ? refused : "", k ? "]" : "");
        tr_config_free(&c);
        tr_diags_free(&d);
        if (s == TR_ERR_NOMEM) return s;
    }
    return ferror(out) ? TR_ERR_IO : TR_OK;
}

static void suggest_recipe(const char *name, tr_diags *d, const char *id) {
    const tr_recipe *near[3];
    int k = tr_recipe_suggest(name, near, 3);
    char hint[256] = "run_recipe --list-recipes shows every recipe";
    if (k > 0) {
        int n = snprintf(hint, sizeof hint, "did you mean %s", near[0]->name);
        for (int i = 1; i < k && n < (int)sizeof hint; i++)
            n += snprintf(hint + n, sizeof hint - (size_t)n, " or %s", near[i]->name);
        if (n < (int)sizeof hint) snprintf(hint + n, sizeof hint - (size_t)n, "?");
    }
    tr_diag_add(d, TR_SEV_ERROR, id, NULL, NULL, hint, "no recipe named '%s'", name);
}

/* The keys a reader of a recipe looks at first; absent keys are skipped. */
static const char *const DESCRIBE_KEYS[] = {
    "model.num_layers",
    "model.hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.ffn_hidden_size",
    "model.vocab_size",
    "model.seq_length",
    "model.normalization",
    "model.activation_func",
    "model.num_moe_experts",
    "model.moe_router_topk",
    "model.multi_latent_attention",
    "train.global_batch_size",
    "train.micro_batch_size",
    "train.train_iters",
    "optimizer.optimizer",
    "optimizer.lr",
    "optimizer.min_lr",
    "scheduler.lr_decay_style",
    "scheduler.lr_warmup_iters",
    "mixed_precision.preset",
    "dataset.seq_length",
    "peft.peft",
    "checkpoint.save",
};

tr_status tr_cli_describe_recipe(FILE *out, const char *name, const tr_world *world, tr_diags *d) {
    const tr_recipe *r = tr_recipe_find(name);
    if (!r && tr_recipe_is_low_precision(name)) return tr_recipe_unknown(name, NULL, d);
    if (!r) {
        suggest_recipe(name, d, "cli.unknown_recipe");
        return TR_ERR_NOTFOUND;
    }
    tr_config c;
    tr_status s = tr_cli_resolve_recipe(name, world, false, &c, d);
    fprintf(out, "%s: %s\n", r->name, r->doc ? r->doc : "");
    char refused[512];
    int k = tr_catalog_refusals(r, refused, sizeof refused);
    fprintf(out, "  mode %s, minimum world %d, %s%s\n", mode_name(r->mode), r->min_world_size,
            k ? "not trained by this runtime: " : "trains on this runtime", k ? refused : "");
    if (c.n_history > 0) {
        char v[256];
        fputs("settings:\n", out);
        for (size_t i = 0; i < sizeof DESCRIBE_KEYS / sizeof DESCRIBE_KEYS[0]; i++) {
            const tr_field *f = tr_field_by_path(DESCRIBE_KEYS[i]);
            if (!f) continue;
            tr_config_field_format(&c, f, v, sizeof v);
            fprintf(out, "  %-30s %s\n", f->path, v);
        }
        if (s == TR_OK) {
            tr_cli_print_derived(out, &c);
            tr_cli_print_layout(out, &c, false, d);
            fprintf(out, "fingerprint %016" PRIx64 "\n", tr_config_fingerprint(&c));
        }
    }
    tr_config_free(&c);
    return s;
}

static int closest_section(const char *name) {
    int best = -1;
    size_t best_common = 0;
    for (int s = 0; s < tr_section_count; s++) {
        const char *sec = tr_sections[s].name;
        size_t k = 0;
        while (name[k] && sec[k] && name[k] == sec[k]) k++;
        if (k > best_common) {
            best_common = k;
            best = s;
        }
    }
    return best_common >= 2 ? best : -1;
}

tr_status tr_cli_help_config(FILE *out, const char *topic, tr_diags *d) {
    if (!topic) {
        fputs("config sections (run_recipe --help-config SECTION for the keys of one):\n", out);
        for (int s = 0; s < tr_section_count; s++) {
            int n = 0;
            for (int i = 0; i < tr_field_count; i++) n += tr_fields[i].section == s;
            fprintf(out, "  %-20s %4d keys  %s\n", tr_sections[s].name, n, tr_sections[s].doc);
        }
        return ferror(out) ? TR_ERR_IO : TR_OK;
    }
    if (strchr(topic, '.')) {
        const tr_field *f = tr_field_by_path(topic);
        if (f) {
            TR_TRY(tr_docs_field_table_header(out));
            return tr_docs_field_row(out, f);
        }
        const tr_field *near[3];
        int k = tr_field_suggest(topic, near, 3);
        char hint[256] = "run_recipe --help-config lists the sections";
        if (k > 0) snprintf(hint, sizeof hint, "did you mean %s?", near[0]->path);
        tr_diag_add(d, TR_SEV_ERROR, "cli.unknown_key", NULL, topic, hint, "no config key '%s'",
                    topic);
        return TR_ERR_NOTFOUND;
    }
    int s = tr_docs_section_index(topic);
    if (s >= 0) return tr_docs_section(out, s);
    int near = closest_section(topic);
    char hint[160];
    if (near >= 0)
        snprintf(hint, sizeof hint, "did you mean %s?", tr_sections[near].name);
    else
        snprintf(hint, sizeof hint, "run_recipe --help-config lists the sections");
    tr_diag_add(d, TR_SEV_ERROR, "cli.unknown_section", NULL, NULL, hint, "no config section '%s'",
                topic);
    return TR_ERR_NOTFOUND;
}
