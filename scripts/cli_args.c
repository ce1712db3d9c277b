/* Parsing of run_recipe's command line; see scripts/cli_args.h. */
#include "scripts/cli_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scripts/cli_runner.h"

typedef enum opt_id {
    OPT_RECIPE,
    OPT_CONFIG_FILE,
    OPT_HF_MODEL,
    OPT_DRY_RUN,
    OPT_PRINT_CONFIG,
    OPT_PRINT_GROUPS,
    OPT_LIST_RECIPES,
    OPT_DESCRIBE_RECIPE,
    OPT_HELP_CONFIG,
    OPT_EXPLAIN,
    OPT_WORLD_SIZE,
    OPT_GPUS_PER_NODE,
    OPT_PRINT_SCHEDULE,
    OPT_STRICT,
    OPT_CONFIG_ONLY,
    OPT_DIAG_FORMAT,
    OPT_VALIDATE_ALL,
    OPT_WORLD_SIZES,
    OPT_PLAN,
    OPT_GPU,
    OPT_SEARCH_LAYOUTS,
    OPT_TOP,
    OPT_JSON,
    OPT_VERSION,
    OPT_HELP,
    OPT_MODEL,
    OPT_MODE,
    OPT_DATASET,
    OPT_DETERMINISTIC,
    OPT_DUMP_ENV,
    OPT_CHECK_INPUTS,
    OPT_DUMP_SAMPLES,
    OPT_CONVENIENCE /* sets config keys; see the key columns */
} opt_id;

typedef enum arg_kind { ARG_NONE, ARG_REQUIRED, ARG_OPTIONAL } arg_kind;

typedef struct cli_opt {
    opt_id id;
    const char *spell[3]; /* every accepted spelling; the first is the one usage shows */
    arg_kind arg;
    const char *metavar;
    const char *key;      /* OPT_CONVENIENCE: the key the value goes to */
    const char *also_key; /* and a second key that follows it (-sl: model follows dataset) */
    bool string_value;    /* quote the value, so "null" or "[x]" stay strings */
    const char *help;
} cli_opt;

/* One flag per line reads better than the formatter's one field per line. */
#define FLAG(id, s1, s2, arg, meta, help)                                                          \
    { id, {s1, s2, NULL}, arg, meta, NULL, NULL, false, help }
#define CONV(s1, s2, meta, key, also, quote)                                                       \
    { OPT_CONVENIENCE, {s1, s2, NULL}, ARG_REQUIRED, meta, key, also, quote, NULL }
