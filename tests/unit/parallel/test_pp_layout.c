/* Layer assignment to (pp rank, chunk): the reference's worked example (megatron-core.md §3.2),
 * uneven first/last stages and account_for_* by the rules of megatron-bridge-config.md §3.4,
 * the layout string, and the tiling property over many splits. */
#include <string.h>

#include "runtime/pipeline/pipeline.h"
#include "tests/unit/harness.h"

static void setup(tr_config *c, int layers, int pp, int vpp) {
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(c, &d) == TR_OK);
    tr_diags_free(&d);
    c->model.num_layers = layers;
    c->model.pipeline_model_parallel_size = pp;
    c->model.virtual_pipeline_model_parallel_size = vpp > 1 ? vpp : TR_NULL_INT;
}

static tr_pp_layout build(const tr_config *c) {
    tr_pp_layout l;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_pp_layout_build(c, &l, &d) == TR_OK);
    CHECK_INT_EQ(d.n, 0);
    tr_diags_free(&d);
    return l;
}

static void expect(const tr_pp_layout *l, int rank, int chunk, int first, int count) {
    const tr_pp_stage *s = tr_pp_layout_stage(l, rank, chunk);
    CHECK(s != NULL);
    if (!s) return;
    CHECK_INT_EQ(s->first_layer, first);
    CHECK_INT_EQ(s->num_layers, count);
}

/* Virtual stages in order cover layers 0..L-1 exactly once, contiguously. */
static bool tiles(const tr_pp_layout *l, int layers) {
    int next = 0;
    for (int s = 0; s < l->pp * l->vpp; s++) {
        if (l->stages[s].first_layer != next || l->stages[s].num_layers < 0) return false;
        next += l->stages[s].num_layers;
    }
    return next == layers && l->stages[0].has_embedding && l->stages[l->pp * l->vpp - 1].has_loss;
}

/* §3.2: L=16, PP=4, VPP=2: GPU0 holds layers [1,2] and [9,10] (1-based), GPU1 [3,4],[11,12]. */
static void test_reference_interleaved_placement(void) {
    tr_config c;
    setup(&c, 16, 4, 2);
    tr_pp_layout l = build(&c);
    expect(&l, 0, 0, 0, 2);
    expect(&l, 0, 1, 8, 2);
    expect(&l, 1, 0, 2, 2);
    expect(&l, 1, 1, 10, 2);
    expect(&l, 3, 1, 14, 2);
    CHECK(tr_pp_layout_stage(&l, 0, 0)->has_embedding);
    CHECK(!tr_pp_layout_stage(&l, 0, 1)->has_embedding);
    CHECK(tr_pp_layout_stage(&l, 3, 1)->has_loss);
    CHECK(!tr_pp_layout_stage(&l, 3, 0)->has_loss);
    CHECK(tiles(&l, 16));
    tr_pp_layout_free(&l);
    tr_config_free(&c);
}

/* Uneven: first and last fixed, the middle layers split evenly over the remaining stages. */
static void test_uneven_first_last(void) {
    tr_config c;
    setup(&c, 10, 4, 1);
    c.model.num_layers_in_first_pipeline_stage = 1;
    c.model.num_layers_in_last_pipeline_stage = 3;
    tr_pp_layout l = build(&c);
    expect(&l, 0, 0, 0, 1);
    expect(&l, 1, 0, 1, 3);
    expect(&l, 2, 0, 4, 3);
    expect(&l, 3, 0, 7, 3);
    tr_pp_layout_free(&l);
    tr_config_free(&c);

    /* only the last stage set, with VPP 2: middle ranks get (12-2)/... per chunk halves */
    setup(&c, 14, 3, 2);
    c.model.num_layers_in_last_pipeline_stage = 2; /* middle 12 over 2 ranks: 6 each */
    l = build(&c);
    expect(&l, 0, 0, 0, 3);
    expect(&l, 1, 0, 3, 3);
    expect(&l, 2, 0, 6, 1);
    expect(&l, 0, 1, 7, 3);
    expect(&l, 2, 1, 13, 1);
    CHECK(tiles(&l, 14));
    tr_pp_layout_free(&l);
    tr_config_free(&c);
}

/* account_for_*: the embedding and the loss each take one layer's slot. */
static void test_account_for_embedding_and_loss(void) {
    tr_config c;
    setup(&c, 14, 4, 1);
    c.model.account_for_embedding_in_pipeline_split = true;
    c.model.account_for_loss_in_pipeline_split = true;
    tr_pp_layout l = build(&c); /* 16 slots, 4 per rank */
    expect(&l, 0, 0, 0, 3);
    expect(&l, 1, 0, 3, 4);
    expect(&l, 2, 0, 7, 4);
    expect(&l, 3, 0, 11, 3);
    CHECK(tiles(&l, 14));
    tr_pp_layout_free(&l);

    c.model.account_for_loss_in_pipeline_split = false;
    c.model.num_layers = 15;
    l = build(&c);
    expect(&l, 0, 0, 0, 3);
    expect(&l, 3, 0, 11, 4);
    CHECK(tiles(&l, 15));
    tr_pp_layout_free(&l);
    tr_config_free(&c);
}

