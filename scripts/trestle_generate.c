/* trestle_generate: text from a Hugging Face directory or a Trestle checkpoint, with a KV cache
 * (runtime/generate/generate.h), greedy or sampled (temperature, top-k, top-p), the prompt
 * encoded with the directory's tokenizer.json (or given as ids). The quick look at a
 * fine-tuned model, and the check that an imported model is the same model.
 *   trestle_generate --hf DIR [--prompt TEXT | --prompt-ids "1 2 3"] [options]
 *   trestle_generate --ckpt CKPT (--recipe NAME | --hf-config DIR) [KEY=VALUE...] [options]
 * Exit status: 0 ok, 1 usage error, 2 the model or the prompt could not be used. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/validate.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/generate/generate.h"
#include "runtime/hf/hf.h"
#include "runtime/peft/lora.h"
#include "scripts/ckpt_hf.h"

static int usage(FILE *out) {
    fputs("usage: trestle_generate (--hf DIR | --ckpt CKPT (--recipe NAME | --hf-config DIR)\n"
          "                         [--step N] [KEY=VALUE...])\n"
          "                        (--prompt TEXT | --prompt-ids \"ID ID ...\")\n"
          "                        [--max-new-tokens N] [--temperature T] [--top-k K]\n"
          "                        [--top-p P] [--seed S] [--tokenizer DIR] [--eos ID] [--ids]\n"
          "Greedy unless --temperature > 0. The tokenizer is DIR/tokenizer.json (--hf, or\n"
          "--tokenizer, or --hf-config's directory). --ids prints the generated ids, not text.\n",
          out);
    return out == stdout ? 0 : 1;
}

typedef struct opts {
    const char *hf, *ckpt, *recipe, *hf_config, *step, *prompt, *prompt_ids, *tok_dir;
    const char **overrides;
    int n_overrides, max_new, top_k, eos;
    float temperature, top_p;
    uint64_t seed;
    bool ids;
} opts;

static tr_status load_hf(const char *dir, tr_model *m, tr_diags *d) {
    tr_config c;
    TR_TRY(tr_config_init(&c, d));
    tr_world w = {1, 1};
    tr_model_spec s;
    tr_status st = tr_hf_config_apply(&c, dir, false, d);
    if (st == TR_OK) st = tr_config_finalize(&c, &w, d);
    if (st == TR_OK) st = tr_model_spec_from_config(&c, &s, d);
    tr_config_free(&c);
    TR_TRY(st);
    tr_hf_weights wt;
    TR_TRY(tr_hf_weights_open(&wt, dir, d));
    st = tr_model_create(m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1);
    if (st == TR_OK && (st = tr_hf_import(m, &wt, d)) != TR_OK) tr_model_free(m);
    tr_hf_weights_close(&wt);
    return st;
}

/* A LoRA model generates through its merged weights: the same forward, no adapter maths in
 * the cache's layers. */
static tr_status merge_adapters(tr_model *m) {
    if (!m->full.lora_rank) return TR_OK;
    tr_model_spec bs = m->full;
    bs.lora_rank = 0;
    bs.lora_targets = 0;
    bs.lora_dora = 0;
    bs.lora_dropout = 0.0f;
    tr_model base;
    TR_TRY(tr_model_create(&base, &bs, (tr_tp_shard){0, 1}, m->ops, 1));
    tr_status st = tr_lora_merge(m, &base);
    tr_model_free(m);
    if (st != TR_OK) {
        tr_model_free(&base);
        return st;
    }
    *m = base;
    return TR_OK;
}

static tr_status prompt_ids(const opts *o, const tr_tokenizer *tok, tr_token_ids *ids,
                            tr_diags *d) {
    if (o->prompt_ids) {
        const char *p = o->prompt_ids;
        char *end = NULL;
        for (long long v; (v = strtoll(p, &end, 10)), end != p; p = end)
            TR_TRY(tr_token_ids_push(ids, v));
        return *p == 0 || *p == ' ' ? TR_OK : TR_ERR_INVALID;
    }
    if (!tok)
        return tr_diag_add(d, TR_SEV_ERROR, "generate.tokenizer", NULL, NULL,
                           "give --prompt-ids, or a directory with tokenizer.json (--tokenizer)",
                           "a text prompt needs a tokenizer and none was found");
    return tr_tokenizer_encode(tok, o->prompt, strlen(o->prompt), ids, d);
}

