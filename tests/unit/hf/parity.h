/* What the Hugging Face import tests share: an imported model against the fixture transformers
 * wrote for it (tests/reference/make_hf*_fixtures.py): logits, loss, gradients, TP slices. */
#ifndef TR_TEST_HF_PARITY_H
#define TR_TEST_HF_PARITY_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/hf/hf.h"
#include "runtime/model/model.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/fixture.h"

/* The largest element error over the largest reference magnitude. */
static inline double hf_rel_err(const float *a, const float *b, int64_t n) {
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

/* The fixture's tokens and targets (rows of each) through m: its logits and loss equal
 * transformers' within 1e-4; m keeps the activations for a backward. */
static inline void hf_check_forward(tr_model *m, const fixture *f, int rows, const char *label) {
    const fix_tensor *tok = fixture_get(f, "", "tokens"), *tgt = fixture_get(f, "", "targets");
    const fix_tensor *logits = fixture_get(f, "", "logits"), *loss = fixture_get(f, "", "loss");
    CHECK(tok && tgt && logits && loss && (int)tok->n == rows && rows <= 64);
    if (!(tok && tgt && logits && loss && (int)tok->n == rows && rows <= 64)) return;
    int32_t ids[64], tg[64];
    for (int i = 0; i < rows; i++) ids[i] = (int32_t)tok->data[i], tg[i] = (int32_t)tgt->data[i];
    float l = 0;
    CHECK(tr_model_forward(m, ids, tg, &l) == TR_OK);
    double e = hf_rel_err(m->logits, logits->data, (int64_t)rows * m->spec.vocab);
    printf("  %s: logits relative error %.3g, loss %.7f vs transformers %.7f\n", label, e,
           (double)l, (double)loss->data[0]);
    CHECK(e <= 1e-4);
    CHECK_CLOSE(l, loss->data[0], 1e-4, 0);
}

/* Where the fixture holds gradients (g:NAME in Trestle's layout), every parameter's after one
 * backward equals transformers' within 1e-4. */
static inline void hf_check_grads(tr_model *m, const fixture *f) {
    if (m->n_info == 0 || !fixture_get(f, "g:", m->info[0].name)) return;
    memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
    CHECK_INT_EQ(tr_model_backward(m, 1.0f), TR_OK);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        const fix_tensor *g = fixture_get(f, "g:", p->name);
        CHECK(g != NULL && (int64_t)g->n == p->numel);
        if (!g || (int64_t)g->n != p->numel) continue;
        double e = hf_rel_err(m->grads + p->offset, g->data, p->numel);
        if (!(e <= 1e-4)) fprintf(stderr, "  g:%s: relative error %.3g\n", p->name, e);
        CHECK(e <= 1e-4);
        if (e > worst) worst = e, worst_name = p->name;
    }
    printf("  gradients: largest relative error %.3g (%s), %d tensors\n", worst, worst_name,
           m->n_info);
}

/* Each TP 2 shard imported from w holds exactly its slice of whole's parameters. */
static inline void hf_check_tp_slices(const tr_model_spec *s, const tr_model *whole,
                                      const tr_hf_weights *w, tr_diags *d) {
    for (int r = 0; r < 2; r++) {
        tr_model part;
        CHECK(tr_model_create(&part, s, (tr_tp_shard){r, 2}, tr_ops_cpu(), whole->batch) == TR_OK);
        CHECK(tr_hf_import(&part, w, d) == TR_OK);
        int64_t wrong = 0;
        for (int i = 0; i < part.n_info; i++) {
            const tr_param_info *p = &part.info[i];
            const tr_param_info *q = tr_model_find_param(whole, p->name);
            CHECK(q != NULL);
            for (int64_t e = 0; q && e < p->numel; e++)
                wrong += part.params[p->offset + e] !=
                         whole->params[q->offset + tr_model_logical_index(&part, p, e)];
        }
        CHECK_INT_EQ(wrong, 0);
        tr_model_free(&part);
    }
}

#endif