static void test_layout_string(void) {
    tr_config c;
    setup(&c, 6, 4, 1);
    CHECK(tr_config_set_str(&c, TR_FID_model_pipeline_model_parallel_layout, "Et|tt|(t)*2|tL") ==
          TR_OK);
    tr_pp_layout l = build(&c);
    CHECK_INT_EQ(l.vpp, 1);
    expect(&l, 0, 0, 0, 1);
    expect(&l, 1, 0, 1, 2);
    expect(&l, 2, 0, 3, 2);
    expect(&l, 3, 0, 5, 1);
    CHECK(tiles(&l, 6));
    tr_pp_layout_free(&l);

    /* 8 stages on PP=4 imply VPP=2; stage s sits on rank s % 4, chunk s / 4; empty stages ok */
    c.model.num_layers = 7;
    CHECK(tr_config_set_str(&c, TR_FID_model_pipeline_model_parallel_layout, "E|t*2|t|t|t|t|t|L") ==
          TR_OK);
    l = build(&c);
    CHECK_INT_EQ(l.vpp, 2);
    expect(&l, 0, 0, 0, 0);
    expect(&l, 1, 0, 0, 2);
    expect(&l, 0, 1, 4, 1);
    expect(&l, 3, 1, 7, 0);
    CHECK(tiles(&l, 7));
    tr_pp_layout_free(&l);

    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_set_str(&c, TR_FID_model_pipeline_model_parallel_layout, "Et|t|tL") == TR_OK);
    CHECK(tr_pp_layout_build(&c, &l, &d) == TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "pipeline.schedule_layout") != NULL);
    tr_diags_free(&d);
    tr_config_free(&c);
}

static void test_embedding_group(void) {
    tr_config c;
    setup(&c, 8, 4, 1);
    tr_pp_layout l = build(&c);
    CHECK(l.shared_embedding);
    CHECK_INT_EQ(l.embedding_group[0], 0);
    CHECK_INT_EQ(l.embedding_group[1], 3);
    tr_pp_layout_free(&l);
    c.model.share_embeddings_and_output_weights = false;
    l = build(&c);
    CHECK_INT_EQ(l.embedding_group[1], -1);
    tr_pp_layout_free(&l);
    c.model.mtp_num_layers = 1; /* the MTP depths' lookup reads the embedding on the last stage */
    l = build(&c);
    CHECK(l.shared_embedding);
    CHECK_INT_EQ(l.embedding_group[1], 3);
    tr_pp_layout_free(&l);
    c.model.mtp_num_layers = TR_NULL_INT;
    c.model.share_embeddings_and_output_weights = true;
    c.model.pipeline_model_parallel_size = 1;
    l = build(&c);
    CHECK_INT_EQ(l.embedding_group[1], -1); /* one stage uses the same tensor twice */
    CHECK(l.stages[0].has_embedding && l.stages[0].has_loss);
    tr_pp_layout_free(&l);
    tr_config_free(&c);
}

/* Splits validate() would reject are refused here rather than mis-assigned. */
static void test_rejects_uneven_without_options(void) {
    tr_config c;
    setup(&c, 10, 4, 1);
    tr_pp_layout l;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_pp_layout_build(&c, &l, &d) == TR_ERR_CONFIG);
    const tr_diag *x = tr_diags_find(&d, "pipeline.schedule_layout");
    CHECK(x != NULL);
    if (x) CHECK_CONTAINS(x->keys, "model.num_layers");
    tr_diags_free(&d);
    tr_config_free(&c);
}

static void test_tiling_property(void) {
    tr_config c;
    setup(&c, 1, 1, 1);
    int n = 0;
    for (int pp = 1; pp <= 8; pp++)
        for (int v = 1; v <= 4; v++)
            for (int layers = 1; layers <= 48; layers++)
                for (int opt = 0; opt < 4; opt++) {
                    if (v > 1 && pp == 1) continue;
                    c.model.num_layers = layers;
                    c.model.pipeline_model_parallel_size = pp;
                    c.model.virtual_pipeline_model_parallel_size = v > 1 ? v : TR_NULL_INT;
                    c.model.account_for_embedding_in_pipeline_split = opt == 1;
                    c.model.account_for_loss_in_pipeline_split = opt == 1;
                    c.model.num_layers_in_first_pipeline_stage = opt == 2 ? v : TR_NULL_INT;
                    c.model.num_layers_in_last_pipeline_stage =
                        opt == 3 && pp > 1 ? 2 * v : TR_NULL_INT;
                    int total = layers + 2 * (opt == 1);
                    int middle = layers - (opt == 2 ? v : 0) - (opt == 3 && pp > 1 ? 2 * v : 0);
                    int stages = pp - (opt == 2) - (opt == 3 && pp > 1);
                    bool valid = opt == 1      ? total % (pp * v) == 0
                                 : stages == 0 ? middle == 0
                                               : middle >= 0 && middle % (stages * v) == 0;
                    tr_pp_layout l;
                    tr_diags d;
                    tr_diags_init(&d);
                    tr_status st = tr_pp_layout_build(&c, &l, &d);
                    tr_diags_free(&d);
                    CHECK_INT_EQ(st == TR_OK, valid);
                    if (st != TR_OK) continue;
                    if (!tiles(&l, layers)) {
                        fprintf(stderr, "  PP=%d VPP=%d L=%d opt=%d does not tile\n", pp, v, layers,
                                opt);
                        tr_test_failures++;
                    }
                    tr_pp_layout_free(&l);
                    n++;
                }
    CHECK(n > 300);
    tr_config_free(&c);
}

TR_TEST_MAIN(TR_TEST(test_reference_interleaved_placement), TR_TEST(test_uneven_first_last),
             TR_TEST(test_account_for_embedding_and_loss), TR_TEST(test_layout_string),
             TR_TEST(test_embedding_group), TR_TEST(test_rejects_uneven_without_options),
             TR_TEST(test_tiling_property))
