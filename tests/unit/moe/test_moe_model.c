/* The MoE layer inside the model, against outside oracles: an MoE model with one expert and top-1
 * routing (probability 1) is the dense model whose MLP is that expert, so its loss and every
 * gradient equal the dense model's (fp32 and bf16), and its router gets no gradient; a layer
 * that moe_layer_freq leaves dense keeps the dense MLP's tensors. And the MoE recipes train on
 * one rank: the loss falls, the balancing losses reach metrics.jsonl. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recipes/resolve.h"
#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "runtime/train/train.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/tiny_models.h"

enum { SEQ = 8, BATCH = 2, N = SEQ * BATCH };

static void batch(int32_t *ids, int32_t *tg, int vocab) {
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 7 + 3) % vocab;
        tg[i] = (i * 5 + 1) % vocab;
    }
    tg[3] = -1; /* an ignored target */
}

static void copy_param(tr_model *dst, const char *dn, const tr_model *src, const char *sn) {
    const tr_param_info *d = tr_model_find_param(dst, dn), *s = tr_model_find_param(src, sn);
    CHECK(d && s);
    if (!d || !s) return;
    CHECK_INT_EQ(d->numel, s->numel);
    memcpy(dst->params + d->offset, src->params + s->offset, (size_t)s->numel * sizeof(float));
}

static void one_expert_is_dense(int lowp) {
    tr_model_spec ds = tr_test_llama_spec(SEQ);
    ds.lowp = lowp;
    tr_model_spec ms = ds;
    ms.moe = (tr_moe_spec){.experts = 1, .topk = 1, .ffn = ds.ffn, .topk_scale = 1.0f};
    ms.moe.layers[0] = 2; /* layer 1 only: layer 0 stays dense */
    tr_model dense, moe;
    CHECK_INT_EQ(tr_model_create(&dense, &ds, (tr_tp_shard){0, 1}, tr_ops_cpu(), BATCH), TR_OK);
    CHECK_INT_EQ(tr_model_create(&moe, &ms, (tr_tp_shard){0, 1}, tr_ops_cpu(), BATCH), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&dense, 5), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&moe, 9), TR_OK);
    CHECK(tr_model_find_param(&moe, "decoder.layers.0.mlp.linear_fc1.weight") != NULL);
    CHECK(tr_model_find_param(&moe, "decoder.layers.1.mlp.linear_fc1.weight") == NULL);
    /* every tensor of the dense model, the MLP of layer 1 as the expert */
    for (int i = 0; i < dense.n_info; i++) {
        const char *n = dense.info[i].name;
        if (!strcmp(n, "decoder.layers.1.mlp.linear_fc1.weight"))
            copy_param(&moe, "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight",
                       &dense, n);
        else if (!strcmp(n, "decoder.layers.1.mlp.linear_fc2.weight"))
            copy_param(&moe, "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight",
                       &dense, n);
        else
            copy_param(&moe, n, &dense, n);
    }
    tr_model_params_changed(&dense);
    tr_model_params_changed(&moe);
    int32_t ids[N], tg[N];
    batch(ids, tg, ds.vocab);
    float ld, lm;
    CHECK_INT_EQ(tr_model_forward(&dense, ids, tg, &ld), TR_OK);
    CHECK_INT_EQ(tr_model_forward(&moe, ids, tg, &lm), TR_OK);
    CHECK_CLOSE(lm, ld, 1e-6, 0.0);
    memset(dense.grads, 0, (size_t)dense.n_params * sizeof(float));
    memset(moe.grads, 0, (size_t)moe.n_params * sizeof(float));
    CHECK_INT_EQ(tr_model_backward(&dense, 0.5f), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&moe, 0.5f), TR_OK);
    for (int i = 0; i < dense.n_info; i++) {
        const tr_param_info *d = &dense.info[i];
        char name[sizeof d->name];
        snprintf(name, sizeof name, "%s", d->name);
        if (!strcmp(d->name, "decoder.layers.1.mlp.linear_fc1.weight"))
            snprintf(name, sizeof name, "%s",
                     "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.weight");
        if (!strcmp(d->name, "decoder.layers.1.mlp.linear_fc2.weight"))
            snprintf(name, sizeof name, "%s",
                     "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight");
        const tr_param_info *m = tr_model_find_param(&moe, name);
        CHECK(m != NULL);
        if (!m) continue;
        double num = 0.0, den = 0.0;
        for (int64_t e = 0; e < d->numel; e++) {
            double a = dense.grads[d->offset + e], b = moe.grads[m->offset + e];
            num += (a - b) * (a - b);
            den += a * a;
        }
        if (!(num <= 1e-10 * den)) fprintf(stderr, "  %s: relative %.3g\n", name, sqrt(num / den));
        CHECK(num <= 1e-10 * den);
        CHECK(den > 0.0);
    }
    const tr_param_info *r = tr_model_find_param(&moe, "decoder.layers.1.mlp.router.weight");
    CHECK(r != NULL);
    for (int64_t e = 0; r && e < r->numel; e++) CHECK(moe.grads[r->offset + e] == 0.0f);
    tr_model_free(&dense);
    tr_model_free(&moe);
}

