/* Recipes and providers: every recipe fills and validates at its minimum world size, the
 * registry's recorded facts match what the recipes fill, key values match the numbers the
 * Megatron-Bridge reference states (hard-coded here from reference §6.3/§6.4, not from the code),
 * and origins tell provider values from recipe values. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "overrides/overrides.h"
#include "providers/provider.h"
#include "recipes/registry.h"
#include "recipes/resolve.h"
#include "tests/unit/harness.h"

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm(int64_t a, int64_t b) {
    return a / gcd(a, b) * b;
}

/* Resolve `name` (with its catalog overrides) for `world` GPUs in catalog mode. */
static tr_status resolve_at(const tr_recipe *r, int world, tr_config *c, tr_diags *d) {
    int n = 0;
    while (r->catalog_overrides && r->catalog_overrides[n]) n++;
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = r->name;
    o.overrides = r->catalog_overrides;
    o.n_overrides = n;
    o.world = (tr_world){world, world < 8 ? world : 8};
    o.validate.catalog_mode = true;
    return tr_resolve(&o, c, d);
}

static void print_errors(const char *name, const tr_diags *d) {
    if (!d->n_errors) return;
    fprintf(stderr, "  %s:\n", name);
    tr_diags_print_text(d, stderr, false);
}

static void test_every_recipe_validates_at_min_world(void) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    CHECK(n >= 40);
    for (int i = 0; i < n; i++) {
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        tr_status s = resolve_at(&r[i], r[i].min_world_size, &c, &d);
        if (s != TR_OK || d.n_errors) {
            print_errors(r[i].name, &d);
            CHECK(!"recipe does not validate at its minimum world size");
        }
        CHECK_INT_EQ(c.derived.mode, r[i].mode);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
}

/* Which recipes this runtime trains, from what each architecture uses (docs/runtime.md): the
 * dense Llama, Qwen3 (QK layernorm), GPT (with Megatron's attention dropout) and tiny recipes
 * train, and the tiny MoE recipes, Mixtral (PP, EP, TP with SP) and DeepSeek-V3 (MTP under PP
 * with an untied embedding); LoRA on an MoE model under EP is refused by its capability rule. */
static void test_capability_refusals_name_their_rule(void) {
    const struct {
        const char *recipe, *refused_by; /* NULL: trains */
    } want[] = {{"llama_tiny_pretrain", NULL},
                {"gpt_tiny_pretrain", NULL},
                {"llama32_1b_pretrain", NULL},
                {"moe_tiny_pretrain", NULL},
                {"qwen3_600m_pretrain", NULL},
                {"qwen3_8b_pretrain", NULL},
                {"mixtral_8x7b_pretrain", NULL},
                {"mixtral_8x22b_pretrain", NULL},
                {"gpt2_124m_pretrain", NULL},
                {"deepseek_v3_pretrain", NULL},
                {"qwen3_30b_a3b_lora", "runtime.moe_peft"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const tr_recipe *r = tr_recipe_find(want[i].recipe);
        CHECK(r != NULL);
        if (!r) continue;
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        /* A catalog check notes the refusal; the recipe stays a valid configuration. */
        CHECK_INT_EQ(resolve_at(r, r->min_world_size, &c, &d), TR_OK);
        int refusals = 0;
        for (int k = 0; k < d.n; k++) refusals += strncmp(d.items[k].id, "runtime.", 8) == 0;
        if (want[i].refused_by) {
            const tr_diag *g = tr_diags_find(&d, want[i].refused_by);
            CHECK(g != NULL);
            if (g) CHECK_INT_EQ(g->severity, TR_SEV_NOTE);
        } else {
            CHECK_INT_EQ(refusals, 0);
        }
        tr_config_free(&c);
        tr_diags_free(&d);
    }
}

/* min_world_size is written in the registry; it must be PP * lcm(TP*CP, EP*ETP) of what the
 * recipe actually fills (ETP unset means 1 with EP > 1, else TP). */
static void test_min_world_size_matches_layout(void) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    for (int i = 0; i < n; i++) {
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        CHECK(tr_config_init(&c, &d) == TR_OK);
        CHECK(r[i].fill(&c, &d) == TR_OK);
        const tr_model_config *m = &c.model;
        int64_t etp = m->expert_tensor_parallel_size;
        if (etp == TR_NULL_INT)
            etp = m->expert_model_parallel_size > 1 ? 1 : m->tensor_model_parallel_size;
        int64_t dense = m->tensor_model_parallel_size * m->context_parallel_size;
        int64_t expert = m->expert_model_parallel_size * etp;
        int64_t min = m->pipeline_model_parallel_size * lcm(dense, expert);
        if (min != r[i].min_world_size) fprintf(stderr, "  %s\n", r[i].name);
        CHECK_INT_EQ(r[i].min_world_size, min);
        CHECK_STR_EQ(c.recipe_name, r[i].name);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
}

static void test_names_unique_and_documented(void) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    for (int i = 0; i < n; i++) {
        CHECK(r[i].doc && r[i].doc[0]);
        for (int k = i + 1; k < n; k++) CHECK(strcmp(r[i].name, r[k].name) != 0);
        CHECK(tr_recipe_find(r[i].name) == &r[i]);
    }
}

