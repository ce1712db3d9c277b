/* trestle_ckpt export / import (scripts/ckpt_hf.h). The checkpoint side is the training loop's
 * own loading and saving (runtime/train/checkpointing.h) on a one-rank model, so any layout a
 * run saved reads back through the reader's resharding, and a LoRA checkpoint (adapters only)
 * gets its base from checkpoint.pretrained_checkpoint as a resumed run does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/validate.h"
#include "overrides/overrides.h"
#include "recipes/resolve.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/hf/hf.h"
#include "runtime/peft/lora.h"
#include "runtime/train/checkpointing.h"
#include "scripts/ckpt_hf.h"

typedef struct args {
    bool export_, adapter_only;
    const char *ckpt, *hf_out, *hf_in, *out, *hf_config, *recipe, *step;
    const char **overrides;
    int n_overrides;
    tr_st_dtype dtype;
} args;

static int usage(FILE *out) {
    fputs(
        "usage: trestle_ckpt export CKPT --hf-out DIR (--recipe NAME | --hf-config HF_DIR)\n"
        "                         [KEY=VALUE...] [--dtype fp32|bf16|fp16] [--step N]\n"
        "                         [--adapter-only]\n"
        "       trestle_ckpt import --hf HF_DIR --out CKPT [--recipe NAME] [KEY=VALUE...]\n"
        "export writes the checkpoint's model (saved under any layout; LoRA/DoRA adapters\n"
        "merged, the base from checkpoint.pretrained_checkpoint) as a Hugging Face directory;\n"
        "the model is the recipe's and/or HF_DIR/config.json's, with the overrides.\n"
        "--adapter-only writes a LoRA checkpoint's adapters alone in PEFT's format\n"
        "(DIR/adapter_config.json + adapter_model.safetensors) instead of the merged model.\n"
        "import writes a Hugging Face directory as a one-rank Trestle checkpoint (iteration 0).\n",
        out);
    return out == stdout ? 0 : 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static tr_status apply_hf(tr_config *c, void *dir, tr_diags *d) {
    return tr_hf_config_apply(c, dir, false, d);
}

/* The model section as run_recipe would build it, then one rank: the converter holds the whole
 * model; `extra` are the checkpoint settings it needs. */
static tr_status resolve(const args *a, const char *const *extra, int n_extra, tr_config *c,
                         tr_diags *d) {
    static const char *const one_rank[] = {"model.tensor_model_parallel_size=1",
                                           "model.pipeline_model_parallel_size=1",
                                           "model.virtual_pipeline_model_parallel_size=null",
                                           "model.context_parallel_size=1",
                                           "model.expert_model_parallel_size=1",
                                           "model.sequence_parallel=false"};
    int n1 = (int)(sizeof one_rank / sizeof one_rank[0]);
    int n = a->n_overrides + n1 + n_extra;
    const char **tok = malloc((size_t)n * sizeof *tok);
    if (!tok) return TR_ERR_NOMEM;
    for (int i = 0; i < a->n_overrides; i++) tok[i] = a->overrides[i];
    for (int i = 0; i < n1; i++) tok[a->n_overrides + i] = one_rank[i];
    for (int i = 0; i < n_extra; i++) tok[a->n_overrides + n1 + i] = extra[i];
    tr_world w = {1, 1};
    tr_status st;
    if (a->recipe) {
        tr_resolve_opts o = {.recipe = a->recipe,
                             .overrides = tok,
                             .n_overrides = n,
                             .world = w,
                             .skip_validate = true,
                             .after_recipe = a->hf_config ? apply_hf : NULL,
                             .after_recipe_ctx = (void *)(uintptr_t)a->hf_config};
        st = tr_resolve(&o, c, d);
    } else {
        st = tr_config_init(c, d);
        if (st == TR_OK) st = tr_hf_config_apply(c, a->hf_config, false, d);
        if (st == TR_OK) st = tr_overrides_apply_argv(c, tok, NULL, n, d);
        if (st == TR_OK) st = tr_config_finalize(c, &w, d);
    }
    free(tok);
    return st;
}