// clang-format off
static const cli_opt OPTS[] = {
    FLAG(OPT_RECIPE, "--recipe", NULL, ARG_REQUIRED, "NAME", "recipe to start from (--list-recipes)"),
    FLAG(OPT_CONFIG_FILE, "--config-file", "--config_file", ARG_REQUIRED, "F.yaml",
         "YAML overrides applied over the recipe; repeatable, applied in order"),
    FLAG(OPT_HF_MODEL, "--hf-model", "--hf_model", ARG_REQUIRED, "DIR",
         "a Hugging Face model directory: its dimensions over the recipe's, its weights loaded"),
    FLAG(OPT_DRY_RUN, "--dry-run", "--dry_run", ARG_NONE, NULL,
         "resolve and validate, print the layout and derived values; no training"),
    FLAG(OPT_PRINT_CONFIG, "--print-config", "--print_config", ARG_NONE, NULL,
         "print the resolved config as YAML (a valid --config-file) and exit"),
    FLAG(OPT_PRINT_GROUPS, "--print-groups", "--print_groups", ARG_NONE, NULL,
         "with --dry-run: print every process group of the world"),
    FLAG(OPT_PRINT_SCHEDULE, "--print-schedule", "--print_schedule", ARG_NONE, NULL,
         "with --dry-run: print every pipeline rank's schedule for one iteration"),
    FLAG(OPT_LIST_RECIPES, "--list-recipes", "--list_recipes", ARG_NONE, NULL,
         "list the recipes: name, mode, minimum GPUs, parameters"),
    FLAG(OPT_DESCRIBE_RECIPE, "--describe-recipe", "--describe_recipe", ARG_REQUIRED, "NAME",
         "summary of one resolved recipe"),
    FLAG(OPT_HELP_CONFIG, "--help-config", "--help_config", ARG_OPTIONAL, "[SECTION|KEY]",
         "the config keys: sections, or the fields of one section, or one key"),
    FLAG(OPT_EXPLAIN, "--explain", NULL, ARG_REQUIRED, "KEY",
         "every value KEY took and where it came from; repeatable"),
    FLAG(OPT_WORLD_SIZE, "--world-size", "--world_size", ARG_REQUIRED, "N",
         "resolve for N ranks (default: the MPI world when launched, else 1)"),
    FLAG(OPT_GPUS_PER_NODE, "--gpus-per-node", "--gpus_per_node", ARG_REQUIRED, "G",
         "ranks per node of that world (default: the MPI node when launched, else the world)"),
    FLAG(OPT_STRICT, "--strict", NULL, ARG_NONE, NULL, "treat warnings as errors"),
    FLAG(OPT_CONFIG_ONLY, "--config-only", "--config_only", ARG_NONE, NULL,
         "with --dry-run: Megatron's rules only, without what this runtime cannot run yet "
         "(runtime.*); a launch always checks both"),
    FLAG(OPT_DIAG_FORMAT, "--diagnostics-format", "--diagnostics_format", ARG_REQUIRED, "text|json",
         "json: diagnostics as one JSON document on stdout (reports go to stderr)"),
    FLAG(OPT_VALIDATE_ALL, "--validate-all", "--validate_all", ARG_NONE, NULL,
         "check every recipe (and YAML files given) for the --world-sizes"),
    FLAG(OPT_WORLD_SIZES, "--world-sizes", "--world_sizes", ARG_REQUIRED, "N,N,...",
         "world sizes for --validate-all"),
    FLAG(OPT_PLAN, "--plan", NULL, ARG_NONE, NULL,
         "per-rank memory, FLOPs, bytes per group, bubble, step time and MFU; no training (docs/plan.md)"),
    FLAG(OPT_GPU, "--gpu", NULL, ARG_REQUIRED, "KIND",
         "the device --plan and --search-layouts plan for: h100-80gb (default), h200-141gb, a100-80gb, b200, cpu"),
    FLAG(OPT_SEARCH_LAYOUTS, "--search-layouts", "--search_layouts", ARG_NONE, NULL,
         "enumerate TP, PP, VPP, CP, micro batch, recomputation, distributed-optimizer (and for MoE models EP, ETP) layouts for --world-size; print the fastest that validate and fit, then those only the runtime's capability rules refuse (predicted only)"),
    FLAG(OPT_TOP, "--top", NULL, ARG_REQUIRED, "K", "with --search-layouts: how many layouts to print (default 5)"),
    FLAG(OPT_JSON, "--json", NULL, ARG_NONE, NULL, "with --plan or --search-layouts: one JSON document on stdout"),
    FLAG(OPT_VERSION, "--version", NULL, ARG_NONE, NULL, "print the version and exit"),
    FLAG(OPT_HELP, "-h", "--help", ARG_NONE, NULL, "this help"),
    FLAG(OPT_MODEL, "--model", NULL, ARG_REQUIRED, "STEM",
         "model stem (llama32_1b): with --mode, the recipe STEM_pretrain|sft|peft (not with --recipe)"),
    FLAG(OPT_MODE, "--mode", NULL, ARG_REQUIRED, "pretrain|sft|lora|dora",
         "training mode; read from the recipe name when omitted, an error when they disagree"),
    FLAG(OPT_DATASET, "--dataset", NULL, ARG_REQUIRED, "PRESET",
         "replace the recipe's dataset section: mock, megatron-indexed, local-jsonl (docs/cli.md)"),
    FLAG(OPT_DETERMINISTIC, "--deterministic", NULL, ARG_NONE, NULL,
         "model.deterministic_mode=true, no fused cross entropy, no TP comm overlap"),
    FLAG(OPT_DUMP_ENV, "--dump-env", "--dump_env", ARG_NONE, NULL,
         "print the environment (secrets redacted) from the launcher's rank 0 first"),
    FLAG(OPT_CHECK_INPUTS, "--check-inputs", "--check_inputs", ARG_NONE, NULL,
         "with --dry-run: also require the launch inputs (data, checkpoints, tokenizer files)"),
    FLAG(OPT_DUMP_SAMPLES, "--dump-samples", "--dump_samples", ARG_REQUIRED, "N",
         "print the first N training samples (documents, tokens) of the resolved config"),

    /* The convenience flags of Megatron-Bridge's runner, with both of its spellings. */
    CONV("-tp", "--tensor_model_parallel_size", "N", "model.tensor_model_parallel_size", NULL, false),
    CONV("-pp", "--pipeline_model_parallel_size", "N", "model.pipeline_model_parallel_size", NULL, false),
    CONV("-cp", "--context_parallel_size", "N", "model.context_parallel_size", NULL, false),
    CONV("-vp", "--virtual_pipeline_model_parallel_size", "N",
         "model.virtual_pipeline_model_parallel_size", NULL, false),
    CONV("-ep", "--expert_model_parallel_size", "N", "model.expert_model_parallel_size", NULL, false),
    CONV("-etp", "--expert_tensor_parallel_size", "N", "model.expert_tensor_parallel_size", NULL, false),
    CONV("-gb", "--global_batch_size", "N", "train.global_batch_size", NULL, false),
    CONV("-mb", "--micro_batch_size", "N", "train.micro_batch_size", NULL, false),
    CONV("-sl", "--seq_length", "N", "dataset.seq_length", "model.seq_length", false),
    CONV("-ms", "--max_steps", "N", "train.train_iters", NULL, false),
    CONV("--lr", NULL, "X", "optimizer.lr", NULL, false),
    CONV("--min_lr", "--min-lr", "X", "optimizer.min_lr", NULL, false),
    CONV("--warmup_iters", "--warmup-iters", "N", "scheduler.lr_warmup_iters", NULL, false),
    CONV("--save_dir", "--save-dir", "DIR", "checkpoint.save", NULL, true),
    CONV("--load_dir", "--load-dir", "DIR", "checkpoint.load", NULL, true),
    CONV("--save_interval", "--save-interval", "N", "checkpoint.save_interval", NULL, false),
    CONV("--pretrained_checkpoint", "--pretrained-checkpoint", "DIR",
         "checkpoint.pretrained_checkpoint", NULL, true),
};
// clang-format on
#undef FLAG
#undef CONV
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static tr_origin argv_origin(int i) {
    tr_origin o = tr_origin_make(TR_ORIGIN_CLI, NULL);
    o.argi = i;
    return o;
}