/* Megatron-Bridge spellings (reference §5.2, §6.2). */
static void test_megatron_names(void) {
    const tr_recipe *lora = tr_recipe_find("llama32_1b_lora");
    CHECK(lora != NULL);
    CHECK(tr_recipe_find("llama32_1b_peft_config") == lora);
    CHECK(tr_recipe_find("llama32_1b_peft") == lora);
    CHECK(tr_recipe_find("llama32_1b_lora_config") == lora);
    CHECK(tr_recipe_find("llama32_1b_peft_1gpu_h100_bf16_config") == lora);
    CHECK(tr_recipe_find("llama3_8b_pretrain_2gpu_h100_bf16_config") ==
          tr_recipe_find("llama3_8b_pretrain"));
    CHECK(tr_recipe_find("llama3_70b_pretrain_32gpu_h100_bf16_config") ==
          tr_recipe_find("llama3_70b_pretrain"));
    CHECK(tr_recipe_find("deepseek_v3_pretrain_1024gpu_h100_bf16_config") ==
          tr_recipe_find("deepseek_v3_pretrain"));
    CHECK(tr_recipe_find("vanilla_gpt_pretrain_config") != NULL);
    /* The long-context and deterministic variants, by both names. */
    CHECK(tr_recipe_find("llama3_8b_pretrain_16gpu_h100_bf16_16k_config") ==
          tr_recipe_find("llama3_8b_16k_pretrain_config"));
    CHECK(tr_recipe_find("llama3_8b_128k_pretrain_config") != NULL);
    CHECK(tr_recipe_find("llama3_70b_pretrain_256gpu_h100_bf16_64k_config") ==
          tr_recipe_find("llama3_70b_64k_pretrain"));
    CHECK(tr_recipe_find("llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config") ==
          tr_recipe_find("llama31_405b_pretrain_deterministic_config"));
    /* The short name aliases one GPU count; another count is another recipe. */
    CHECK(tr_recipe_find("qwen3_8b_pretrain_16gpu_h100_bf16_config") ==
          tr_recipe_find("qwen3_8b_pretrain_config"));
    CHECK(tr_recipe_find("llama3_8b_pretrain_8gpu_h100_bf16_config") == NULL);
    CHECK(tr_recipe_find("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config") ==
          tr_recipe_find("qwen3_30b_a3b_8gpu_pretrain"));
    CHECK(tr_recipe_find("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config") !=
          tr_recipe_find("qwen3_30b_a3b_pretrain_config"));
    CHECK(tr_recipe_find("deepseek_v3_pretrain_config_32nodes") ==
          tr_recipe_find("deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config"));
    /* FP8/NVFP4 variants are refused by name, with their own diagnostic. */
    CHECK(tr_recipe_find("llama3_8b_pretrain_2gpu_h100_fp8cs_config") == NULL);
    CHECK(tr_recipe_is_low_precision("llama3_8b_pretrain_2gpu_h100_nvfp4_config"));
    CHECK(tr_recipe_is_low_precision("llama3_8b_low_precision_pretrain_config"));
    CHECK(!tr_recipe_is_low_precision("llama3_8b_pretrain_config"));
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_recipe_unknown("llama3_8b_low_precision_pretrain_config", NULL, &d),
                 TR_ERR_NOTFOUND);
    CHECK(tr_diags_find(&d, "recipe.low_precision") != NULL);
    CHECK(tr_diags_find(&d, "recipe.unknown") == NULL);
    tr_diags_free(&d);
    CHECK(tr_recipe_find("") == NULL);
    CHECK(tr_recipe_find(NULL) == NULL);
    CHECK(tr_recipe_find("llama32_1b") == NULL);
}

