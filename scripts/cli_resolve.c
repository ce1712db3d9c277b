/* See scripts/cli_resolve.h. */
#include "scripts/cli_resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/hf/hf.h"
#include "scripts/cli_runner.h"

/* The first of the launchers' variables that is set and positive. */
static int env_int(const char *const *names) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            char *end = NULL;
            long x = strtol(v, &end, 10);
            if (*end == '\0' && x > 0 && x < 1 << 24) return (int)x;
        }
    }
    return 0;
}

static const char *const world_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                         "SLURM_NTASKS", NULL};

tr_world tr_cli_default_world(const tr_cli *cli) {
    static const char *const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                             "SLURM_NTASKS_PER_NODE", NULL};
    tr_world w;
    w.world_size = cli->world_size ? cli->world_size : env_int(world_vars);
    if (w.world_size == 0) w.world_size = 1;
    int local = cli->world_size ? 0 : env_int(local_vars);
    w.gpus_per_node = cli->gpus_per_node ? cli->gpus_per_node : local ? local : w.world_size;
    return w;
}

/* N of a Megatron-Bridge hardware name ("..._2gpu_h100_bf16_config"), else 0. */
static int named_gpus(const char *name) {
    for (const char *p = strstr(name, "gpu_"); p; p = strstr(p + 1, "gpu_")) {
        const char *q = p;
        while (q > name && q[-1] >= '0' && q[-1] <= '9') q--;
        if (q < p && q > name && q[-1] == '_') return atoi(q);
    }
    return 0;
}

tr_world tr_cli_inspect_world(const tr_cli *cli) {
    tr_world w = tr_cli_default_world(cli);
    if (cli->world_size || env_int(world_vars) || !cli->recipe) return w;
    const tr_recipe *r = tr_recipe_find(cli->recipe);
    int n = named_gpus(cli->recipe);
    if (!n && !cli->dry_run && r) n = r->min_world_size;
    if (n <= 1) return w;
    w.world_size = n;
    w.gpus_per_node = cli->gpus_per_node ? cli->gpus_per_node : n < 8 ? n : 8;
    return w;
}

void tr_cli_check_files(const tr_cli *cli, tr_diags *d) {
    for (int i = 0; i < cli->n_config_files; i++) {
        const char *f = cli->config_files[i];
        if (access(f, R_OK) == 0) continue;
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, f);
        tr_diag_add(d, TR_SEV_ERROR, "cli.config_file_missing", &o, NULL,
                    "check the path; files are read relative to the current directory",
                    "cannot read config file %s", f);
    }
}

/* --hf-model DIR: the checkpoint's dimensions over the recipe, its weights as the pretrained
 * checkpoint, and its tokenizer.json when it has one. */
static tr_status apply_hf_model(tr_config *c, const char *dir, tr_diags *d) {
    TR_TRY(tr_hf_config_apply(c, dir, true, d));
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, tr_config_intern(c, dir));
    if (!o.name) return TR_ERR_NOMEM;
    TR_TRY(tr_config_set_text(c, "checkpoint.pretrained_checkpoint", dir, &o, d));
    size_t n = strlen(dir) + sizeof "/tokenizer.json";
    char *tok = malloc(n);
    if (!tok) return TR_ERR_NOMEM;
    snprintf(tok, n, "%s/tokenizer.json", dir);
    tr_status st = TR_OK;
    if (access(tok, R_OK) == 0) {
        st = tr_config_set_text(c, "tokenizer.tokenizer_type", "HuggingFaceTokenizer", &o, d);
        if (st == TR_OK) st = tr_config_set_text(c, "tokenizer.tokenizer_model", tok, &o, d);
    }
    free(tok);
    return st;
}

/* What the command line puts between the recipe and the files: the Hugging Face model, then
 * Megatron-Bridge's runner steps (mode, dataset preset, determinism). */
static tr_status after_recipe(tr_config *c, void *ctx, tr_diags *d) {
    const tr_cli *cli = ctx;
    if (cli->hf_model) TR_TRY(apply_hf_model(c, cli->hf_model, d));
    return tr_cli_runner_apply(c, cli, d);
}

tr_status tr_cli_resolve(const tr_cli *cli, tr_world w, bool real_run, bool skip_validate,
                         tr_config *c, tr_diags *d) {
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = cli->recipe;
    o.config_files = cli->config_files;
    o.n_config_files = cli->n_config_files;
    o.overrides = (const char *const *)cli->overrides;
    o.override_argi = cli->override_argi;
    o.n_overrides = cli->n_overrides;
    o.world = w;
    o.validate.check_files = real_run || cli->check_inputs;
    /* Inspection builds the config as Megatron-Bridge does, without launch inputs: rules about
     * them become notes, until a launch or --check-inputs asks for them. */
    o.validate.defer_launch_inputs = !real_run && !cli->check_inputs;
    /* A real launch checks what the runtime can run whatever the flag says. */
    o.validate.skip_capability = cli->config_only && !real_run;
    o.skip_validate = skip_validate;
    o.after_recipe = after_recipe;
    o.after_recipe_ctx = (void *)cli;
    memset(c, 0, sizeof *c); /* a resolution that cannot start leaves c as it was */
    tr_status s = tr_resolve(&o, c, d);
    if (c->n_history > 0) tr_cli_runner_check(cli, c, real_run || cli->check_inputs, d);
    if (s == TR_OK && d->n_errors) s = TR_ERR_CONFIG;
    if (cli->strict && d->n_warnings > 0) {
        tr_diags_promote_warnings(d);
        if (s == TR_OK) s = TR_ERR_CONFIG;
    }
    return s;
}

void tr_cli_print_diags(const tr_cli *cli, const tr_diags *d) {
    if (cli->diag_format == TR_CLI_DIAG_JSON) {
        tr_diags_print_json(d, stdout);
        fflush(stdout);
    } else {
        tr_diags_print_text(d, stderr, isatty(fileno(stderr)) != 0);
    }
}

int tr_cli_exit_code(tr_status s, const tr_diags *d) {
    switch (s) {
    case TR_OK:
        return d->n_errors > 0 ? 2 : 0;
    case TR_ERR_INVALID:
    case TR_ERR_CONFIG:
    case TR_ERR_NOTFOUND:
        return 2;
    default:
        return 1;
    }
}