static const cli_opt *find_opt(const char *name) {
    for (int i = 0; i < N_OPTS; i++)
        for (int k = 0; k < 3 && OPTS[i].spell[k]; k++)
            if (strcmp(OPTS[i].spell[k], name) == 0) return &OPTS[i];
    return NULL;
}

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 1000;
    int prev[64], cur[64];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

/* The spelling closest to a mistyped flag, or NULL when nothing is close. */
static const char *suggest_flag(const char *name) {
    const char *best = NULL;
    int best_d = (int)strlen(name) / 3 + 1;
    if (best_d < 2) best_d = 2;
    for (int i = 0; i < N_OPTS; i++)
        for (int k = 0; k < 3 && OPTS[i].spell[k]; k++) {
            int dist = edit_distance(name, OPTS[i].spell[k]);
            if (dist <= best_d && (!best || dist < best_d)) {
                best = OPTS[i].spell[k];
                best_d = dist;
            }
        }
    return best;
}

static void report_unknown_flag(tr_diags *d, const char *flag, int i) {
    tr_origin o = argv_origin(i);
    char hint[256];
    const char *bare = flag;
    while (*bare == '-') bare++;
    const char *suggestion = suggest_flag(flag);
    if (strchr(bare, '.'))
        snprintf(hint, sizeof hint, "config keys are overrides without dashes: %s", bare);
    else if (suggestion)
        snprintf(hint, sizeof hint, "did you mean %s? (run_recipe --help lists every flag)",
                 suggestion);
    else
        snprintf(hint, sizeof hint, "run_recipe --help lists every flag");
    tr_diag_add(d, TR_SEV_ERROR, "cli.unknown_flag", &o, NULL, hint, "unknown option '%s'", flag);
}