static void test_suggestions(void) {
    const tr_recipe *out[4];
    int n = tr_recipe_suggest("llama32_1b_pretrian", out, 4);
    CHECK(n >= 1);
    if (n >= 1) CHECK_STR_EQ(out[0]->name, "llama32_1b_pretrain");
    n = tr_recipe_suggest("llama32_1b", out, 4);
    CHECK_INT_EQ(n, 3);
    n = tr_recipe_suggest("zzzzzzzzzzzzzzzzzzzzzz", out, 4);
    CHECK_INT_EQ(n, 0);
}

/* Providers write the model section and nothing else. */
static void test_providers_touch_only_model(void) {
    int n;
    const tr_provider *p = tr_provider_list(&n);
    CHECK(n >= 20);
    for (int i = 0; i < n; i++) {
        tr_config a, b;
        tr_diags d;
        tr_diags_init(&d);
        CHECK(tr_config_init(&a, &d) == TR_OK);
        CHECK(tr_config_init(&b, &d) == TR_OK);
        CHECK(tr_provider_apply(&b, &p[i]) == TR_OK);
        for (int f = 0; f < tr_field_count; f++) {
            const tr_field *fd = &tr_fields[f];
            if (!strncmp(fd->path, "model.", 6)) {
                if (!tr_config_field_equal(&a, &b, fd)) {
                    CHECK(b.origin[f].kind == TR_ORIGIN_PROVIDER);
                    CHECK_STR_EQ(b.origin[f].name, p[i].name);
                }
                continue;
            }
            if (!tr_config_field_equal(&a, &b, fd))
                fprintf(stderr, "  %s: %s\n", p[i].name, fd->path);
            CHECK(tr_config_field_equal(&a, &b, fd));
        }
        tr_config_free(&a);
        tr_config_free(&b);
        tr_diags_free(&d);
    }
    CHECK(tr_provider_find("nope") == NULL);
}

/* --explain: provider values keep the provider origin, recipe values get the recipe origin. */
static void test_origins(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_recipe_find("llama32_1b_pretrain")->fill(&c, &d) == TR_OK);
    CHECK(c.origin[TR_FID_model_num_layers].kind == TR_ORIGIN_PROVIDER);
    CHECK_STR_EQ(c.origin[TR_FID_model_num_layers].name, "llama32_1b");
    CHECK(c.origin[TR_FID_train_global_batch_size].kind == TR_ORIGIN_RECIPE);
    CHECK_STR_EQ(c.origin[TR_FID_train_global_batch_size].name, "llama32_1b_pretrain");
    /* seq_length: provider (HF max positions 131072), then the recipe's 8192. */
    CHECK(c.origin[TR_FID_model_seq_length].kind == TR_ORIGIN_RECIPE);
    int seen = 0;
    for (int i = 0; i < c.n_history; i++) {
        if (c.history[i].field != TR_FID_model_seq_length) continue;
        if (seen == 0) {
            CHECK(c.history[i].origin.kind == TR_ORIGIN_PROVIDER);
            CHECK_STR_EQ(c.history[i].value_text, "131072");
        } else {
            CHECK(c.history[i].origin.kind == TR_ORIGIN_RECIPE);
            CHECK_STR_EQ(c.history[i].value_text, "8192");
        }
        seen++;
    }
    CHECK_INT_EQ(seen, 2);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK(tr_config_explain(&c, "model.num_layers", mem, &d) == TR_OK);
    fclose(mem);
    CHECK_CONTAINS(text, "provider llama32_1b");
    free(text);
    tr_config_free(&c);
    tr_diags_free(&d);
}

typedef struct resolved {
    tr_config c;
    tr_diags d;
} resolved;