static tr_status build_model(const tr_config *c, tr_model *m, tr_diags *d) {
    tr_model_spec s;
    TR_TRY(tr_model_spec_from_config(c, &s, d));
    TR_TRY(tr_lora_spec_from_config(c, &s, d));
    tr_status st = tr_model_create(m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1);
    /* The converter skips validation (it trains nothing), so a model the runtime refuses to
     * build reaches here: say so rather than fail without a word. */
    if (st == TR_ERR_INVALID)
        tr_diag_add(d, TR_SEV_ERROR, "ckpt.model", NULL, NULL,
                    "run_recipe --dry-run with the same settings names the refusing rule (an MLA "
                    "model, for one, is built in fp32: add model.bf16=false "
                    "model.params_dtype=fp32)",
                    "the runtime cannot build this model");
    return st;
}

static void human(double b, char *buf, size_t cap) {
    snprintf(buf, cap,
             b >= 1 << 30   ? "%.2f GiB"
             : b >= 1 << 20 ? "%.2f MiB"
                            : "%.1f KiB",
             b / (b >= 1 << 30   ? 1 << 30
                  : b >= 1 << 20 ? 1 << 20
                                 : 1 << 10));
}

/* A checkpoint with adapters read into a model without them would export the base alone, the
 * fine-tune dropped: the run's peft settings are needed to merge them. */
static tr_status check_adapters(const args *a, const tr_config *c, tr_diags *d) {
    char *iter = NULL;
    int64_t it = 0;
    tr_ckpt_reader *r = NULL;
    TR_TRY(tr_ckpt_find(a->ckpt, a->step ? strtoll(a->step, NULL, 10) : -1, &iter, &it, d));
    tr_status st = tr_ckpt_open(iter, &r, d);
    free(iter);
    if (st != TR_OK) return st;
    const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
    for (int i = 0; st == TR_OK && i < m->n_tensors; i++)
        if (c->peft.scheme < 0 && tr_lora_is_adapter(m->tensors[i].name))
            st = tr_diag_add(d, TR_SEV_ERROR, "hf.export", NULL, "peft.scheme",
                             "give the run's peft settings (peft.scheme=lora peft.dim=... "
                             "peft.alpha=... checkpoint.pretrained_checkpoint=BASE) so that the "
                             "adapters are merged into the exported weights",
                             "%s holds LoRA adapters (%s) and the model has none: the export "
                             "would drop the fine-tune",
                             a->ckpt, m->tensors[i].name);
    tr_ckpt_close(r);
    return st;
}

/* The config of the checkpoint's model (the recipe / config.json and the overrides, one rank,
 * the checkpoint as checkpoint.load), its adapters checked against the peft settings. */
static tr_status resolve_export(const args *a, tr_config *c, tr_diags *d) {
    char load[4200], step[64];
    snprintf(load, sizeof load, "checkpoint.load=%s", a->ckpt);
    snprintf(step, sizeof step, "checkpoint.ckpt_step=%s", a->step ? a->step : "null");
    const char *extra[] = {load,
                           step,
                           "checkpoint.finetune=false",
                           "checkpoint.load_optim=false",
                           "checkpoint.load_rng=false",
                           "checkpoint.exit_on_missing_checkpoint=true",
                           "checkpoint.save=null",
                           "checkpoint.ckpt_format=trestle"};
    tr_status st = resolve(a, extra, (int)(sizeof extra / sizeof extra[0]), c, d);
    return st == TR_OK ? check_adapters(a, c, d) : st;
}

