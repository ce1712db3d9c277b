/* The training loop end to end on the tiny recipes: determinism, falling loss on mock and text
 * data, metrics JSONL, NaN/Inf detection, clean stop on SIGTERM, exit_interval, and
 * configurations the runtime must refuse. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/train/train.h"

static tr_status resolve(tr_config *c, tr_diags *d, const char *recipe, const char **ov, int n) {
    tr_resolve_opts o = {.recipe = recipe, .overrides = ov, .n_overrides = n, .world = {1, 1}};
    tr_diags_init(d);
    return tr_resolve(&o, c, d);
}

static tr_status train(const char *recipe, const char **ov, int n, tr_train_opts *o,
                       tr_train_result *r, tr_diags *d) {
    tr_config c;
    tr_status s = resolve(&c, d, recipe, ov, n);
    if (s == TR_OK) s = tr_train_run(&c, o, r, d);
    tr_config_free(&c);
    return s;
}

static void test_same_seed_same_losses_bitwise(void) {
    const char *ov[] = {"train.train_iters=5", "model.hidden_dropout=0.1",
                        "train.global_batch_size=4", "model.attention_dropout=0.1"};
    float a[5], b[5];
    for (int run = 0; run < 2; run++) {
        tr_train_opts o = {.losses = run ? b : a, .losses_cap = 5};
        tr_train_result r;
        tr_diags d;
        CHECK_INT_EQ(train("gpt_tiny_pretrain", ov, 4, &o, &r, &d), TR_OK);
        CHECK_INT_EQ(r.iterations, 5);
        tr_diags_free(&d);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* and a different seed really changes them */
    const char *ov2[] = {"train.train_iters=5", "model.hidden_dropout=0.1",
                         "train.global_batch_size=4", "model.attention_dropout=0.1", "rng.seed=7"};
    tr_train_opts o = {.losses = b, .losses_cap = 5};
    tr_train_result r;
    tr_diags d;
    CHECK_INT_EQ(train("gpt_tiny_pretrain", ov2, 5, &o, &r, &d), TR_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    tr_diags_free(&d);
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

/* llama_tiny on mock data (documents count up modulo the vocab: quickly learnable). */
static void test_loss_falls_and_metrics_written(void) {
    char metrics[] = "/tmp/trestle_metrics_XXXXXX";
    int fd = mkstemp(metrics);
    CHECK(fd >= 0);
    close(fd);
    const char *ov[] = {"train.train_iters=40",        "logger.log_interval=10",
                        "validation.eval_interval=20", "validation.eval_iters=1",
                        "train.global_batch_size=4",   "optimizer.lr=3e-3"};
    tr_train_opts o = {.metrics_path = metrics};
    tr_train_result r;
    tr_diags d;
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 6, &o, &r, &d), TR_OK);
    CHECK_INT_EQ(r.iterations, 40);
    CHECK_INT_EQ(r.consumed_samples, 40 * 4);
    CHECK(r.first_loss > 5.0); /* ~ln(256) at init */
    CHECK(r.last_loss < r.first_loss - 1.0);
    CHECK(isfinite(r.last_eval_loss));
    CHECK_INT_EQ(count_lines(metrics, "\"type\":\"train\""), 4);
    CHECK_INT_EQ(count_lines(metrics, "\"type\":\"eval\""), 2);
    CHECK_INT_EQ(count_lines(metrics, "\"tokens_per_s\":"), 4);
    remove(metrics);
    tr_diags_free(&d);
}

static void test_text_corpus_trains(void) {
    char path[] = "/tmp/trestle_text_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox jumps over the lazy dog. ");
    fclose(f);
    char data[64];
    snprintf(data, sizeof data, "dataset.data_path=%s", path);
    const char *ov[] = {"dataset.type=text", data, "train.train_iters=30",
                        "train.global_batch_size=4", "optimizer.lr=3e-3"};
    tr_train_opts o = {0};
    tr_train_result r;
    tr_diags d;
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 5, &o, &r, &d), TR_OK);
    CHECK(r.last_loss < r.first_loss - 1.0);
    tr_diags_free(&d);
    /* a file too small for one sample is a diagnostic naming the key */
    f = fopen(path, "w");
    fputs("tiny", f);
    fclose(f);
    CHECK(train("llama_tiny_pretrain", ov, 5, &o, &r, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "data.text_too_small") != NULL);
    tr_diags_free(&d);
    remove(path);
}

static void test_nan_loss_detected(void) {
    const char *ov[] = {"train.train_iters=6",   "optimizer.lr=1e30",
                        "optimizer.min_lr=0",    "scheduler.lr_warmup_iters=0",
                        "optimizer.clip_grad=0", "train.global_batch_size=2"};
    tr_train_opts o = {0};
    tr_train_result r;
    tr_diags d;
    CHECK(train("llama_tiny_pretrain", ov, 6, &o, &r, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "train.nan_loss") != NULL);
    CHECK(r.iterations < 6);
    tr_diags_free(&d);
    const char *ov2[] = {"train.train_iters=6",
                         "optimizer.lr=1e30",
                         "optimizer.min_lr=0",
                         "scheduler.lr_warmup_iters=0",
                         "optimizer.clip_grad=0",
                         "train.global_batch_size=2",
                         "rerun_state_machine.check_for_nan_in_loss=false"};
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov2, 7, &o, &r, &d), TR_OK);
    CHECK_INT_EQ(r.iterations, 6);
    CHECK(!isfinite(r.last_loss) || r.skipped_iterations > 0);
    tr_diags_free(&d);
}

static float signal_losses[4];

static void *send_sigterm(void *arg) {
    (void)arg;
    /* after iteration 1 the handler is certainly installed */
    while (signal_losses[0] == 0.0f) usleep(1000);
    kill(getpid(), SIGTERM);
    return NULL;
}