static void resolve_named(const char *name, resolved *out) {
    tr_diags_init(&out->d);
    const tr_recipe *r = tr_recipe_find(name);
    CHECK(r != NULL);
    if (!r) {
        memset(&out->c, 0, sizeof out->c);
        return;
    }
    CHECK(resolve_at(r, r->min_world_size, &out->c, &out->d) == TR_OK);
    print_errors(name, &out->d);
}

static void done(resolved *x) {
    tr_config_free(&x->c);
    tr_diags_free(&x->d);
}

/* Reference §6.4a. */
static void test_ref_llama32_1b_pretrain(void) {
    resolved x;
    resolve_named("llama32_1b_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 16);
    CHECK_INT_EQ(c->model.hidden_size, 2048);
    CHECK_INT_EQ(c->model.ffn_hidden_size, 8192);
    CHECK_INT_EQ(c->model.num_attention_heads, 32);
    CHECK_INT_EQ(c->model.num_query_groups, 8);
    CHECK_INT_EQ(c->model.kv_channels, 64);
    CHECK(c->model.share_embeddings_and_output_weights);
    CHECK(c->model.rope_scaling);
    CHECK_CLOSE(c->model.rope_scaling_factor, 32, 0, 0);
    CHECK_CLOSE(c->model.rotary_base, 500000, 0, 0);
    CHECK(c->model.normalization == TR_NORM_RMSNORM);
    CHECK(c->model.gated_linear_unit && c->model.activation_func == TR_ACT_SILU);
    CHECK(!c->model.add_bias_linear);
    CHECK_INT_EQ(c->model.vocab_size, 32000);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 32000);
    CHECK_INT_EQ(c->model.seq_length, 8192);
    CHECK_INT_EQ(c->dataset.seq_length, 8192);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 1);
    CHECK_INT_EQ(c->model.pipeline_model_parallel_size, 1);
    CHECK_INT_EQ(c->model.virtual_pipeline_model_parallel_size, TR_NULL_INT);
    CHECK_INT_EQ(c->model.context_parallel_size, 1);
    CHECK(!c->model.sequence_parallel);
    CHECK_INT_EQ(c->train.train_iters, 1168251);
    CHECK_INT_EQ(c->train.global_batch_size, 512);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK_INT_EQ(c->validation.eval_interval, 2000);
    CHECK_INT_EQ(c->validation.eval_iters, 32);
    CHECK_CLOSE(c->optimizer.lr, 3e-4, 1e-12, 0);
    CHECK_CLOSE(c->optimizer.min_lr, 3e-5, 1e-12, 0);
    CHECK_CLOSE(c->optimizer.adam_beta2, 0.95, 0, 0);
    CHECK_CLOSE(c->optimizer.weight_decay, 0.1, 0, 0);
    CHECK_INT_EQ(c->scheduler.lr_warmup_iters, 2000);
    CHECK(c->scheduler.lr_decay_style == TR_SCHED_COSINE);
    CHECK(c->optimizer.use_distributed_optimizer);
    CHECK(c->model.bf16);
    CHECK(c->tokenizer.tokenizer_type == TR_TOKENIZER_NULL);
    CHECK_INT_EQ(c->dataset.num_workers, 8);
    CHECK_INT_EQ(c->checkpoint.save_interval, 500);
    done(&x);
}

/* Reference §6.4b. */
static void test_ref_llama32_1b_sft(void) {
    resolved x;
    resolve_named("llama32_1b_sft", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 16);
    CHECK_INT_EQ(c->model.vocab_size, 128256);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 128256);
    CHECK_INT_EQ(c->model.seq_length, 4096);
    CHECK_INT_EQ(c->dataset.seq_length, 4096);
    CHECK_INT_EQ(c->dataset.packed_sequence_size, 4096);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 1);
    CHECK_INT_EQ(c->train.train_iters, 1000);
    CHECK_INT_EQ(c->train.global_batch_size, 8);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK_INT_EQ(c->validation.eval_interval, 30);
    CHECK_CLOSE(c->optimizer.lr, 5e-6, 1e-12, 0);
    CHECK_CLOSE(c->optimizer.min_lr, 0.0, 0, 0);
    CHECK_CLOSE(c->optimizer.adam_beta2, 0.98, 0, 0);
    CHECK_INT_EQ(c->scheduler.lr_warmup_iters, 50);
    CHECK_INT_EQ(c->checkpoint.save_interval, 50);
    CHECK_INT_EQ(c->rng.seed, 5678);
    CHECK(c->derived.mode == TR_MODE_SFT);
    done(&x);
}