static bool parse_positive(const char *s, int *out) {
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1 << 24) return false;
    *out = (int)v;
    return true;
}

static tr_status push_str(const char ***arr, int *n, const char *item) {
    const char **grown = realloc((void *)*arr, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) return TR_ERR_NOMEM;
    grown[(*n)++] = item;
    *arr = grown;
    return TR_OK;
}

/* Overrides are collected in two lists and joined at the end: convenience flags first. */
typedef struct override_list {
    char **tok;
    int *argi;
    int n;
} override_list;

static tr_status push_override(override_list *l, char *token, int argi) {
    if (!token) return TR_ERR_NOMEM;
    char **tok = realloc(l->tok, (size_t)(l->n + 1) * sizeof *tok);
    if (!tok) {
        free(token);
        return TR_ERR_NOMEM;
    }
    l->tok = tok;
    int *ai = realloc(l->argi, (size_t)(l->n + 1) * sizeof *ai);
    if (!ai) {
        free(token);
        return TR_ERR_NOMEM;
    }
    l->argi = ai;
    l->tok[l->n] = token;
    l->argi[l->n++] = argi;
    return TR_OK;
}

/* key=value, the value double-quoted for string keys (as Megatron-Bridge's runner does), so a
 * path that reads as null, a number or a list still arrives as that path. */
static char *make_override(const char *key, const char *value, bool quote) {
    size_t cap = strlen(key) + 2 * strlen(value) + 4;
    char *s = malloc(cap);
    if (!s) return NULL;
    char *p = s + sprintf(s, "%s=", key);
    if (quote) *p++ = '"';
    for (const char *v = value; *v; v++) {
        if (quote && (*v == '"' || *v == '\\')) *p++ = '\\';
        *p++ = *v;
    }
    if (quote) *p++ = '"';
    *p = '\0';
    return s;
}

static bool looks_like_override(const char *a) {
    return strchr(a, '=') != NULL || a[0] == '~';
}

static bool is_yaml_path(const char *a) {
    size_t n = strlen(a);
    return (n > 5 && strcmp(a + n - 5, ".yaml") == 0) || (n > 4 && strcmp(a + n - 4, ".yml") == 0);
}

static tr_status parse_world_sizes(const char *s, tr_cli *cli, tr_diags *d, int i) {
    char *copy = strdup(s);
    if (!copy) return TR_ERR_NOMEM;
    char *save = NULL;
    tr_status st = TR_OK;
    for (char *t = strtok_r(copy, ",", &save); t && st == TR_OK; t = strtok_r(NULL, ",", &save)) {
        int v;
        if (!parse_positive(t, &v)) {
            tr_origin o = argv_origin(i);
            tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL,
                        "give positive integers separated by commas, e.g. --world-sizes 8,16,64",
                        "--world-sizes: '%s' is not a positive integer", t);
            continue;
        }
        int *grown = realloc(cli->world_sizes, (size_t)(cli->n_world_sizes + 1) * sizeof *grown);
        if (!grown)
            st = TR_ERR_NOMEM;
        else {
            grown[cli->n_world_sizes++] = v;
            cli->world_sizes = grown;
        }
    }
    free(copy);
    return st;
}