static int run(const opts *o, tr_diags *d) {
    tr_model m = {0};
    tr_status st;
    if (o->hf) {
        st = load_hf(o->hf, &m, d);
    } else {
        tr_ckpt_hf_src src = {o->ckpt, o->recipe,    o->hf_config,
                              o->step, o->overrides, o->n_overrides};
        st = tr_ckpt_hf_load(&src, &m, d);
    }
    if (st != TR_OK) return 2;
    if ((st = merge_adapters(&m)) != TR_OK) return 2;
    const char *tdir = o->tok_dir ? o->tok_dir : o->hf ? o->hf : o->hf_config;
    tr_tokenizer *tok = NULL;
    char path[4096];
    struct stat sb;
    if (tdir) snprintf(path, sizeof path, "%s/tokenizer.json", tdir);
    if (tdir && stat(path, &sb) == 0 && tr_tokenizer_hf(tdir, &tok, d) != TR_OK)
        st = TR_ERR_INVALID;
    tr_token_ids ids = {0};
    if (st == TR_OK) st = prompt_ids(o, tok, &ids, d);
    if (st == TR_OK && ids.n == 0) st = TR_ERR_INVALID;
    tr_gen g = {0};
    bool have_gen = false;
    if (st == TR_OK) {
        int max_len = (int)ids.n + o->max_new;
        have_gen = (st = tr_gen_init(&g, &m, max_len)) == TR_OK;
        if (st != TR_OK)
            tr_diag_add(d, TR_SEV_ERROR, "generate.model", NULL, NULL,
                        "a learned position table bounds prompt + new tokens",
                        "the model cannot generate %d positions (%s)", max_len,
                        m.full.learned_pos ? "its position table is shorter" : "out of memory");
    }
    int32_t *buf = st == TR_OK ? malloc((size_t)ids.n * sizeof *buf) : NULL;
    for (size_t i = 0; buf && i < ids.n; i++) buf[i] = (int32_t)ids.ids[i];
    if (st == TR_OK) st = buf ? tr_gen_step(&g, buf, (int)ids.n) : TR_ERR_NOMEM;
    if (st != TR_OK && have_gen)
        tr_diag_add(d, TR_SEV_ERROR, "generate.prompt", NULL, NULL,
                    "every prompt id must be below the model's vocabulary size",
                    "the prompt could not be run");
    tr_sample_params sp = {o->temperature, o->top_k, o->top_p, o->seed};
    uint64_t rng = o->seed;
    int vocab = m.full.vocab_real ? m.full.vocab_real : m.full.vocab;
    int64_t eos = o->eos >= 0 ? o->eos : tok ? tr_tokenizer_eod(tok) : -1;
    if (st == TR_OK && !o->ids && tok) {
        char piece[256];
        int n = 0;
        for (size_t i = 0; i < ids.n; i++)
            if ((n = tr_tokenizer_token_bytes(tok, ids.ids[i], piece, sizeof piece)) > 0)
                fwrite(piece, 1, (size_t)n, stdout);
    }
    for (int t = 0; st == TR_OK && t < o->max_new; t++) {
        int32_t next = tr_gen_sample(g.logits, vocab, &sp, &rng);
        if (next < 0) {
            st = TR_ERR_NOMEM;
            break;
        }
        if (o->ids || !tok) {
            printf("%s%d", t ? " " : "", next);
        } else {
            char piece[256];
            int n = tr_tokenizer_token_bytes(tok, next, piece, sizeof piece);
            if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
        }
        fflush(stdout);
        if (next == eos) break;
        if (t + 1 < o->max_new) st = tr_gen_step(&g, &next, 1);
    }
    if (st == TR_OK) putchar('\n');
    free(buf);
    if (have_gen) tr_gen_free(&g);
    tr_token_ids_free(&ids);
    if (tok) tr_tokenizer_free(tok);
    tr_model_free(&m);
    return st == TR_OK ? 0 : 2;
}

int main(int argc, char **argv) {
    opts o = {.max_new = 32, .top_p = 1.0f, .eos = -1};
    o.overrides = calloc((size_t)argc + 1, sizeof *o.overrides);
    if (!o.overrides) return 2;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *x = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = NULL;
        const char *num = NULL;
        if (strcmp(x, "--help") == 0) {
            free(o.overrides);
            return usage(stdout);
        }
        if (strcmp(x, "--hf") == 0) slot = &o.hf;
        if (strcmp(x, "--ckpt") == 0) slot = &o.ckpt;
        if (strcmp(x, "--recipe") == 0) slot = &o.recipe;
        if (strcmp(x, "--hf-config") == 0) slot = &o.hf_config;
        if (strcmp(x, "--step") == 0) slot = &o.step;
        if (strcmp(x, "--prompt") == 0) slot = &o.prompt;
        if (strcmp(x, "--prompt-ids") == 0) slot = &o.prompt_ids;
        if (strcmp(x, "--tokenizer") == 0) slot = &o.tok_dir;
        if (strcmp(x, "--ids") == 0) {
            o.ids = true;
            continue;
        }
        if (strcmp(x, "--max-new-tokens") == 0 || strcmp(x, "--temperature") == 0 ||
            strcmp(x, "--top-k") == 0 || strcmp(x, "--top-p") == 0 || strcmp(x, "--seed") == 0 ||
            strcmp(x, "--eos") == 0)
            slot = &num;
        if (slot && v) {
            *slot = v;
            i++;
        } else if (x[0] != '-' && strchr(x, '=')) {
            o.overrides[o.n_overrides++] = x;
            continue;
        } else {
            fprintf(stderr, "trestle_generate: unexpected argument '%s'\n", x);
            rc = 1;
        }
        if (!num) continue;
        char *end = NULL;
        double val = strtod(num, &end);
        if (*end || end == num) rc = 1;
        if (strcmp(x, "--max-new-tokens") == 0) o.max_new = (int)val, rc |= val < 1;
        if (strcmp(x, "--temperature") == 0) o.temperature = (float)val, rc |= val < 0;
        if (strcmp(x, "--top-k") == 0) o.top_k = (int)val, rc |= val < 0;
        if (strcmp(x, "--top-p") == 0) o.top_p = (float)val, rc |= val <= 0 || val > 1;
        if (strcmp(x, "--seed") == 0) o.seed = (uint64_t)val;
        if (strcmp(x, "--eos") == 0) o.eos = (int)val;
    }
    if (rc == 0 && !o.hf == !o.ckpt) rc = 1;
    if (rc == 0 && o.ckpt && !o.recipe && !o.hf_config) rc = 1;
    if (rc == 0 && !o.prompt == !o.prompt_ids) rc = 1;
    if (rc == 0 && o.hf && o.n_overrides) rc = 1;
    if (rc) {
        free(o.overrides);
        return usage(stderr);
    }
    tr_diags d;
    tr_diags_init(&d);
    rc = run(&o, &d);
    tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    free(o.overrides);
    return rc;
}