static void test_one_expert_is_dense_fp32(void) {
    one_expert_is_dense(0);
}
static void test_one_expert_is_dense_bf16(void) {
    one_expert_is_dense(TR_LOWP_BF16);
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void trains(const char *recipe, const char *extra, bool z, const char *mean) {
    char metrics[] = "/tmp/trestle_moe_metrics_XXXXXX";
    int fd = mkstemp(metrics);
    CHECK(fd >= 0);
    close(fd);
    const char *ov[] = {"train.train_iters=40",      "logger.log_interval=10",
                        "train.global_batch_size=4", "optimizer.lr=3e-3",
                        "validation.eval_iters=0",   extra};
    tr_resolve_opts o = {
        .recipe = recipe, .overrides = ov, .n_overrides = extra ? 6 : 5, .world = {1, 1}};
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    tr_train_opts to = {.metrics_path = metrics};
    tr_train_result r;
    CHECK_INT_EQ(tr_train_run(&c, &to, &r, &d), TR_OK);
    CHECK_INT_EQ(r.iterations, 40);
    if (!(r.last_loss < r.first_loss - 1.0))
        fprintf(stderr, "  %s: loss %g -> %g\n", recipe, r.first_loss, r.last_loss);
    CHECK(r.last_loss < r.first_loss - 1.0);
    CHECK_INT_EQ(count_lines(metrics, "\"load_balancing_loss\":1."), 4);
    CHECK_INT_EQ(count_lines(metrics, "\"z_loss\":"), z ? 4 : 0);
    /* tokens per expert over each interval of 10 iterations: 10 x 4 x 64 tokens x top-2 spread
     * over the experts (dropless), per MoE layer */
    CHECK_INT_EQ(count_lines(metrics, "\"moe_tokens_per_expert\":[{\"layer\":"), 4);
    if (mean) CHECK_INT_EQ(count_lines(metrics, mean), 4);
    remove(metrics);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_moe_tiny_trains(void) {
    trains("moe_tiny_pretrain", NULL, false, "\"mean\":1280,");
}
static void test_mixtral_tiny_trains(void) {
    trains("mixtral_tiny_pretrain", NULL, false, "\"mean\":640,");
}
static void test_qwen3_moe_tiny_trains(void) {
    trains("qwen3_moe_tiny_pretrain", NULL, true, "\"mean\":640,");
}
static void test_deepseek_tiny_trains(void) {
    trains("deepseek_tiny_pretrain", NULL, false, "\"mean\":640,");
}
/* bf16 with a capacity factor, and the per-token loss */
static void test_moe_tiny_bf16_capacity_trains(void) {
    trains("moe_tiny_pretrain", "mixed_precision.preset=bf16_mixed", false, NULL);
    trains("mixtral_tiny_pretrain", "model.moe_expert_capacity_factor=1.0", false, NULL);
    trains("moe_tiny_pretrain", "model.calculate_per_token_loss=true", false, NULL);
}

/* The MoE layer's buffers are host memory: a device the host cannot read is refused at launch
 * by name (a launch input, like the communicator), not a silent failure. */
static void test_device_refused(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_device *dev = NULL;
    CHECK_INT_EQ(tr_device_open(TR_DEVICE_CPU_STRICT, 0, 1, &d, &dev), TR_OK);
    const char *ov[] = {"train.train_iters=1"};
    tr_resolve_opts o = {
        .recipe = "moe_tiny_pretrain", .overrides = ov, .n_overrides = 1, .world = {1, 1}};
    tr_config c;
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    tr_train_opts to = {.device = dev};
    tr_train_result r;
    CHECK(tr_train_run(&c, &to, &r, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "runtime.moe_device") != NULL);
    tr_config_free(&c);
    tr_device_close(dev);
    tr_diags_free(&d);
}

/* Throughput counts what runs: an MoE layer's router and top-k experts in place of the MLP. */
static void test_flops(void) {
    tr_model_spec d = tr_test_llama_spec(SEQ), m = d;
    m.moe = (tr_moe_spec){.experts = 4, .topk = 2, .ffn = d.ffn / 2, .topk_scale = 1.0f};
    m.moe.layers[0] = 2;
    /* layer 1: the same MLP width in use (2 x ffn / 2) plus the router's 2 C E per token */
    double router = 2.0 * SEQ * d.hidden * 4;
    CHECK_CLOSE(tr_model_flops_per_seq(&m), tr_model_flops_per_seq(&d) + router, 1e-12, 0.0);
    m.moe.shared_ffn = 8;
    double shared = 2.0 * SEQ * 3.0 * d.hidden * 8;
    CHECK_CLOSE(tr_model_flops_per_seq(&m), tr_model_flops_per_seq(&d) + router + shared, 1e-12,
                0.0);
}

TR_TEST_MAIN(TR_TEST(test_flops), TR_TEST(test_device_refused),
             TR_TEST(test_one_expert_is_dense_fp32), TR_TEST(test_one_expert_is_dense_bf16),
             TR_TEST(test_moe_tiny_trains), TR_TEST(test_mixtral_tiny_trains),
             TR_TEST(test_qwen3_moe_tiny_trains), TR_TEST(test_deepseek_tiny_trains),
             TR_TEST(test_moe_tiny_bf16_capacity_trains))