static tr_status apply_opt(const cli_opt *opt, const char *flag, const char *value, int i,
                           tr_cli *cli, override_list *conv, tr_diags *d) {
    tr_origin o = argv_origin(i);
    switch (opt->id) {
    case OPT_RECIPE:
        if (cli->recipe && strcmp(cli->recipe, value) != 0)
            tr_diag_add(d, TR_SEV_ERROR, "cli.conflict", &o, NULL,
                        "give one recipe; layer further settings with --config-file or key=value",
                        "--recipe given twice ('%s' and '%s')", cli->recipe, value);
        cli->recipe = value;
        return TR_OK;
    case OPT_CONFIG_FILE:
        return push_str(&cli->config_files, &cli->n_config_files, value);
    case OPT_HF_MODEL:
        cli->hf_model = value;
        return TR_OK;
    case OPT_DRY_RUN:
        cli->dry_run = true;
        return TR_OK;
    case OPT_PRINT_CONFIG:
        cli->print_config = true;
        return TR_OK;
    case OPT_PRINT_GROUPS:
        cli->print_groups = true;
        return TR_OK;
    case OPT_PRINT_SCHEDULE:
        cli->print_schedule = true;
        return TR_OK;
    case OPT_LIST_RECIPES:
        cli->list_recipes = true;
        return TR_OK;
    case OPT_DESCRIBE_RECIPE:
        cli->describe_recipe = value;
        return TR_OK;
    case OPT_HELP_CONFIG:
        cli->help_config = true;
        cli->help_config_topic = value;
        return TR_OK;
    case OPT_EXPLAIN:
        return push_str(&cli->explain, &cli->n_explain, value);
    case OPT_PLAN:
        cli->plan = true;
        return TR_OK;
    case OPT_GPU:
        cli->gpu = value;
        return TR_OK;
    case OPT_SEARCH_LAYOUTS:
        cli->search_layouts = true;
        return TR_OK;
    case OPT_JSON:
        cli->json = true;
        return TR_OK;
    case OPT_TOP:
    case OPT_WORLD_SIZE:
    case OPT_GPUS_PER_NODE: {
        int v;
        if (!parse_positive(value, &v)) {
            tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL, "give a positive integer",
                        "%s: '%s' is not a positive integer", flag, value);
            return TR_OK;
        }
        if (opt->id == OPT_TOP)
            cli->top = v;
        else if (opt->id == OPT_WORLD_SIZE)
            cli->world_size = v;
        else
            cli->gpus_per_node = v;
        return TR_OK;
    }
    case OPT_STRICT:
        cli->strict = true;
        return TR_OK;
    case OPT_CONFIG_ONLY:
        cli->config_only = true;
        return TR_OK;
    case OPT_DIAG_FORMAT:
        if (strcmp(value, "text") == 0)
            cli->diag_format = TR_CLI_DIAG_TEXT;
        else if (strcmp(value, "json") == 0)
            cli->diag_format = TR_CLI_DIAG_JSON;
        else
            tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL, "use text or json",
                        "--diagnostics-format: unknown format '%s'", value);
        return TR_OK;
    case OPT_VALIDATE_ALL:
        cli->validate_all = true;
        return TR_OK;
    case OPT_WORLD_SIZES:
        return parse_world_sizes(value, cli, d, i);
    case OPT_VERSION:
        cli->version = true;
        return TR_OK;
    case OPT_HELP:
        cli->help = true;
        return TR_OK;
    case OPT_MODEL:
        cli->model = value;
        cli->model_argi = i;
        return TR_OK;
    case OPT_MODE:
        cli->mode = value;
        cli->mode_argi = i;
        return TR_OK;
    case OPT_DATASET:
        cli->dataset = value;
        cli->dataset_argi = i;
        return TR_OK;
    case OPT_DETERMINISTIC:
        cli->deterministic = true;
        cli->deterministic_argi = i;
        return TR_OK;
    case OPT_DUMP_ENV:
        cli->dump_env = true;
        return TR_OK;
    case OPT_CHECK_INPUTS:
        cli->check_inputs = true;
        return TR_OK;
    case OPT_DUMP_SAMPLES:
        if (!parse_positive(value, &cli->dump_samples))
            tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL, "give a positive integer",
                        "%s: '%s' is not a positive integer", flag, value);
        return TR_OK;
    case OPT_CONVENIENCE:
        TR_TRY(push_override(conv, make_override(opt->key, value, opt->string_value), i));
        if (opt->also_key)
            TR_TRY(push_override(conv, make_override(opt->also_key, value, opt->string_value), i));
        return TR_OK;
    }
    return TR_ERR_INTERNAL;
}

