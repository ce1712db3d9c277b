#include "runtime/data/datasets/blend.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing and weights ---- */

static tr_status push_word(char ***words, int *n, int *cap, const char *s, size_t len) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        char **w = realloc(*words, (size_t)nc * sizeof *w);
        if (!w) return TR_ERR_NOMEM;
        *words = w;
        *cap = nc;
    }
    char *copy = strndup(s, len);
    if (!copy) return TR_ERR_NOMEM;
    (*words)[(*n)++] = copy;
    return TR_OK;
}

static bool parse_weight(const char *s, double *out) {
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == 0;
}

tr_status tr_blend_parse(const tr_str_list *list, const char *key, tr_blend *out, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    char **words = NULL;
    int n = 0, cap = 0;
    tr_status s = TR_OK;
    for (int i = 0; s == TR_OK && !list->null && i < list->n; i++) {
        const char *p = list->v[i];
        while (s == TR_OK && *p) {
            while (isspace((unsigned char)*p)) p++;
            const char *start = p;
            while (*p && !isspace((unsigned char)*p)) p++;
            if (p > start) s = push_word(&words, &n, &cap, start, (size_t)(p - start));
        }
    }
    if (s == TR_OK && n == 0)
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.blend_empty", NULL, key,
                        "name at least one indexed-dataset prefix", "%s names no dataset", key);
    /* Megatron: an even count whose every other word is a number is weighted; else all prefixes. */
    bool weighted = s == TR_OK && n % 2 == 0;
    double *w = NULL;
    if (weighted) {
        w = malloc((size_t)(n / 2) * sizeof *w);
        if (!w) s = TR_ERR_NOMEM;
        for (int i = 0; s == TR_OK && i < n / 2; i++)
            if (!parse_weight(words[2 * i], &w[i])) weighted = false;
    }
    if (s == TR_OK && weighted) {
        for (int i = 0; i < n / 2; i++)
            if (!(w[i] > 0) || !isfinite(w[i])) {
                s = tr_diag_add(diags, TR_SEV_ERROR, "data.blend_weight", NULL, key,
                                "give every dataset a positive weight, e.g. 0.3 a 0.7 b",
                                "%s: weight %s of %s is not a positive number", key, words[2 * i],
                                words[2 * i + 1]);
                break;
            }
    }
    if (s == TR_OK) {
        out->n = weighted ? n / 2 : n;
        out->prefixes = malloc((size_t)out->n * sizeof *out->prefixes);
        if (!out->prefixes) s = TR_ERR_NOMEM;
        for (int i = 0; s == TR_OK && i < out->n; i++) {
            out->prefixes[i] = words[weighted ? 2 * i + 1 : i];
            words[weighted ? 2 * i + 1 : i] = NULL;
        }
        if (s == TR_OK && weighted) {
            out->weights = w;
            w = NULL;
        }
    }
    for (int i = 0; i < n; i++) free(words[i]);
    free(words);
    free(w);
    if (s != TR_OK) tr_blend_free(out);
    return s;
}

void tr_blend_free(tr_blend *b) {
    if (b->prefixes)
        for (int i = 0; i < b->n; i++) free(b->prefixes[i]);
    free(b->prefixes);
    free(b->weights);
    memset(b, 0, sizeof *b);
}