static void test_sigterm_finishes_iteration_and_stops(void) {
    char metrics[] = "/tmp/trestle_metrics_XXXXXX";
    int fd = mkstemp(metrics);
    CHECK(fd >= 0);
    close(fd);
    const char *ov[] = {"train.train_iters=1000000", "logger.log_interval=1000000"};
    memset(signal_losses, 0, sizeof signal_losses);
    tr_train_opts o = {
        .handle_signals = 1, .losses = signal_losses, .losses_cap = 4, .metrics_path = metrics};
    tr_train_result r;
    tr_diags d;
    pthread_t th;
    pthread_create(&th, NULL, send_sigterm, NULL);
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 2, &o, &r, &d), TR_OK);
    pthread_join(th, NULL);
    CHECK_INT_EQ(r.stop, TR_STOP_SIGNAL);
    CHECK_INT_EQ(r.signal, SIGTERM);
    CHECK(r.iterations >= 1 && r.iterations < 1000000);
    CHECK(isfinite(r.last_loss));
    /* the interrupted run still logged its last iteration */
    CHECK_INT_EQ(count_lines(metrics, "\"type\":\"train\""), 1);
    tr_diags_free(&d);
    remove(metrics);
    /* the previous handler is back */
    struct sigaction sa;
    sigaction(SIGTERM, NULL, &sa);
    CHECK(sa.sa_handler == SIG_DFL);
}

static void test_exit_interval_and_skipped_iterations(void) {
    const char *ov[] = {"train.train_iters=10", "train.exit_interval=3",
                        "train.iterations_to_skip=[2]"};
    tr_train_opts o = {0};
    tr_train_result r;
    tr_diags d;
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 3, &o, &r, &d), TR_OK);
    CHECK_INT_EQ(r.iterations, 3);
    CHECK_INT_EQ(r.stop, TR_STOP_EXIT_INTERVAL);
    CHECK_INT_EQ(r.skipped_iterations, 1);
    CHECK_INT_EQ(r.consumed_samples, 24); /* the skipped iteration's batch is consumed */
    tr_diags_free(&d);
}

static void test_unsupported_configs_refused(void) {
    tr_train_opts o = {0};
    tr_train_result r;
    tr_diags d;
    const char *ov[] = {"model.add_bias_linear=true"}; /* MoE layers have no biases yet */
    CHECK(train("moe_tiny_pretrain", ov, 1, &o, &r, &d) != TR_OK);
    const tr_diag *g = tr_diags_find(&d, "runtime.moe_bias");
    CHECK(g != NULL);
    tr_diags_free(&d);
}

/* Without masked labels every microbatch has the same token count, so the per-token loss (sum
 * over the global batch / its tokens) equals the mean of microbatch means. */
static void test_per_token_loss_matches_mean_without_masks(void) {
    float a[3], b[3];
    const char *ov[] = {"train.train_iters=3", "train.global_batch_size=4",
                        "model.calculate_per_token_loss=false"};
    for (int run = 0; run < 2; run++) {
        ov[2] =
            run ? "model.calculate_per_token_loss=true" : "model.calculate_per_token_loss=false";
        tr_train_opts o = {.losses = run ? b : a, .losses_cap = 3};
        tr_train_result r;
        tr_diags d;
        CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 3, &o, &r, &d), TR_OK);
        tr_diags_free(&d);
    }
    for (int i = 0; i < 3; i++) CHECK_CLOSE(a[i], b[i], 1e-5, 0);
}

static void test_eval_only_test_split_and_params_norm(void) {
    char metrics[] = "/tmp/trestle_metrics_XXXXXX";
    int fd = mkstemp(metrics);
    CHECK(fd >= 0);
    close(fd);
    const char *ov[] = {"validation.skip_train=true", "validation.test_mode=true",
                        "validation.eval_iters=1"};
    tr_train_opts o = {.metrics_path = metrics};
    tr_train_result r;
    tr_diags d;
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov, 3, &o, &r, &d), TR_OK);
    CHECK_INT_EQ(r.iterations, 0);
    CHECK_CLOSE(r.last_eval_loss, log(256.0), 0.05, 0); /* an untrained model is uniform */
    CHECK_INT_EQ(count_lines(metrics, "\"type\":\"eval\""), 1);
    CHECK_INT_EQ(count_lines(metrics, "\"type\":\"test\""), 1);
    tr_diags_free(&d);
    const char *ov2[] = {"train.train_iters=2", "logger.log_params_norm=true"};
    CHECK_INT_EQ(train("llama_tiny_pretrain", ov2, 2, &o, &r, &d), TR_OK);
    CHECK_INT_EQ(count_lines(metrics, "\"params_norm\":"), 1);
    tr_diags_free(&d);
    remove(metrics);
}

static void test_document_resets_refused(void) {
    const char *ov[] = {"dataset.reset_position_ids=true"};
    tr_train_opts o = {0};
    tr_train_result r;
    tr_diags d;
    CHECK(train("llama_tiny_pretrain", ov, 1, &o, &r, &d) != TR_OK);
    const tr_diag *g = tr_diags_find(&d, "runtime.document_resets");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->keys, "dataset.reset_position_ids");
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_per_token_loss_matches_mean_without_masks),
             TR_TEST(test_eval_only_test_split_and_params_norm),
             TR_TEST(test_document_resets_refused), TR_TEST(test_same_seed_same_losses_bitwise),
             TR_TEST(test_loss_falls_and_metrics_written), TR_TEST(test_text_corpus_trains),
             TR_TEST(test_nan_loss_detected), TR_TEST(test_sigterm_finishes_iteration_and_stops),
             TR_TEST(test_exit_interval_and_skipped_iterations),
             TR_TEST(test_unsupported_configs_refused))