/* An optional argument is the next word when that word is neither a flag nor an override. */
static bool takes_optional(const char *next) {
    return next && next[0] != '-' && !looks_like_override(next);
}

static tr_status join_overrides(tr_cli *cli, override_list *conv, override_list *trail) {
    int n = conv->n + trail->n;
    if (n == 0) return TR_OK;
    cli->overrides = malloc((size_t)n * sizeof *cli->overrides);
    cli->override_argi = malloc((size_t)n * sizeof *cli->override_argi);
    if (!cli->overrides || !cli->override_argi) return TR_ERR_NOMEM;
    for (int k = 0; k < conv->n; k++) {
        cli->overrides[k] = conv->tok[k];
        cli->override_argi[k] = conv->argi[k];
    }
    for (int k = 0; k < trail->n; k++) {
        cli->overrides[conv->n + k] = trail->tok[k];
        cli->override_argi[conv->n + k] = trail->argi[k];
    }
    cli->n_overrides = n;
    conv->n = trail->n = 0; /* moved */
    return TR_OK;
}

static void free_list(override_list *l) {
    for (int k = 0; k < l->n; k++) free(l->tok[k]);
    free(l->tok);
    free(l->argi);
}

static tr_status parse_all(int argc, char **argv, tr_cli *cli, override_list *conv,
                           override_list *trail, tr_diags *d) {
    bool only_overrides = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        tr_origin o = argv_origin(i);
        if (!only_overrides && strcmp(a, "--") == 0) {
            only_overrides = true;
            continue;
        }
        if (!only_overrides && a[0] == '-' && a[1] != '\0') {
            char name[128];
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, a, len);
            name[len] = '\0';
            const cli_opt *opt = find_opt(name);
            if (!opt) {
                report_unknown_flag(d, name, i);
                /* Its value would only add a second, confusing error. */
                if (!strchr(a, '=') && i + 1 < argc && takes_optional(argv[i + 1])) i++;
                continue;
            }
            const char *value = eq ? eq + 1 : NULL;
            int at = i;
            if (opt->arg == ARG_NONE && value) {
                tr_diag_add(d, TR_SEV_ERROR, "cli.unexpected_value", &o, NULL, "drop the =value",
                            "%s takes no value", name);
                continue;
            }
            if (opt->arg == ARG_REQUIRED && !value) {
                if (i + 1 >= argc) {
                    tr_diag_add(d, TR_SEV_ERROR, "cli.missing_value", &o, NULL, NULL,
                                "%s needs a value (%s)", name, opt->metavar);
                    continue;
                }
                value = argv[++i];
            }
            if (opt->arg == ARG_OPTIONAL && !value && i + 1 < argc && takes_optional(argv[i + 1]))
                value = argv[++i];
            TR_TRY(apply_opt(opt, name, value, at, cli, conv, d));
            continue;
        }
        if (looks_like_override(a)) {
            TR_TRY(push_override(trail, strdup(a), i));
        } else if (cli->validate_all && is_yaml_path(a)) {
            TR_TRY(push_str(&cli->validate_files, &cli->n_validate_files, a));
        } else {
            tr_diag_add(d, TR_SEV_ERROR, "cli.expected_override", &o, NULL,
                        "overrides look like model.num_layers=4 (or +key=v, ++key=v, ~key); "
                        "flags start with '-'",
                        "expected an override KEY=VALUE, got '%s'", a);
        }
    }
    return TR_OK;
}

