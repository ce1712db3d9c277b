/* See scripts/cli_runner.h. */
#include "scripts/cli_runner.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/registry.h"

extern char **environ;

static tr_origin flag_origin(int argi, const char *flag) {
    tr_origin o = tr_origin_make(TR_ORIGIN_CLI, flag);
    o.argi = argi;
    return o;
}

static const char *const MODES[] = {"pretrain", "sft", "lora", "dora", NULL};

/* Megatron-Bridge names a recipe by task: pretrain, sft, or peft for both adapter kinds. */
static const char *mode_task(const char *mode) {
    if (!mode) return NULL;
    return strcmp(mode, "lora") == 0 || strcmp(mode, "dora") == 0 ? "peft" : mode;
}

/* The mode a conventional recipe name carries ("_pretrain_", "_sft_"/"_finetune_", "_dora_",
 * "_peft_"/"_lora_", in that order of precedence), or NULL. */
static const char *infer_mode(const char *name) {
    size_t n = strlen(name);
    char *s = malloc(n + 3);
    if (!s) return NULL;
    s[0] = '_';
    size_t k = 1;
    const char *b = name;
    while (*b == '_') b++;
    for (; *b; b++) s[k++] = (char)tolower((unsigned char)*b);
    while (k > 1 && s[k - 1] == '_') k--;
    s[k++] = '_';
    s[k] = '\0';
    const char *m = strstr(s, "_pretrain_")                         ? "pretrain"
                    : strstr(s, "_sft_") || strstr(s, "_finetune_") ? "sft"
                    : strstr(s, "_dora_")                           ? "dora"
                    : strstr(s, "_peft_") || strstr(s, "_lora_")    ? "lora"
                                                                    : NULL;
    free(s);
    return m;
}

typedef enum preset_kind { PRESET_GPT, PRESET_SFT, PRESET_HUB, PRESET_OTHER } preset_kind;

static const struct {
    const char *name;
    preset_kind kind;
} PRESETS[] = {
    {"mock", PRESET_GPT},
    {"megatron-indexed", PRESET_GPT},
    {"local-jsonl", PRESET_SFT},
    {"squad", PRESET_HUB},
    {"tulu3", PRESET_HUB},
    {"openmathinstruct2", PRESET_HUB},
    {"openmathinstruct2-thinking", PRESET_HUB},
    {"gsm8k", PRESET_HUB},
    {"energon", PRESET_OTHER},
    {"local-vlm", PRESET_OTHER},
    {"cord-v2", PRESET_OTHER},
    {"llava-video-178k", PRESET_OTHER},
    {"medpix", PRESET_OTHER},
    {"raven", PRESET_OTHER},
    {"rdr", PRESET_OTHER},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static int find_preset(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return i;
    return -1;
}

static tr_status check_dataset(const tr_cli *cli, tr_diags *d) {
    tr_origin o = flag_origin(cli->dataset_argi, NULL);
    int p = find_preset(cli->dataset);
    if (p < 0) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL,
                    "choose mock, megatron-indexed or local-jsonl",
                    "--dataset: unknown preset '%s'", cli->dataset);
        return TR_OK;
    }
    if (PRESETS[p].kind == PRESET_HUB) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.dataset_unavailable", &o, NULL,
                    "write the data as training.jsonl / validation.jsonl and use --dataset "
                    "local-jsonl dataset.dataset_root=DIR",
                    "--dataset %s downloads from the Hugging Face hub, which Trestle does not do",
                    cli->dataset);
        return TR_OK;
    }
    if (PRESETS[p].kind == PRESET_OTHER) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.dataset_unavailable", &o, NULL,
                    "Trestle trains text models: use mock, megatron-indexed or local-jsonl",
                    "--dataset %s is an Energon or vision-language source, which Trestle lacks",
                    cli->dataset);
        return TR_OK;
    }
    bool finetune = cli->mode && strcmp(cli->mode, "pretrain") != 0;
    if (cli->mode && finetune != (PRESETS[p].kind == PRESET_SFT))
        tr_diag_add(d, TR_SEV_ERROR, "cli.mode_conflict", &o, NULL,
                    finetune ? "fine-tuning reads --dataset local-jsonl"
                             : "pretraining reads --dataset mock or megatron-indexed",
                    "mode '%s' is incompatible with dataset '%s'", cli->mode, cli->dataset);
    return TR_OK;
}

static bool key_is(const char *tok, const char *key) {
    while (*tok == '+') tok++;
    size_t n = strlen(key);
    return strncmp(tok, key, n) == 0 && tok[n] == '=';
}

/* Megatron-Bridge's runner makes the model follow the dataset's sequence length after every
 * override; here a trailing dataset.seq_length=N (or megatron-core's dataset.sequence_length)
 * brings model.seq_length=N right after it unless the command line sets that after it. */
