/* Catalog benchmark: how long resolving recipes and validating the whole catalog takes, against
 * a baseline of what any config costs (tr_config_init + YAML dump) measured in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "recipes/catalog.h"
#include "recipes/resolve.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double baseline_init_dump(int reps) {
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        if (tr_config_init(&c, &d) != TR_OK) return -1;
        char *text = tr_config_dump_yaml_string(&c);
        free(text);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
    return (now_s() - t0) / reps;
}

static double resolve_every_recipe(int reps, int *n_out) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    double t0 = now_s();
    for (int k = 0; k < reps; k++) {
        for (int i = 0; i < n; i++) {
            int n_ovr = 0;
            while (r[i].catalog_overrides && r[i].catalog_overrides[n_ovr]) n_ovr++;
            tr_resolve_opts o;
            memset(&o, 0, sizeof o);
            o.recipe = r[i].name;
            o.overrides = r[i].catalog_overrides;
            o.n_overrides = n_ovr;
            o.world = (tr_world){r[i].min_world_size, 8};
            o.validate.catalog_mode = true;
            tr_config c;
            tr_diags d;
            tr_diags_init(&d);
            tr_resolve(&o, &c, &d);
            tr_config_free(&c);
            tr_diags_free(&d);
        }
    }
    *n_out = n;
    return (now_s() - t0) / (reps * n);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    static const int worlds[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    tr_catalog_opts o;
    memset(&o, 0, sizeof o);
    o.world_sizes = worlds;
    o.n_world_sizes = (int)(sizeof worlds / sizeof worlds[0]);

    double base = baseline_init_dump(reps * 20);
    int n_recipes = 0;
    double per_resolve = resolve_every_recipe(reps, &n_recipes);

    double best = 1e9;
    tr_catalog_result r;
    int failures = 0;
    for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        failures = tr_catalog_validate(&o, &r);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    printf("baseline tr_config_init+dump: %.1f us\n", base * 1e6);
    printf("resolve one recipe (init..validate, %d recipes): %.1f us (%.1fx baseline)\n", n_recipes,
           per_resolve * 1e6, per_resolve / base);
    printf("catalog over %d world sizes: %.2f ms total (best of %d), %d checks, %d skipped, "
           "%d failures, %.1f us per check (%.1fx baseline)\n",
           o.n_world_sizes, best * 1e3, reps, r.checks, r.skipped, failures,
           best / (r.checks ? r.checks : 1) * 1e6, best / (r.checks ? r.checks : 1) / base);
    return failures == 0 ? 0 : 1;
}