/* Reference §6.4c. */
static void test_ref_llama32_1b_lora(void) {
    resolved x;
    resolve_named("llama32_1b_lora", &x);
    const tr_config *c = &x.c;
    CHECK(c->peft.scheme == TR_PEFT_LORA);
    CHECK_INT_EQ(c->peft.dim, 32);
    CHECK_INT_EQ(c->peft.alpha, 32);
    CHECK_CLOSE(c->optimizer.lr, 1e-4, 1e-12, 0);
    CHECK(!c->optimizer.use_distributed_optimizer);
    CHECK(!c->ddp.use_distributed_optimizer);
    CHECK(!c->model.cross_entropy_loss_fusion);
    CHECK_INT_EQ(c->train.global_batch_size, 8);
    CHECK_INT_EQ(c->model.seq_length, 4096);
    CHECK(c->derived.mode == TR_MODE_LORA);
    done(&x);
}

/* Reference §6.4d. */
static void test_ref_llama3_8b(void) {
    resolved x;
    resolve_named("llama3_8b_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 32);
    CHECK_INT_EQ(c->model.hidden_size, 4096);
    CHECK_INT_EQ(c->model.ffn_hidden_size, 14336);
    CHECK_INT_EQ(c->model.num_attention_heads, 32);
    CHECK_INT_EQ(c->model.num_query_groups, 8);
    CHECK_INT_EQ(c->model.kv_channels, 128);
    CHECK(!c->model.share_embeddings_and_output_weights);
    CHECK(!c->model.rope_scaling);
    CHECK_INT_EQ(c->model.context_parallel_size, 2);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 1);
    CHECK(!c->model.sequence_parallel);
    CHECK_INT_EQ(c->model.seq_length, 8192);
    CHECK_INT_EQ(c->train.global_batch_size, 512);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK_CLOSE(c->optimizer.lr, 3e-4, 1e-12, 0);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 32000);
    done(&x);
}

/* Reference §6.4e. */
static void test_ref_llama3_70b(void) {
    resolved x;
    resolve_named("llama3_70b_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 80);
    CHECK_INT_EQ(c->model.hidden_size, 8192);
    CHECK_INT_EQ(c->model.ffn_hidden_size, 28672);
    CHECK_INT_EQ(c->model.num_attention_heads, 64);
    CHECK_INT_EQ(c->model.num_query_groups, 8);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 4);
    CHECK_INT_EQ(c->model.pipeline_model_parallel_size, 4);
    CHECK_INT_EQ(c->model.virtual_pipeline_model_parallel_size, 5);
    CHECK_INT_EQ(c->model.context_parallel_size, 2);
    CHECK(c->model.sequence_parallel);
    CHECK(c->model.pipeline_dtype == TR_DTYPE_BF16);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 32256);
    CHECK_INT_EQ(c->train.global_batch_size, 512);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK(c->model.tp_comm_overlap);
    /* DP = 1 at exactly 32 GPUs: no pipelined p2p batching with VPP. */
    CHECK(c->model.overlap_p2p_comm);
    CHECK(!c->model.batch_p2p_comm);
    done(&x);
}