/* The checkpoint's model, whole on one rank, loaded through the training loop's own loading. */
static tr_status load_ckpt(const args *a, tr_config *c, tr_model *m, bool *have_model,
                           tr_diags *d) {
    tr_status st = resolve_export(a, c, d);
    if (st == TR_OK) st = build_model(c, m, d);
    *have_model = st == TR_OK;
    if (st == TR_OK) {
        fprintf(stderr, "%s: model of %lld parameters (%d layers, hidden %d%s)\n",
                a->export_ ? "export" : "load", (long long)m->n_params, m->full.num_layers,
                m->full.hidden,
                !m->full.lora_rank ? ""
                : a->adapter_only  ? ", adapters alone on export"
                : a->export_       ? ", adapters merged on export"
                                   : ", with LoRA adapters");
        tr_train_ckpt k;
        tr_train_ckpt_env env = {.c = c, .model = m, .log = stderr};
        st = tr_train_ckpt_setup(&k, &env, d);
        tr_train_ckpt_free(&k);
    }
    return st;
}

tr_status tr_ckpt_hf_load(const tr_ckpt_hf_src *src, tr_model *m, tr_diags *d) {
    args a = {.ckpt = src->ckpt,
              .recipe = src->recipe,
              .hf_config = src->hf_config,
              .step = src->step,
              .overrides = src->overrides,
              .n_overrides = src->n_overrides};
    tr_config c;
    bool have = false;
    tr_status st = load_ckpt(&a, &c, m, &have, d);
    if (st != TR_OK && have) tr_model_free(m);
    tr_config_free(&c);
    return st;
}

/* A progress line (tensors, GB, GB/s), redrawn in place: only on a terminal, so that logs and
 * the tests' captured stderr stay as they were. */
static void show_progress(void *ctx, int done, int n, uint64_t bytes, uint64_t total) {
    double dt = now() - *(const double *)ctx;
    fprintf(stderr, "\rexport: %d/%d tensors, %.2f/%.2f GB, %.2f GB/s%s", done, n,
            1e-9 * (double)bytes, 1e-9 * (double)total, dt > 0 ? 1e-9 * (double)bytes / dt : 0.0,
            done == n ? "\n" : "");
}

/* The streamed export's parameters: each read from the checkpoint into one buffer of the
 * largest parameter's size when the export asks for it. */
typedef struct stream_src {
    tr_ckpt_reader *r;
    float *buf;
} stream_src;

static tr_status stream_param(void *ctx, const tr_model *m, int i, const float **vals,
                              tr_diags *d) {
    stream_src *s = ctx;
    *vals = s->buf;
    return tr_train_ckpt_read_param(s->r, m, i, s->buf, d);
}

/* A model without adapters goes from the checkpoint's files to the Hugging Face file a tensor
 * at a time: the model is never built (its parameter list is enough), so memory is a few
 * tensors and each byte is read once. */
