/* Values a recipe derived from another follow an override of that other in finalize(), a value
 * the user wrote is kept (and validate() judges it), finalize() names every value of the user's
 * it replaces, and --explain says what finalize() does to a field. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "overrides/overrides.h"
#include "recipes/resolve.h"
#include "tests/unit/harness.h"

typedef struct run {
    tr_config c;
    tr_diags d;
    tr_status s;
} run;

/* Resolve recipe with overrides at world size w; validate() too unless finalize_only. */
static void resolve(run *x, const char *recipe, int w, bool finalize_only,
                    const char *const *overrides, int n) {
    tr_diags_init(&x->d);
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = recipe;
    o.overrides = overrides;
    o.n_overrides = n;
    o.world = (tr_world){w, w < 8 ? w : 8};
    o.validate.catalog_mode = true;
    o.skip_validate = finalize_only;
    x->s = tr_resolve(&o, &x->c, &x->d);
}

static void done(run *x) {
    tr_config_free(&x->c);
    tr_diags_free(&x->d);
}

static void test_pad_follows_the_layout(void) {
    run x;
    /* The recipe packs to a multiple of 1 at CP 1; at CP 2 the packed sequence is cut in 4. */
    resolve(&x, "llama32_1b_sft", 2, true, NULL, 0);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 1);
    done(&x);
    const char *cp2[] = {"model.context_parallel_size=2"};
    resolve(&x, "llama32_1b_sft", 2, true, cp2, 1);
    CHECK_INT_EQ(x.s, TR_OK);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 4);
    CHECK(x.c.origin[TR_FID_dataset_pad_seq_to_mult].kind == TR_ORIGIN_DERIVED);
    done(&x);
    /* With SP at TP 2 and CP 2: lcm(2*CP, TP*CP) = 4; TP 4 CP 3 SP: lcm(6, 12) = 12. */
    const char *tp4cp3[] = {"model.tensor_model_parallel_size=4", "model.sequence_parallel=true",
                            "model.context_parallel_size=3"};
    resolve(&x, "llama32_1b_sft", 12, true, tp4cp3, 3);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 12);
    done(&x);
    /* A recipe's own multiple is kept when it fits and raised to a common multiple otherwise:
     * qwen3_8b_lora pads to 4; at CP 3 that becomes lcm(4, 6) = 12. */
    const char *q_cp3[] = {"model.context_parallel_size=3"};
    resolve(&x, "qwen3_8b_lora", 3, true, q_cp3, 1);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 12);
    done(&x);
    const char *q_tp2[] = {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"};
    resolve(&x, "qwen3_8b_lora", 2, true, q_tp2, 2);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 4);
    done(&x);
    /* A multiple the user writes is theirs: kept, and validate() rejects one that does not fit. */
    const char *mine[] = {"model.context_parallel_size=2", "dataset.pad_seq_to_mult=6"};
    resolve(&x, "llama32_1b_sft", 2, false, mine, 2);
    CHECK_INT_EQ(x.c.dataset.pad_seq_to_mult, 6);
    CHECK(x.s != TR_OK);
    const tr_diag *g = tr_diags_find(&x.d, "data.offline_packing");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "multiple of 4");
    done(&x);
}

static void test_sequence_lengths_follow_each_other(void) {
    run x;
    const char *ds[] = {"dataset.seq_length=2048"};
    resolve(&x, "llama32_1b_sft", 1, true, ds, 1);
    CHECK_INT_EQ(x.c.model.seq_length, 2048);
    CHECK_INT_EQ(x.c.dataset.packed_sequence_size, 2048);
    done(&x);
    const char *ms[] = {"model.seq_length=1024"};
    resolve(&x, "llama32_1b_sft", 1, true, ms, 1);
    CHECK_INT_EQ(x.c.dataset.seq_length, 1024);
    CHECK_INT_EQ(x.c.dataset.packed_sequence_size, 1024);
    done(&x);
    /* A packed size the user gives stays. */
    const char *both[] = {"model.seq_length=1024", "dataset.packed_sequence_size=4096"};
    resolve(&x, "llama32_1b_sft", 1, true, both, 2);
    CHECK_INT_EQ(x.c.dataset.packed_sequence_size, 4096);
    done(&x);
    /* Pretraining has no packing: only the two lengths move. */
    const char *pre[] = {"dataset.seq_length=4096"};
    resolve(&x, "llama32_1b_pretrain", 1, true, pre, 1);
    CHECK_INT_EQ(x.c.model.seq_length, 4096);
    CHECK_INT_EQ(x.c.dataset.packed_sequence_size, TR_NULL_INT);
    done(&x);
    /* Without overrides the recipe's values stand. */
    resolve(&x, "llama32_1b_sft", 1, true, NULL, 0);
    CHECK_INT_EQ(x.c.model.seq_length, 4096);
    CHECK_INT_EQ(x.c.dataset.packed_sequence_size, 4096);
    done(&x);
}