/* Reference §6.4f (sizes from the catalog overrides: vanilla GPT leaves them to the user). */
static void test_ref_vanilla_gpt(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_recipe_find("vanilla_gpt_pretrain")->fill(&c, &d) == TR_OK);
    CHECK_INT_EQ(c.model.num_layers, 0);
    CHECK_INT_EQ(c.model.hidden_size, 0);
    CHECK(c.model.normalization == TR_NORM_LAYERNORM);
    CHECK(c.model.activation_func == TR_ACT_GELU);
    CHECK(c.model.position_embedding_type == TR_POSEMB_LEARNED_ABSOLUTE);
    CHECK(c.model.share_embeddings_and_output_weights);
    CHECK(c.model.add_bias_linear);
    CHECK_CLOSE(c.model.hidden_dropout, 0.1, 0, 0);
    CHECK_INT_EQ(c.model.seq_length, 1024);
    CHECK_INT_EQ(c.dataset.seq_length, 1024);
    CHECK_INT_EQ(c.train.train_iters, 300000);
    CHECK_INT_EQ(c.train.global_batch_size, 32);
    CHECK_INT_EQ(c.train.micro_batch_size, 2);
    CHECK_INT_EQ(c.validation.eval_interval, 500);
    CHECK_CLOSE(c.optimizer.lr, 3e-4, 1e-12, 0);
    CHECK_INT_EQ(c.scheduler.lr_warmup_iters, 500);
    CHECK(!c.ddp.overlap_grad_reduce);
    tr_config_free(&c);
    /* Without sizes the recipe does not validate: Trestle never guesses them. */
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = "vanilla_gpt_pretrain";
    o.world = (tr_world){1, 1};
    o.validate.catalog_mode = true;
    CHECK(tr_resolve(&o, &c, &d) == TR_ERR_CONFIG);
    CHECK(d.n_errors > 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* Reference §6.4g. */
static void test_ref_gpt3_175b(void) {
    resolved x;
    resolve_named("gpt3_175b_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 96);
    CHECK_INT_EQ(c->model.hidden_size, 12288);
    CHECK_INT_EQ(c->model.ffn_hidden_size, 49152);
    CHECK_INT_EQ(c->model.num_attention_heads, 96);
    CHECK_INT_EQ(c->model.num_query_groups, 96);
    CHECK_INT_EQ(c->model.kv_channels, 128);
    CHECK_INT_EQ(c->model.seq_length, 2048);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 4);
    CHECK_INT_EQ(c->model.pipeline_model_parallel_size, 8);
    CHECK_INT_EQ(c->model.virtual_pipeline_model_parallel_size, 6);
    CHECK_INT_EQ(c->model.context_parallel_size, 1);
    CHECK(c->model.sequence_parallel);
    CHECK(c->model.layernorm_zero_centered_gamma);
    CHECK_CLOSE(c->model.hidden_dropout, 0.0, 0, 0);
    CHECK_INT_EQ(c->train.global_batch_size, 2048);
    CHECK_INT_EQ(c->train.micro_batch_size, 2);
    CHECK_INT_EQ(c->train.train_iters, 1168251);
    CHECK_CLOSE(c->optimizer.lr, 0.9e-4, 1e-12, 0);
    CHECK_CLOSE(c->optimizer.min_lr, 0.9e-5, 1e-12, 0);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 32256);
    CHECK(!c->ddp.grad_reduce_in_fp32);
    CHECK(c->model.defer_embedding_wgrad_compute);
    CHECK_INT_EQ(c->model.wgrad_deferral_limit, 50);
    done(&x);
}

/* Reference §6.4h. */
static void test_ref_deepseek_v3(void) {
    resolved x;
    resolve_named("deepseek_v3_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 61);
    CHECK_INT_EQ(c->model.hidden_size, 7168);
    CHECK_INT_EQ(c->model.num_attention_heads, 128);
    CHECK_INT_EQ(c->model.num_moe_experts, 256);
    CHECK_INT_EQ(c->model.moe_router_topk, 8);
    CHECK_INT_EQ(c->model.moe_ffn_hidden_size, 2048);
    CHECK_INT_EQ(c->model.q_lora_rank, 1536);
    CHECK_INT_EQ(c->model.kv_lora_rank, 512);
    CHECK(c->model.multi_latent_attention);
    CHECK_INT_EQ(c->model.mtp_num_layers, 1);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 2);
    CHECK_INT_EQ(c->model.pipeline_model_parallel_size, 16);
    CHECK_INT_EQ(c->model.expert_model_parallel_size, 64);
    CHECK_INT_EQ(c->model.expert_tensor_parallel_size, 1);
    CHECK(c->model.sequence_parallel);
    CHECK_INT_EQ(c->model.seq_length, 4096);
    CHECK_INT_EQ(c->train.global_batch_size, 4096);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK_INT_EQ(c->train.train_iters, 1000000);
    CHECK_INT_EQ(c->derived.padded_vocab_size, 33280);
    CHECK_INT_EQ(c->derived.data_parallel_size, 32);
    CHECK_INT_EQ(c->derived.expert_data_parallel_size, 1);
    done(&x);
}