static tr_status sync_seq_length(tr_cli *cli) {
    int at = -1;
    for (int i = 0; i < cli->n_overrides; i++) {
        const char *t = cli->overrides[i];
        if (key_is(t, "dataset.seq_length") || key_is(t, "dataset.sequence_length")) at = i;
    }
    if (at < 0) return TR_OK;
    for (int i = at + 1; i < cli->n_overrides; i++)
        if (key_is(cli->overrides[i], "model.seq_length")) return TR_OK;
    const char *value = strchr(cli->overrides[at], '=') + 1;
    size_t n = strlen(value) + sizeof "model.seq_length=";
    char *tok = malloc(n);
    char **grown = realloc(cli->overrides, (size_t)(cli->n_overrides + 1) * sizeof *grown);
    if (grown) cli->overrides = grown;
    int *argi = realloc(cli->override_argi, (size_t)(cli->n_overrides + 1) * sizeof *argi);
    if (argi) cli->override_argi = argi;
    if (!tok || !grown || !argi) {
        free(tok);
        return TR_ERR_NOMEM;
    }
    snprintf(tok, n, "model.seq_length=%s", value);
    memmove(cli->overrides + at + 2, cli->overrides + at + 1,
            (size_t)(cli->n_overrides - at - 1) * sizeof *cli->overrides);
    memmove(cli->override_argi + at + 2, cli->override_argi + at + 1,
            (size_t)(cli->n_overrides - at - 1) * sizeof *cli->override_argi);
    cli->overrides[at + 1] = tok;
    cli->override_argi[at + 1] = cli->override_argi[at];
    cli->n_overrides++;
    return TR_OK;
}

tr_status tr_cli_runner_select(tr_cli *cli, tr_diags *d) {
    TR_TRY(sync_seq_length(cli));
    tr_origin o = flag_origin(cli->mode ? cli->mode_argi : cli->model_argi, NULL);
    if (cli->mode) {
        bool known = false;
        for (int i = 0; MODES[i]; i++) known |= strcmp(MODES[i], cli->mode) == 0;
        if (!known) {
            tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", &o, NULL,
                        "use pretrain, sft, lora or dora", "--mode: unknown mode '%s'", cli->mode);
            return TR_OK;
        }
    }
    if (cli->model) {
        if (cli->recipe) {
            tr_diag_add(d, TR_SEV_ERROR, "cli.conflict", &o, NULL, "give one of them",
                        "--model and --recipe select the recipe two ways");
            return TR_OK;
        }
        if (!cli->mode) {
            tr_diag_add(d, TR_SEV_ERROR, "cli.missing_value", &o, NULL,
                        "add --mode pretrain|sft|lora|dora",
                        "--model %s needs --mode to name a recipe", cli->model);
            return TR_OK;
        }
        size_t n = strlen(cli->model) + 16;
        cli->recipe_owned = malloc(n);
        if (!cli->recipe_owned) return TR_ERR_NOMEM;
        snprintf(cli->recipe_owned, n, "%s_%s", cli->model, mode_task(cli->mode));
        cli->recipe = cli->recipe_owned;
    } else if (cli->recipe) {
        const char *named = infer_mode(cli->recipe);
        if (!cli->mode) {
            cli->mode = named;
        } else if (named && strcmp(mode_task(named), mode_task(cli->mode)) != 0) {
            tr_diag_add(d, TR_SEV_ERROR, "cli.mode_conflict", &o, NULL,
                        "drop --mode, or name a recipe of that mode",
                        "mode '%s' is incompatible with recipe '%s'", cli->mode, cli->recipe);
            return TR_OK;
        }
    }
    if (cli->dataset) return check_dataset(cli, d);
    return TR_OK;
}

static tr_status set(tr_config *c, const char *key, const char *text, const tr_origin *o,
                     tr_diags *d) {
    return tr_config_set_text(c, key, text, o, d);
}

/* Megatron-Bridge builds a fresh dataset config for a preset: every dataset key goes back to
 * its default, then the preset's values, the sequence length the model's. */
static tr_status apply_preset(tr_config *c, const char *name, const tr_origin *o, tr_diags *d) {
    const tr_section_def *sec = NULL;
    for (int i = 0; i < tr_section_count; i++)
        if (strcmp(tr_sections[i].name, "dataset") == 0) sec = &tr_sections[i];
    if (!sec) return TR_ERR_INTERNAL;
    for (int i = sec->first; i < sec->first + sec->count; i++) {
        char now[512];
        tr_config_field_format(c, &tr_fields[i], now, sizeof now);
        tr_value v;
        TR_TRY(tr_value_scalar(&v, tr_fields[i].def, false, *o));
        tr_status s = TR_OK;
        if (strcmp(now, tr_fields[i].def) != 0) s = tr_config_set(c, &tr_fields[i], &v, o, d);
        tr_value_free(&v);
        TR_TRY(s);
    }
    char seq[32];
    snprintf(seq, sizeof seq, "%lld", (long long)c->model.seq_length);
    TR_TRY(set(c, "dataset.seq_length", seq, o, d));
    if (strcmp(name, "local-jsonl") == 0) {
        TR_TRY(set(c, "dataset.type", "sft", o, d));
        TR_TRY(set(c, "dataset.prompt_column", "input", o, d));
        TR_TRY(set(c, "dataset.completion_column", "output", o, d));
        TR_TRY(set(c, "dataset.dataloader_type", "batch", o, d));
        return set(c, "dataset.seed", "5678", o, d);
    }
    TR_TRY(set(c, "dataset.type", "gpt", o, d));
    TR_TRY(set(c, "dataset.random_seed", "1234", o, d));
    TR_TRY(set(c, "dataset.reset_attention_mask", "false", o, d));
    TR_TRY(set(c, "dataset.reset_position_ids", "false", o, d));
    TR_TRY(set(c, "dataset.eod_mask_loss", "false", o, d));
    TR_TRY(set(c, "dataset.split", "9999,8,2", o, d));
    return set(c, "dataset.dataloader_type", "single", o, d);
}