/* Sequence parallelism at TP 1 is a configuration error: finalize() keeps it and validate()
 * rejects it; --explain says exactly that. */
static void test_sequence_parallel_is_rejected_not_fixed(void) {
    run x;
    const char *sp[] = {"model.sequence_parallel=true"};
    resolve(&x, "llama32_1b_pretrain", 1, false, sp, 1);
    CHECK(x.c.model.sequence_parallel);
    CHECK(x.s != TR_OK);
    CHECK(tr_diags_find(&x.d, "parallel.sequence_parallel_needs_tp") != NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK_INT_EQ(tr_config_explain(&x.c, "model.sequence_parallel", mem, &x.d), TR_OK);
    fclose(mem);
    CHECK_CONTAINS(text, "validate() rejects");
    CHECK(strstr(text, "turned off") == NULL);
    free(text);
    done(&x);
}

/* finalize() replacing a value the user wrote says so, naming the key and the new value. */
static void test_replaced_user_values_are_named(void) {
    run x;
    const char *pw[] = {"dataset.num_workers=0", "dataset.persistent_workers=true"};
    resolve(&x, "llama32_1b_pretrain", 1, true, pw, 2);
    CHECK(!x.c.dataset.persistent_workers);
    const tr_diag *g = tr_diags_find(&x.d, "finalize.user_value_replaced");
    CHECK(g != NULL);
    if (g) {
        CHECK(g->severity == TR_SEV_WARNING);
        CHECK_CONTAINS(g->message, "dataset.persistent_workers=true is replaced by false");
    }
    done(&x);
    const char *ptm[] = {"model.pipeline_model_parallel_size=2", "dataset.pad_to_max_length=false"};
    resolve(&x, "llama32_1b_sft", 2, true, ptm, 2);
    CHECK(x.c.dataset.pad_to_max_length);
    g = tr_diags_find(&x.d, "finalize.user_value_replaced");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "dataset.pad_to_max_length");
    done(&x);
    /* The preset decides gradient reduction: a contrary ddp value of the user's is named. */
    const char *grad[] = {"ddp.grad_reduce_in_fp32=false"};
    resolve(&x, "llama32_1b_pretrain", 1, true, grad, 1);
    CHECK(x.c.ddp.grad_reduce_in_fp32);
    g = tr_diags_find(&x.d, "finalize.user_value_replaced");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "ddp.grad_reduce_in_fp32=false is replaced by true");
    done(&x);
    /* The same value from the recipe (not the user) is no news. */
    resolve(&x, "llama32_1b_sft", 1, true, NULL, 0);
    CHECK(tr_diags_find(&x.d, "finalize.user_value_replaced") == NULL);
    done(&x);
    /* decrease_batch_size_if_needed lowers the batch with a note naming both sizes. */
    const char *dec[] = {"train.decrease_batch_size_if_needed=true", "train.global_batch_size=10",
                         "train.micro_batch_size=1"};
    resolve(&x, "llama32_1b_pretrain", 4, true, dec, 3);
    CHECK_INT_EQ(x.c.train.global_batch_size, 8);
    g = tr_diags_find(&x.d, "finalize.batch_size_decreased");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "10 is lowered to 8");
    done(&x);
}

static void test_explain_names_the_derivation(void) {
    run x;
    const char *cp2[] = {"model.context_parallel_size=2"};
    resolve(&x, "llama32_1b_sft", 2, true, cp2, 1);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK_INT_EQ(tr_config_explain(&x.c, "dataset.pad_seq_to_mult", mem, &x.d), TR_OK);
    fclose(mem);
    CHECK_CONTAINS(text, "finalize() raises it to a multiple of 2*CP");
    CHECK_CONTAINS(text, "derived");
    CHECK_CONTAINS(text, "4   <- in effect");
    free(text);
    done(&x);
}

TR_TEST_MAIN(TR_TEST(test_pad_follows_the_layout), TR_TEST(test_sequence_lengths_follow_each_other),
             TR_TEST(test_sequence_parallel_is_rejected_not_fixed),
             TR_TEST(test_replaced_user_values_are_named),
             TR_TEST(test_explain_names_the_derivation))