/* Reference §6.4i (the 16-GPU short alias). */
static void test_ref_qwen3_30b_a3b(void) {
    resolved x;
    resolve_named("qwen3_30b_a3b_pretrain", &x);
    const tr_config *c = &x.c;
    CHECK_INT_EQ(c->model.num_layers, 48);
    CHECK_INT_EQ(c->model.hidden_size, 2048);
    CHECK_INT_EQ(c->model.num_attention_heads, 32);
    CHECK_INT_EQ(c->model.num_query_groups, 4);
    CHECK_INT_EQ(c->model.kv_channels, 128);
    CHECK_INT_EQ(c->model.num_moe_experts, 128);
    CHECK_INT_EQ(c->model.moe_router_topk, 8);
    CHECK_INT_EQ(c->model.moe_ffn_hidden_size, 768);
    CHECK(c->model.qk_layernorm);
    CHECK_INT_EQ(c->model.vocab_size, 151936);
    CHECK_INT_EQ(c->model.tensor_model_parallel_size, 1);
    CHECK_INT_EQ(c->model.pipeline_model_parallel_size, 1);
    CHECK_INT_EQ(c->model.context_parallel_size, 1);
    CHECK_INT_EQ(c->model.expert_model_parallel_size, 16);
    CHECK_INT_EQ(c->model.expert_tensor_parallel_size, 1);
    CHECK(!c->model.sequence_parallel);
    CHECK_INT_EQ(c->model.seq_length, 4096);
    CHECK_INT_EQ(c->train.train_iters, 100);
    CHECK_INT_EQ(c->train.global_batch_size, 1024);
    CHECK_INT_EQ(c->train.micro_batch_size, 1);
    CHECK_CLOSE(c->optimizer.lr, 3e-4, 1e-12, 0);
    CHECK_INT_EQ(c->scheduler.lr_warmup_iters, 40);
    CHECK_INT_EQ(c->scheduler.lr_decay_iters, 100);
    CHECK(!c->ddp.grad_reduce_in_fp32);
    done(&x);
}

/* Reference §6.3 templates (_sft_common, _peft_common) as the Qwen3 0.6B recipes use them
 * (their GBS 8 and evaluation every 30 steps are qwen3_600m_sft_1gpu_h100_bf16_config's own). */
static void test_ref_templates(void) {
    resolved x;
    resolve_named("qwen3_600m_sft", &x);
    CHECK_INT_EQ(x.c.train.train_iters, 1000);
    CHECK_INT_EQ(x.c.train.global_batch_size, 8);
    CHECK_INT_EQ(x.c.train.micro_batch_size, 1);
    CHECK_INT_EQ(x.c.validation.eval_interval, 30);
    CHECK_INT_EQ(x.c.validation.eval_iters, 32);
    CHECK_CLOSE(x.c.optimizer.lr, 5e-6, 1e-12, 0);
    CHECK_INT_EQ(x.c.scheduler.lr_warmup_iters, 50);
    CHECK_INT_EQ(x.c.logger.log_interval, 1);
    CHECK_INT_EQ(x.c.rng.seed, 5678);
    CHECK_INT_EQ(x.c.model.seq_length, 2048);
    done(&x);
    resolve_named("qwen3_600m_lora", &x);
    CHECK_CLOSE(x.c.optimizer.lr, 1e-4, 1e-12, 0);
    CHECK(x.c.peft.scheme == TR_PEFT_LORA);
    done(&x);
    resolve_named("qwen3_600m_pretrain", &x);
    CHECK_INT_EQ(x.c.train.train_iters, 300000);
    CHECK_INT_EQ(x.c.train.global_batch_size, 32);
    CHECK_INT_EQ(x.c.train.micro_batch_size, 2);
    CHECK_INT_EQ(x.c.scheduler.lr_warmup_iters, 500);
    CHECK(x.c.train.manual_gc);
    CHECK_INT_EQ(x.c.train.manual_gc_interval, 100);
    done(&x);
}

/* The tiny models are what the brief asks for: byte vocabulary, 4 heads, GQA 2 groups for
 * llama_tiny, 4 experts top-2 for moe_tiny, fp32, and tens of thousands of parameters. */