static tr_status export_streamed(const args *a, const tr_config *c, tr_diags *d) {
    tr_model_spec s;
    TR_TRY(tr_model_spec_from_config(c, &s, d));
    tr_model_part whole = {0, s.num_layers, true, true, 1};
    tr_model m;
    tr_status st = tr_model_shape(&m, &s, (tr_tp_shard){0, 1}, 1, &whole, 1);
    if (st == TR_OK)
        st = tr_model_param_list(&s, (tr_tp_shard){0, 1}, &whole, 1, &m.info, &m.n_info,
                                 &m.n_params);
    if (st == TR_ERR_INVALID) /* as build_model says it */
        tr_diag_add(d, TR_SEV_ERROR, "ckpt.model", NULL, NULL,
                    "run_recipe --dry-run with the same settings names the refusing rule",
                    "the runtime cannot build this model");
    char *iter = NULL;
    int64_t it = 0;
    stream_src src = {0};
    if (st == TR_OK)
        st = tr_ckpt_find(a->ckpt, a->step ? strtoll(a->step, NULL, 10) : -1, &iter, &it, d);
    if (st == TR_OK) st = tr_ckpt_open(iter, &src.r, d);
    if (st == TR_OK && c->checkpoint.verify_integrity) st = tr_ckpt_verify(src.r, NULL, d);
    int64_t largest = 1;
    for (int i = 0; st == TR_OK && i < m.n_info; i++)
        if (m.info[i].numel > largest) largest = m.info[i].numel;
    if (st == TR_OK && !(src.buf = malloc((size_t)largest * sizeof *src.buf))) st = TR_ERR_NOMEM;
    double t1 = now();
    if (st == TR_OK) {
        fprintf(stderr, "export: streaming %lld parameters (%d layers, hidden %d) from %s\n",
                (long long)m.n_params, s.num_layers, s.hidden, iter);
        st = tr_hf_export_stream(&m, stream_param, &src, a->hf_out, a->dtype,
                                 isatty(2) ? show_progress : NULL, &t1, d);
    }
    /* The line the training loop's load prints: logs name the iteration read either way. */
    if (st == TR_OK)
        fprintf(stderr,
                "checkpoint: loaded model, optimizer and position from %s (iteration %lld) "
                "without optimizer state\n",
                iter, (long long)it);
    if (st == TR_OK)
        fprintf(stderr, "export: wrote %s/config.json and model.safetensors in %.2f s\n", a->hf_out,
                now() - t1);
    free(src.buf);
    tr_ckpt_close(src.r);
    free(iter);
    free(m.info);
    return st;
}

static int run_export(const args *a, tr_diags *d) {
    tr_config c;
    if (!a->adapter_only) {
        tr_status st = resolve_export(a, &c, d);
        /* Adapters are merged into the whole model first: the loop's load below. */
        bool stream = st == TR_OK && c.peft.scheme < 0;
        if (st == TR_OK && stream) st = export_streamed(a, &c, d);
        if (st != TR_OK || stream) {
            tr_config_free(&c);
            return st == TR_OK ? 0 : 2;
        }
        tr_config_free(&c);
    }
    double t0 = now();
    tr_model m = {0};
    bool have_model = false;
    tr_status st = load_ckpt(a, &c, &m, &have_model, d);
    double t1 = now();
    if (st == TR_OK) {
        char h[32];
        human(4.0 * (double)m.n_params, h, sizeof h);
        fprintf(stderr, "export: read %s of weights in %.2f s\n", h, t1 - t0);
        st = a->adapter_only ? tr_hf_adapter_export(&m, a->hf_out,
                                                    c.checkpoint.pretrained_checkpoint, a->dtype, d)
                             : tr_hf_export_progress(&m, a->hf_out, a->dtype,
                                                     isatty(2) ? show_progress : NULL, &t1, d);
    }
    if (st == TR_OK)
        fprintf(stderr, "export: wrote %s/%s in %.2f s\n", a->hf_out,
                a->adapter_only ? "adapter_config.json and adapter_model.safetensors"
                                : "config.json and model.safetensors",
                now() - t1);
    if (have_model) tr_model_free(&m);
    tr_config_free(&c);
    return st == TR_OK ? 0 : 2;
}