tr_status tr_cli_runner_apply(tr_config *c, const tr_cli *cli, tr_diags *d) {
    const tr_recipe *r = cli->recipe ? tr_recipe_find(cli->recipe) : NULL;
    if (r && cli->mode) {
        const char *rmode = tr_enum_train_mode.values[r->mode].name;
        if (strcmp(mode_task(rmode), mode_task(cli->mode)) != 0) {
            tr_origin o = flag_origin(cli->mode_argi, NULL);
            tr_diag_add(d, TR_SEV_ERROR, "cli.mode_conflict", &o, NULL,
                        "drop --mode, or name a recipe of that mode",
                        "mode '%s' is incompatible with recipe '%s' (a %s recipe)", cli->mode,
                        r->name, rmode);
            return TR_ERR_CONFIG;
        }
        /* Megatron-Bridge hands --mode lora|dora to the PEFT recipe as its scheme. */
        if (strcmp(mode_task(cli->mode), "peft") == 0 && strcmp(rmode, cli->mode) != 0) {
            tr_origin o = flag_origin(cli->mode_argi, "--mode");
            TR_TRY(set(c, "peft.scheme", cli->mode, &o, d));
        }
    }
    if (cli->dataset) {
        tr_origin o = flag_origin(cli->dataset_argi, "--dataset");
        TR_TRY(apply_preset(c, cli->dataset, &o, d));
    }
    if (cli->deterministic) {
        tr_origin o = flag_origin(cli->deterministic_argi, "--deterministic");
        TR_TRY(set(c, "model.deterministic_mode", "true", &o, d));
        TR_TRY(set(c, "model.cross_entropy_loss_fusion", "false", &o, d));
        if (c->comm_overlap.tp_comm_overlap >= 0)
            TR_TRY(set(c, "comm_overlap.tp_comm_overlap", "false", &o, d));
    }
    return TR_OK;
}

void tr_cli_runner_check(const tr_cli *cli, const tr_config *c, bool inputs, tr_diags *d) {
    if (!cli->dataset || strcmp(cli->dataset, "megatron-indexed") != 0) return;
    if (!c->dataset.data_path.null || !c->dataset.train_data_path.null) return;
    tr_origin o = flag_origin(cli->dataset_argi, "--dataset");
    tr_diag_add(d, inputs ? TR_SEV_ERROR : TR_SEV_NOTE,
                inputs ? "cli.dataset_needs_blend" : "launch.cli.dataset_needs_blend", &o,
                "dataset.blend",
                "add dataset.blend=[[\"PREFIX\"],null] (or dataset.data_path=PREFIX)",
                "--dataset megatron-indexed names no data: without a blend the run would be mock");
}

/* Names whose values are credentials: never printed. */
static bool is_secret(const char *name, size_t n) {
    static const char *const words[] = {"TOKEN",      "SECRET", "PASSWORD", "PASSWD", "KEY",
                                        "CREDENTIAL", "AUTH",   "COOKIE",   NULL};
    char up[256];
    if (n >= sizeof up) n = sizeof up - 1;
    for (size_t i = 0; i < n; i++) up[i] = (char)toupper((unsigned char)name[i]);
    up[n] = '\0';
    for (int i = 0; words[i]; i++)
        if (strstr(up, words[i])) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void tr_cli_dump_env(FILE *out) {
    static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                            "SLURM_PROCID", NULL};
    for (int i = 0; rank_vars[i]; i++) {
        const char *v = getenv(rank_vars[i]);
        if (v && *v && strcmp(v, "0") != 0) return;
        if (v && *v) break;
    }
    int n = 0;
    while (environ[n]) n++;
    const char **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) return;
    for (int i = 0; i < n; i++) sorted[i] = environ[i];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    fprintf(out, "environment (%d variables, secrets redacted):\n", n);
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(sorted[i], '=');
        size_t kn = eq ? (size_t)(eq - sorted[i]) : strlen(sorted[i]);
        if (is_secret(sorted[i], kn)) {
            fprintf(out, "  %.*s=[REDACTED]\n", (int)kn, sorted[i]);
            continue;
        }
        fputs("  ", out);
        for (const char *p = sorted[i]; *p; p++)
            if (*p == '\n')
                fputs("\\n", out);
            else if (*p == '\r')
                fputs("\\r", out);
            else
                fputc(*p, out);
        fputc('\n', out);
    }
    free(sorted);
}