static void test_tiny_models(void) {
    const char *names[] = {"gpt_tiny_pretrain", "llama_tiny_pretrain", "moe_tiny_pretrain",
                           "llama_tiny_sft", "llama_tiny_lora"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        resolved x;
        resolve_named(names[i], &x);
        CHECK_INT_EQ(x.c.derived.padded_vocab_size, 256);
        CHECK_INT_EQ(x.c.model.num_attention_heads, 4);
        CHECK(x.c.model.hidden_size >= 64 && x.c.model.hidden_size <= 128);
        CHECK(x.c.model.num_layers >= 2 && x.c.model.num_layers <= 4);
        CHECK(x.c.model.seq_length >= 64 && x.c.model.seq_length <= 128);
        CHECK(x.c.model.params_dtype == TR_DTYPE_FP32);
        CHECK(x.c.derived.num_params < 500000);
        done(&x);
    }
    resolved x;
    resolve_named("llama_tiny_pretrain", &x);
    CHECK_INT_EQ(x.c.model.num_query_groups, 2);
    done(&x);
    resolve_named("moe_tiny_pretrain", &x);
    CHECK_INT_EQ(x.c.model.num_moe_experts, 4);
    CHECK_INT_EQ(x.c.model.moe_router_topk, 2);
    done(&x);
}

/* Packed fine-tuning under CP pads every document to 2 x CP (and with SP to TP x CP) as finalize
 * derives it from the final layout: an override of CP or TP on an SFT recipe gets the padding
 * it needs (once a stale recipe value made model.context_parallel_size=2 fail), and a padding
 * the user sets stays theirs. */
static void test_packed_padding_follows_the_layout(void) {
    static const struct {
        const char *ov[4];
        int n, world;
        int64_t want;
    } cases[] = {
        /* the recipe: TP 2, sequence parallelism off (Megatron-Bridge's); turned on here where
         * it changes the multiple */
        {{"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"}, 2, 2, 2},
        {{"model.context_parallel_size=2"}, 1, 4, 4},
        {{"model.context_parallel_size=4"}, 1, 8, 8},
        {{"model.context_parallel_size=2", "model.tensor_model_parallel_size=4",
          "model.sequence_parallel=true"},
         3,
         8,
         8},
        {{"model.context_parallel_size=2", "model.tensor_model_parallel_size=1",
          "model.sequence_parallel=false"},
         3,
         2,
         4},
        {{"model.context_parallel_size=2", "dataset.pad_seq_to_mult=12"}, 2, 4, 12},
        {{"dataset.pad_seq_to_mult=6"}, 1, 2, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tr_diags d;
        tr_diags_init(&d);
        tr_config c;
        tr_resolve_opts o;
        memset(&o, 0, sizeof o);
        o.recipe = "llama3_8b_sft";
        /* Megatron-Bridge's condition for fine-tuning under CP (data.cp_sft_loss). */
        const char *ov[5] = {"model.calculate_per_token_loss=true"};
        for (int k = 0; k < cases[i].n; k++) ov[k + 1] = cases[i].ov[k];
        o.overrides = ov;
        o.n_overrides = cases[i].n + 1;
        o.world = (tr_world){cases[i].world, cases[i].world};
        o.validate.catalog_mode = true;
        CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
        print_errors("llama3_8b_sft", &d);
        CHECK_INT_EQ(c.dataset.pad_seq_to_mult, cases[i].want);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
}

TR_TEST_MAIN(TR_TEST(test_capability_refusals_name_their_rule),
             TR_TEST(test_every_recipe_validates_at_min_world),
             TR_TEST(test_min_world_size_matches_layout), TR_TEST(test_names_unique_and_documented),
             TR_TEST(test_megatron_names), TR_TEST(test_suggestions),
             TR_TEST(test_providers_touch_only_model), TR_TEST(test_origins),
             TR_TEST(test_ref_llama32_1b_pretrain), TR_TEST(test_ref_llama32_1b_sft),
             TR_TEST(test_ref_llama32_1b_lora), TR_TEST(test_ref_llama3_8b),
             TR_TEST(test_ref_llama3_70b), TR_TEST(test_ref_vanilla_gpt),
             TR_TEST(test_ref_gpt3_175b), TR_TEST(test_ref_deepseek_v3),
             TR_TEST(test_packed_padding_follows_the_layout), TR_TEST(test_ref_qwen3_30b_a3b),
             TR_TEST(test_ref_templates), TR_TEST(test_tiny_models))
