/* What the training loop refuses about parallel layouts: data, tensor, context or pipeline
 * parallelism without a communicator, each naming the key to change. (Parallel runs themselves are
 * checked on real ranks by tests/equiv.) */
#include <string.h>

#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/train/train.h"

static tr_status train_on_world(int world, const char **ov, int n, tr_diags *d) {
    tr_config c;
    tr_resolve_opts o = {.recipe = "llama_tiny_pretrain",
                         .overrides = ov,
                         .n_overrides = n,
                         .world = {world, world}};
    tr_diags_init(d);
    tr_status s = tr_resolve(&o, &c, d);
    tr_train_opts to = {0};
    tr_train_result r;
    if (s == TR_OK) s = tr_train_run(&c, &to, &r, d);
    tr_config_free(&c);
    return s;
}

static const tr_diag *find_key(const tr_diags *d, const char *id, const char *key) {
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->items[i].id, id) == 0 && d->items[i].keys && strstr(d->items[i].keys, key))
            return &d->items[i];
    return NULL;
}

static void test_dp_without_comm_refused(void) {
    tr_diags d;
    const char *ov[] = {"train.train_iters=1"};
    CHECK(train_on_world(2, ov, 1, &d) != TR_OK);
    CHECK(find_key(&d, "runtime.no_communicator", "derived.world_size") != NULL);
    tr_diags_free(&d);
    /* The same config on one rank trains. */
    CHECK_INT_EQ(train_on_world(1, ov, 1, &d), TR_OK);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_model_parallel_refused_by_key(void) {
    tr_diags d;
    const char *tp[] = {"train.train_iters=1", "model.tensor_model_parallel_size=2"};
    CHECK(train_on_world(2, tp, 2, &d) != TR_OK);
    CHECK(find_key(&d, "runtime.no_communicator", "derived.world_size") != NULL);
    tr_diags_free(&d);
    const char *cp[] = {"train.train_iters=1", "model.context_parallel_size=2"};
    CHECK(train_on_world(2, cp, 2, &d) != TR_OK);
    CHECK(find_key(&d, "runtime.no_communicator", "derived.world_size") != NULL);
    tr_diags_free(&d);
    const char *pp[] = {"train.train_iters=1", "model.pipeline_model_parallel_size=2"};
    CHECK(train_on_world(2, pp, 2, &d) != TR_OK);
    CHECK(find_key(&d, "runtime.no_communicator", "model.pipeline_model_parallel_size") != NULL);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_dp_without_comm_refused), TR_TEST(test_model_parallel_refused_by_key))