static double numpy_sum(const double *a, int n) {
    if (n < 8) {
        double r = 0.0;
        for (int i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

void tr_blend_normalize(const double *w, int n, double *out) {
    double sum = numpy_sum(w, n);
    for (int i = 0; i < n; i++) out[i] = w[i] / sum;
}

void tr_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                      int64_t *dataset_sample_index) {
    if (n <= 0) return;
    int64_t *count = calloc((size_t)n, sizeof *count);
    if (!count) return;
    for (int64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = 0;
        double best_err = weights[0] * sd - (double)count[0];
        for (int i = 1; i < n; i++) {
            double err = weights[i] * sd - (double)count[i];
            if (err > best_err) {
                best_err = err;
                best = i;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = count[best]++;
    }
    free(count);
}

void tr_blend_indices_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                 int64_t *dataset_sample_index) {
    if (n <= 0) return;
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    int64_t *count = calloc((size_t)n, sizeof *count);
    double *w = malloc((size_t)n * sizeof *w);
    if (!count || !w) {
        free(count);
        free(w);
        return;
    }
    for (int i = 0; i < n; i++) w[i] = (double)sizes[i] / (double)total;
    for (int64_t s = 0; s < total; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = -1;
        double best_err = -INFINITY;
        for (int i = 0; i < n; i++) {
            if (count[i] >= sizes[i]) continue; /* spent components leave the race */
            double err = w[i] * sd - (double)count[i];
            if (best < 0 || err > best_err) {
                best_err = err;
                best = i;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = count[best]++;
    }
    free(count);
    free(w);
}

void tr_gpt_split_sizes(int64_t train_iters, int64_t eval_interval, int64_t eval_iters,
                        int64_t global_batch, int64_t sizes[TR_N_SPLITS]) {
    sizes[TR_SPLIT_TRAIN] = train_iters * global_batch;
    int64_t evals = eval_interval > 0 ? train_iters / eval_interval + 1 : 1;
    sizes[TR_SPLIT_VALID] = evals * eval_iters * global_batch;
    sizes[TR_SPLIT_TEST] = eval_iters * global_batch;
}

/* ---- the builder ---- */

static tr_status get_low(tr_gpt_data *d, const char *prefix, tr_gpt_lowlevel **out,
                         tr_diags *diags) {
    for (int i = 0; i < d->n_low; i++)
        if (!d->low[i].is_mock && strcmp(d->low[i].name, prefix) == 0) {
            *out = &d->low[i];
            return TR_OK;
        }
    TR_TRY(tr_gpt_lowlevel_open(&d->low[d->n_low], prefix, diags));
    *out = &d->low[d->n_low++];
    return TR_OK;
}

static tr_status alloc_parts(tr_gpt_split_data *sd, int n) {
    sd->parts = calloc((size_t)n, sizeof *sd->parts);
    if (!sd->parts) return TR_ERR_NOMEM;
    sd->present = true;
    return TR_OK;
}

/* The blended top level of one split over its built parts. */
static tr_status blend_split(tr_gpt_split_data *sd, int split, const double *weights, int64_t size,
                             double surplus, tr_diags *diags) {
    int n = sd->n_parts;
    double *w = malloc((size_t)n * sizeof *w);
    int64_t *lens = malloc((size_t)n * sizeof *lens);
    if (!w || !lens) {
        free(w);
        free(lens);
        return TR_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) lens[i] = sd->parts[i].n_samples;
    bool exhaustive = size < 0;
    if (exhaustive) {
        size = 0;
        for (int i = 0; i < n; i++) size += lens[i];
    } else {
        /* BlendedDataset normalizes the weights it is given, normalized or not. */
        if (weights) {
            tr_blend_normalize(weights, n, w);
        } else {
            double *lw = malloc((size_t)n * sizeof *lw);
            if (!lw) {
                free(w);
                free(lens);
                return TR_ERR_NOMEM;
            }
            for (int i = 0; i < n; i++) lw[i] = (double)lens[i];
            tr_blend_normalize(lw, n, w);
            free(lw);
        }
    }
    sd->blended = true;
    sd->size = size;
    sd->dataset_index = malloc((size_t)(size ? size : 1) * sizeof *sd->dataset_index);
    sd->dataset_sample_index = malloc((size_t)(size ? size : 1) * sizeof(int64_t));
    tr_status s = TR_OK;
    if (!sd->dataset_index || !sd->dataset_sample_index) {
        s = TR_ERR_NOMEM;
    } else if (exhaustive) {
        tr_blend_indices_exhaustive(lens, n, sd->dataset_index, sd->dataset_sample_index);
    } else {
        tr_blend_indices(w, n, size, sd->dataset_index, sd->dataset_sample_index);
    }
    /* Every component must have built as many samples as the blend draws from it. */
    for (int i = 0; s == TR_OK && i < n; i++) {
        int64_t used = 0;
        for (int64_t k = 0; k < size; k++) used += sd->dataset_index[k] == i;
        if (used > lens[i])
            s = tr_diag_add(diags, TR_SEV_ERROR, "data.blend_oversampled", NULL,
                            "dataset.mid_level_dataset_surplus",
                            "raise dataset.mid_level_dataset_surplus (e.g. ten-fold)",
                            "the %s blend draws %lld samples from %s, which built only %lld "
                            "(surplus %g)",
                            tr_split_name(split), (long long)used, sd->parts[i].low->name,
                            (long long)lens[i], surplus);
    }
    free(w);
    free(lens);
    return s;
}

/* Megatron's default when path_to_cache is unset: a directory under the prefix path itself. */
static char *default_cache_dir(const char *prefix) {
    size_t n = strlen(prefix) + 32;
    char *dir = malloc(n);
    if (dir) snprintf(dir, n, "%s/cache/GPTDataset_indices", prefix);
    return dir;
}

static int64_t ceil_size(int64_t size, double weight, double surplus) {
    double target = ceil((double)size * weight);
    return (int64_t)ceil(target * (1.0 + surplus));
}

/* Megatron's path for one blend over the splits marked in bounds/present with sizes. */
static tr_status build_blend(tr_gpt_data *d, const tr_gpt_build_spec *spec, const tr_blend *b,
                             const char *key, double bounds[TR_N_SPLITS][2],
                             const bool present[TR_N_SPLITS], const int64_t *sizes,
                             tr_diags *diags) {
    double *w = NULL;
    tr_status s = TR_OK;
    if (b->weights) {
        w = malloc((size_t)b->n * sizeof *w);
        if (!w) return TR_ERR_NOMEM;
        tr_blend_normalize(b->weights, b->n, w);
        for (int sp = 0; sp < TR_N_SPLITS; sp++)
            if (present[sp] && sizes[sp] < 0) {
                free(w);
                return tr_diag_add(diags, TR_SEV_ERROR, "data.blend_needs_size", NULL, key,
                                   "set train.train_iters (and eval settings) so every split has "
                                   "a sample count, or drop the weights",
                                   "a weighted blend needs a sample count for the %s split",
                                   tr_split_name(sp));
            }
    }
    if (b->n >= INT16_MAX) {
        free(w);
        return tr_diag_add(diags, TR_SEV_ERROR, "data.blend_too_many", NULL, key,
                           "merge datasets (preprocess_data can write one from many)",
                           "a blend of %d datasets is more than the 32766 Megatron supports", b->n);
    }
    bool single = b->n == 1 && !b->weights;
    for (int sp = 0; s == TR_OK && sp < TR_N_SPLITS; sp++) {
        if (!present[sp]) continue;
        tr_gpt_split_data *sd = &d->split[sp];
        s = alloc_parts(sd, b->n);
        for (int i = 0; s == TR_OK && i < b->n; i++) {
            tr_gpt_lowlevel *low;
            s = get_low(d, b->prefixes[i], &low, diags);
            if (s != TR_OK) break;
            int64_t beg, end;
            tr_split_range(bounds[sp], low->n, &beg, &end);
            int64_t want = single ? sizes[sp] : w ? ceil_size(sizes[sp], w[i], spec->surplus) : -1;
            char *dir = spec->cache_dir ? NULL : default_cache_dir(low->name);
            if (!spec->cache_dir && !dir) s = TR_ERR_NOMEM;
            if (s == TR_OK)
                s = tr_gpt_dataset_build(&sd->parts[i], low, sp, beg, end, want, &spec->params,
                                         spec->cache_dir ? spec->cache_dir : dir, spec->mode,
                                         diags);
            free(dir);
            if (s == TR_OK) sd->n_parts++;
        }
        if (s != TR_OK || single) continue;
        int64_t size;
        if (w) {
            size = 0;
            for (int i = 0; i < b->n; i++) size += (int64_t)ceil((double)sizes[sp] * w[i]);
        } else {
            int64_t total = 0;
            for (int i = 0; i < b->n; i++) total += sd->parts[i].n_samples;
            size = sizes[sp] < 0 ? -1 : (sizes[sp] < total ? sizes[sp] : total);
        }
        s = blend_split(sd, sp, w, size, spec->surplus, diags);
    }
    free(w);
    return s;
}

static int count_prefixes(const tr_gpt_build_spec *spec) {
    int n = spec->blend ? spec->blend->n : 0;
    for (int sp = 0; sp < TR_N_SPLITS; sp++)
        if (spec->per_split[sp]) n += spec->per_split[sp]->n;
    return n + 1;
}

tr_status tr_gpt_data_build(tr_gpt_data *out, const tr_gpt_build_spec *spec, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    out->low = calloc((size_t)count_prefixes(spec), sizeof *out->low);
    if (!out->low) return TR_ERR_NOMEM;
    double bounds[TR_N_SPLITS][2];
    bool present[TR_N_SPLITS];
    tr_status s = TR_OK;
    if (spec->mock || spec->blend) {
        /* Megatron forces an even split on mock data, whatever split says. */
        s = tr_split_parse(spec->mock || !spec->split ? "1,1,1" : spec->split, bounds, present,
                           diags);
        if (s == TR_OK && spec->mock) {
            s = tr_gpt_lowlevel_mock(&out->low[0], spec->mock_vocab, spec->mock_eod, diags);
            if (s == TR_OK) out->n_low = 1;
            for (int sp = 0; s == TR_OK && sp < TR_N_SPLITS; sp++) {
                if (!present[sp]) continue;
                s = alloc_parts(&out->split[sp], 1);
                int64_t beg, end;
                tr_split_range(bounds[sp], out->low[0].n, &beg, &end);
                if (s == TR_OK)
                    s = tr_gpt_dataset_build(&out->split[sp].parts[0], &out->low[0], sp, beg, end,
                                             spec->sizes[sp], &spec->params, spec->cache_dir,
                                             spec->mode, diags);
                if (s == TR_OK) out->split[sp].n_parts = 1;
            }
        } else if (s == TR_OK) {
            s = build_blend(out, spec, spec->blend, "dataset.data_path", bounds, present,
                            spec->sizes, diags);
        }
    } else {
        for (int sp = 0; s == TR_OK && sp < TR_N_SPLITS; sp++) {
            if (!spec->per_split[sp]) continue;
            static const char *const keys[] = {"dataset.train_data_path", "dataset.valid_data_path",
                                               "dataset.test_data_path"};
            bool only[TR_N_SPLITS] = {false, false, false};
            only[sp] = true;
            double whole[TR_N_SPLITS][2] = {{0, 1}, {0, 1}, {0, 1}};
            int64_t sizes[TR_N_SPLITS] = {0, 0, 0};
            sizes[sp] = spec->sizes[sp];
            s = build_blend(out, spec, spec->per_split[sp], keys[sp], whole, only, sizes, diags);
        }
    }
    if (s != TR_OK) tr_gpt_data_free(out);
    return s;
}

void tr_gpt_data_free(tr_gpt_data *d) {
    for (int sp = 0; sp < TR_N_SPLITS; sp++) {
        tr_gpt_split_data *sd = &d->split[sp];
        for (int i = 0; sd->parts && i < sd->n_parts; i++) tr_gpt_dataset_free(&sd->parts[i]);
        free(sd->parts);
        free(sd->dataset_index);
        free(sd->dataset_sample_index);
    }
    for (int i = 0; i < d->n_low; i++) tr_gpt_lowlevel_close(&d->low[i]);
    free(d->low);
    memset(d, 0, sizeof *d);
}

tr_status tr_gpt_data_text(const tr_gpt_data *d, int split, int64_t i, int64_t *text,
                           int *component) {
    if (split < 0 || split >= TR_N_SPLITS || !d->split[split].present) return TR_ERR_INVALID;
    const tr_gpt_split_data *sd = &d->split[split];
    if (!sd->blended) {
        if (component) *component = 0;
        return tr_gpt_dataset_text(&sd->parts[0], i, text);
    }
    if (i < 0 || i >= sd->size) return TR_ERR_INVALID;
    int c = sd->dataset_index[i];
    if (component) *component = c;
    return tr_gpt_dataset_text(&sd->parts[c], sd->dataset_sample_index[i], text);
}

tr_status tr_gpt_spec_from_config(const tr_config *c, int64_t eod, int64_t pad, int64_t vocab_size,
                                  tr_index_cache_mode mode, tr_gpt_build_spec *spec,
                                  tr_gpt_spec_storage *st, tr_diags *diags) {
    const tr_dataset_config *dc = &c->dataset;
    memset(spec, 0, sizeof *spec);
    memset(st, 0, sizeof *st);
    if (dc->seq_length == TR_NULL_INT)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.seq_length", NULL, "dataset.seq_length",
                           "set dataset.seq_length (it must equal model.seq_length)",
                           "GPT datasets need dataset.seq_length");
    spec->params.seed = (uint32_t)dc->random_seed;
    spec->params.seq_length = dc->seq_length;
    spec->params.add_extra_token = dc->add_extra_token_to_sequence ? 1 : 0;
    spec->params.drop_last_partial_validation = dc->drop_last_partial_validation_sequence;
    spec->params.eod = eod;
    spec->params.pad = pad;
    spec->params.reset_position_ids = dc->reset_position_ids == 1;
    spec->params.reset_attention_mask = dc->reset_attention_mask == 1;
    spec->params.eod_mask_loss = dc->eod_mask_loss == 1;
    spec->surplus = dc->mid_level_dataset_surplus;
    spec->split = dc->split;
    spec->cache_dir = dc->path_to_cache;
    spec->mode = mode;
    int64_t iters = c->train.train_iters == TR_NULL_INT ? 0 : c->train.train_iters;
    int64_t gbs = c->train.global_batch_size == TR_NULL_INT ? 0 : c->train.global_batch_size;
    int64_t interval = c->validation.eval_interval == TR_NULL_INT ? 0 : c->validation.eval_interval;
    tr_gpt_split_sizes(iters, interval, c->validation.eval_iters, gbs, spec->sizes);
    const tr_str_list *per[TR_N_SPLITS] = {&dc->train_data_path, &dc->valid_data_path,
                                           &dc->test_data_path};
    static const char *const keys[] = {"dataset.train_data_path", "dataset.valid_data_path",
                                       "dataset.test_data_path"};
    bool any_per_split = false;
    for (int sp = 0; sp < TR_N_SPLITS; sp++) any_per_split |= !per[sp]->null && per[sp]->n > 0;
    tr_status s = TR_OK;
    if (!dc->data_path.null && dc->data_path.n > 0) {
        s = tr_blend_parse(&dc->data_path, "dataset.data_path", &st->blend, diags);
        spec->blend = &st->blend;
        if (s == TR_OK && !dc->split)
            s = tr_diag_add(diags, TR_SEV_ERROR, "data.split_required", NULL, "dataset.split",
                            "set dataset.split, e.g. 969,30,1",
                            "dataset.data_path needs dataset.split to divide it");
    } else if (any_per_split) {
        for (int sp = 0; s == TR_OK && sp < TR_N_SPLITS; sp++) {
            if (per[sp]->null || per[sp]->n == 0) continue;
            s = tr_blend_parse(per[sp], keys[sp], &st->per_split[sp], diags);
            spec->per_split[sp] = &st->per_split[sp];
        }
    } else {
        spec->mock = true;
        spec->mock_vocab = vocab_size;
        spec->mock_eod = eod;
    }
    if (s != TR_OK) tr_gpt_spec_storage_free(st);
    return s;
}

void tr_gpt_spec_storage_free(tr_gpt_spec_storage *st) {
    tr_blend_free(&st->blend);
    for (int sp = 0; sp < TR_N_SPLITS; sp++) tr_blend_free(&st->per_split[sp]);
}