static int run_import(const args *a, tr_diags *d) {
    char save[4200];
    snprintf(save, sizeof save, "checkpoint.save=%s", a->out);
    const char *extra[] = {save,
                           "checkpoint.save_optim=false",
                           "checkpoint.save_rng=false",
                           "checkpoint.async_save=false",
                           "checkpoint.load=null",
                           "checkpoint.pretrained_checkpoint=null",
                           "peft.scheme=null",
                           "checkpoint.ckpt_format=trestle"};
    args b = *a;
    b.hf_config = a->hf_in;
    tr_config c;
    double t0 = now();
    tr_status st = resolve(&b, extra, (int)(sizeof extra / sizeof extra[0]), &c, d);
    tr_model m = {0};
    bool have_model = false;
    if (st == TR_OK) st = build_model(&c, &m, d);
    have_model = st == TR_OK;
    tr_hf_weights w = {0};
    bool have_w = false;
    if (st == TR_OK) st = tr_hf_config_check(&c, a->hf_in, d);
    if (st == TR_OK) have_w = (st = tr_hf_weights_open(&w, a->hf_in, d)) == TR_OK;
    if (st == TR_OK) st = tr_hf_import(&m, &w, d);
    double t1 = now();
    if (st == TR_OK) {
        char h[32];
        human(4.0 * (double)m.n_params, h, sizeof h);
        fprintf(stderr, "import: read %lld parameters (%s) from %s in %.2f s\n",
                (long long)m.n_params, h, a->hf_in, t1 - t0);
        /* No optimizer state is saved (save_optim false): the save reads only its step, 0. */
        tr_optimizer opt = {0};
        tr_train_ckpt k;
        tr_train_ckpt_env env = {.c = &c, .model = &m, .opt = &opt, .log = stderr};
        st = tr_train_ckpt_setup(&k, &env, d);
        tr_train_ckpt_pos pos = {0};
        if (st == TR_OK) st = tr_train_ckpt_after_iteration(&k, &pos, true);
        if (st == TR_OK) st = tr_train_ckpt_finish(&k);
        tr_train_ckpt_free(&k);
    }
    if (st == TR_OK) fprintf(stderr, "import: wrote %s in %.2f s\n", a->out, now() - t1);
    if (have_w) tr_hf_weights_close(&w);
    if (have_model) tr_model_free(&m);
    tr_config_free(&c);
    return st == TR_OK ? 0 : 2;
}

int tr_ckpt_hf_main(int argc, char **argv) {
    args a = {.export_ = strcmp(argv[1], "export") == 0, .dtype = TR_ST_F32};
    a.overrides = calloc((size_t)argc, sizeof *a.overrides);
    if (!a.overrides) return 2;
    int rc = 0, first = 2;
    if (a.export_ && argc > 2 && argv[2][0] != '-') a.ckpt = argv[first++];
    for (int i = first; i < argc && rc == 0; i++) {
        const char *x = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = NULL;
        if (strcmp(x, "--recipe") == 0) slot = &a.recipe;
        if (a.export_ && strcmp(x, "--hf-out") == 0) slot = &a.hf_out;
        if (a.export_ && strcmp(x, "--hf-config") == 0) slot = &a.hf_config;
        if (a.export_ && strcmp(x, "--step") == 0) slot = &a.step;
        if (!a.export_ && strcmp(x, "--hf") == 0) slot = &a.hf_in;
        if (!a.export_ && strcmp(x, "--out") == 0) slot = &a.out;
        if (slot && v) {
            *slot = v;
            i++;
        } else if (a.export_ && strcmp(x, "--adapter-only") == 0) {
            a.adapter_only = true;
        } else if (a.export_ && strcmp(x, "--dtype") == 0 && v) {
            i++;
            if (strcmp(v, "fp32") == 0)
                a.dtype = TR_ST_F32;
            else if (strcmp(v, "bf16") == 0)
                a.dtype = TR_ST_BF16;
            else if (strcmp(v, "fp16") == 0)
                a.dtype = TR_ST_F16;
            else
                rc = 1;
        } else if (x[0] != '-' && strchr(x, '=')) {
            a.overrides[a.n_overrides++] = x;
        } else {
            fprintf(stderr, "trestle_ckpt: unexpected argument '%s'\n", x);
            rc = 1;
        }
    }
    if (rc == 0 && a.export_ && (!a.ckpt || !a.hf_out || (!a.recipe && !a.hf_config))) rc = 1;
    if (rc == 0 && !a.export_ && (!a.hf_in || !a.out)) rc = 1;
    if (rc == 1) {
        free(a.overrides);
        return usage(stderr);
    }
    tr_diags d;
    tr_diags_init(&d);
    rc = a.export_ ? run_export(&a, &d) : run_import(&a, &d);
    tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    free(a.overrides);
    return rc;
}