tr_status tr_cli_parse(int argc, char **argv, tr_cli *cli, tr_diags *d) {
    memset(cli, 0, sizeof *cli);
    override_list conv = {0}, trail = {0};
    tr_status s = parse_all(argc, argv, cli, &conv, &trail, d);
    if (s == TR_OK) s = join_overrides(cli, &conv, &trail);
    free_list(&conv);
    free_list(&trail);
    if (s == TR_OK) s = tr_cli_runner_select(cli, d);
    if (s == TR_OK && cli->check_inputs && !cli->dry_run) {
        tr_origin o = tr_origin_make(TR_ORIGIN_CLI, NULL);
        tr_diag_add(d, TR_SEV_ERROR, "cli.needs_dry_run", &o, NULL, "add --dry-run",
                    "--check-inputs only works together with --dry-run (a launch always checks)");
    }
    if (s == TR_OK && (cli->print_groups || cli->print_schedule) && !cli->dry_run) {
        tr_origin o = tr_origin_make(TR_ORIGIN_CLI, NULL);
        tr_diag_add(d, TR_SEV_ERROR, "cli.needs_dry_run", &o, NULL, "add --dry-run",
                    "%s only works together with --dry-run",
                    cli->print_groups ? "--print-groups" : "--print-schedule");
    }
    return s;
}

void tr_cli_free(tr_cli *cli) {
    for (int k = 0; k < cli->n_overrides; k++) free(cli->overrides[k]);
    free(cli->overrides);
    free(cli->override_argi);
    free(cli->config_files);
    free(cli->explain);
    free(cli->world_sizes);
    free(cli->validate_files);
    free(cli->recipe_owned);
    memset(cli, 0, sizeof *cli);
}

bool tr_cli_is_inspection(const tr_cli *cli) {
    return cli->dry_run || cli->plan || cli->search_layouts || cli->print_config ||
           cli->n_explain > 0 || cli->list_recipes || cli->describe_recipe || cli->help_config ||
           cli->validate_all || cli->version || cli->help || cli->dump_samples > 0;
}

void tr_cli_usage(FILE *out) {
    fputs("usage: run_recipe --recipe NAME [--config-file F.yaml]... [flags] [KEY=VALUE]...\n"
          "       run_recipe --model STEM --mode pretrain|sft|lora|dora [--dataset PRESET] ...\n"
          "       mpirun -np N run_recipe --recipe NAME ...   (srun --mpi=pmix: "
          "docs/launchers.md)\n\n"
          "Resolves a recipe, YAML files and overrides (recipe < files in order < convenience "
          "flags < KEY=VALUE),\nvalidates the result and runs it. Overrides: key=v (the key "
          "must exist), +key=v (only if null),\n++key=v (always), ~key (back to the recipe's "
          "value).\n\n",
          out);
    for (int pass = 0; pass < 2; pass++) {
        fputs(pass == 0 ? "options:\n"
                        : "\nconvenience flags (become overrides placed before "
                          "the KEY=VALUE ones):\n",
              out);
        for (int i = 0; i < N_OPTS; i++) {
            const cli_opt *o = &OPTS[i];
            if ((o->id == OPT_CONVENIENCE) != (pass == 1)) continue;
            char names[96];
            int n = snprintf(names, sizeof names, "%s", o->spell[0]);
            bool short_first = o->spell[0][1] != '-';
            if (o->spell[1] && (pass == 1 || short_first))
                n += snprintf(names + n, sizeof names - (size_t)n, ", %s", o->spell[1]);
            if (o->metavar) snprintf(names + n, sizeof names - (size_t)n, " %s", o->metavar);
            /* A long name gets its description on the next line, still aligned. */
            fprintf(out, "  %-44s%s", names,
                    strlen(names) < 44 ? " "
                                       : "\n"
                                         "                                               ");
            if (o->id == OPT_CONVENIENCE)
                fprintf(out, "%s%s%s\n", o->key, o->also_key ? " and " : "",
                        o->also_key ? o->also_key : "");
            else
                fprintf(out, "%s\n", o->help);
        }
    }
    fputs("\nexit codes: 0 ok, 1 internal or I/O failure, 2 configuration or usage error,\n"
          "            4 the loss became NaN/Inf, 128+N stopped cleanly on signal N.\n"
          "docs: docs/cli.md, docs/config-reference.md, docs/validation-rules.md\n",
          out);
}
