/* Rules on the dataset: blends, splits, sequence length, SFT packing (reference §3.1, §3.2). */
#include <stdlib.h>

#include "core/rules/rule.h"

static bool parse_number(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

TR_RULE_FN(tr_check_seq_length) {
    int64_t ds = c->dataset.seq_length;
    if (!tr_is_set(ds)) {
        char hint[96];
        TR_FAIL(
            "dataset.seq_length,model.seq_length",
            TR_FMT(hint, "set dataset.seq_length=%lld (the model's)", tr_ll(c->model.seq_length)),
            "dataset.seq_length is not set");
        return;
    }
    if (ds == c->model.seq_length) return;
    TR_FAIL("dataset.seq_length,model.seq_length", "set both to the same length",
            "dataset.seq_length (%lld) must equal model.seq_length (%lld)", tr_ll(ds),
            tr_ll(c->model.seq_length));
}

/* A blend is a list of prefixes, or [w1, p1, w2, p2, ...] when its first entry is a number. */
static void check_blend(const tr_config *c, const tr_validate_opts *opts, const tr_rule *self,
                        tr_diags *d, const tr_str_list *l, const char *key) {
    double w;
    if (l->null || l->n == 0 || !parse_number(l->v[0], &w)) return;
    if (l->n % 2) {
        TR_FAIL(key, "write the blend as weight, prefix pairs: [0.7, a, 0.3, b]",
                "%s is a weighted blend with an odd number of entries (%d)", key, l->n);
        return;
    }
    for (int i = 0; i < l->n; i += 2)
        if (!parse_number(l->v[i], &w) || !(w > 0))
            TR_FAIL(key, "give every prefix a positive weight",
                    "%s weight '%s' (entry %d) must be a positive number", key, l->v[i], i);
}

TR_RULE_FN(tr_check_blend_syntax) {
    check_blend(c, opts, self, d, &c->dataset.data_path, "dataset.data_path");
    check_blend(c, opts, self, d, &c->dataset.train_data_path, "dataset.train_data_path");
    check_blend(c, opts, self, d, &c->dataset.valid_data_path, "dataset.valid_data_path");
    check_blend(c, opts, self, d, &c->dataset.test_data_path, "dataset.test_data_path");
}

TR_RULE_FN(tr_check_split_syntax) {
    const char *s = c->dataset.split;
    if (!s) return;
    double sum = 0;
    int n = 0;
    const char *p = s;
    bool ok = true;
    while (ok && *p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 0)) ok = false;
        sum += v;
        n++;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            ok = false;
    }
    if (ok && n <= 3 && sum > 0) return;
    TR_FAIL(
        "dataset.split", "write up to three non-negative proportions, e.g. 99,1,0",
        "dataset.split \"%s\" must be at most 3 comma-separated numbers >= 0 with a positive sum",
        s);
}

static bool blend_set(const tr_str_list *l) {
    return tr_strlist_set(l);
}

TR_RULE_FN(tr_check_blend_sources) {
    const tr_dataset_config *ds = &c->dataset;
    bool per_split = blend_set(&ds->train_data_path) || blend_set(&ds->valid_data_path) ||
                     blend_set(&ds->test_data_path);
    if (per_split && (blend_set(&ds->data_path) || ds->split))
        TR_FAIL("dataset.train_data_path,dataset.data_path,dataset.split",
                "use either data_path with split, or train/valid/test_data_path",
                "dataset.train/valid/test_data_path cannot be combined with dataset.data_path or "
                "dataset.split");
    if (ds->type == TR_DS_GPT && blend_set(&ds->data_path) && !ds->split)
        TR_FAIL("dataset.split,dataset.data_path", "set dataset.split, e.g. 99,1,0",
                "dataset.split must be set when dataset.data_path is");
}

TR_RULE_FN(tr_check_gpt_flags_defined) {
    if (c->dataset.type != TR_DS_GPT) return;
    static const char *const keys[] = {"dataset.reset_position_ids", "dataset.reset_attention_mask",
                                       "dataset.eod_mask_loss"};
    int8_t v[3] = {c->dataset.reset_position_ids, c->dataset.reset_attention_mask,
                   c->dataset.eod_mask_loss};
    for (int i = 0; i < 3; i++) {
        if (v[i] >= 0) continue;
        char hint[96];
        TR_FAIL(keys[i], TR_FMT(hint, "set %s=false (or true)", keys[i]),
                "%s must be set for gpt datasets", keys[i]);
    }
}

/* megatron-core replaces the split of mock data with 1,1,1 (BlendedMegatronDatasetConfig), as
 * Trestle's loop does: said, not silent. */
TR_RULE_FN(tr_note_mock_split) {
    const tr_dataset_config *dc = &c->dataset;
    if (dc->type != TR_DS_GPT || !dc->split || !strcmp(dc->split, "1,1,1")) return;
    if (!dc->data_path.null || !dc->train_data_path.null || !dc->valid_data_path.null ||
        !dc->test_data_path.null)
        return;
    TR_FAIL("dataset.split,dataset.data_path",
            "nothing to fix for mock data; give dataset.data_path (or dataset.blend) to split data",
            "dataset.split (%s) has no effect on mock data: megatron-core splits it 1,1,1",
            dc->split);
}

TR_RULE_FN(tr_check_sft_needs_root) {
    if (c->dataset.type != TR_DS_SFT || c->dataset.dataset_root) return;
    TR_FAIL("dataset.dataset_root,dataset.type",
            "set dataset.dataset_root to a directory holding training.jsonl",
            "dataset.type sft needs dataset.dataset_root");
}

TR_RULE_FN(tr_check_text_needs_path) {
    if (c->dataset.type != TR_DS_TEXT) return;
    if (!c->dataset.data_path.null && c->dataset.data_path.n == 1) return;
    TR_FAIL("dataset.data_path,dataset.type", "set dataset.data_path to one text file",
            "dataset.type text needs exactly one file in dataset.data_path");
}

TR_RULE_FN(tr_check_offline_packing) {
    const tr_dataset_config *ds = &c->dataset;
    bool specs = tr_is_set(ds->packed_sequence_size);
    if (ds->enable_offline_packing && !specs)
        TR_FAIL("dataset.enable_offline_packing,dataset.packed_sequence_size",
                "set dataset.packed_sequence_size (usually dataset.seq_length)",
                "dataset.enable_offline_packing needs dataset.packed_sequence_size");
    if (!ds->enable_offline_packing && specs)
        TR_FAIL("dataset.packed_sequence_size,dataset.enable_offline_packing",
                "set dataset.enable_offline_packing=true or unset packed_sequence_size",
                "dataset.packed_sequence_size (%lld) needs dataset.enable_offline_packing",
                tr_ll(ds->packed_sequence_size));
    if (ds->pad_cu_seqlens && !ds->pad_to_max_length)
        TR_FAIL("dataset.pad_cu_seqlens,dataset.pad_to_max_length",
                "set dataset.pad_to_max_length=true",
                "dataset.pad_cu_seqlens needs dataset.pad_to_max_length");
    if (!ds->enable_offline_packing) return;
    if (ds->type != TR_DS_SFT)
        TR_FAIL("dataset.enable_offline_packing,dataset.type", "use dataset.type=sft",
                "offline packing applies to sft datasets only (dataset.type is %s)",
                tr_enum_str(&tr_enum_dataset_type, ds->type));
    int64_t mbs = tr_or(c->train.micro_batch_size, 1);
    if (mbs > 1) {
        char hint[200];
        TR_FAIL("train.micro_batch_size,dataset.enable_offline_packing",
                TR_FMT(hint,
                       "set train.micro_batch_size=1 and pack %lld tokens per sequence instead",
                       tr_ll(tr_or(ds->packed_sequence_size, 0) * mbs)),
                "packed sequences need train.micro_batch_size 1 (it is %lld)", tr_ll(mbs));
    }
    int64_t cp = c->model.context_parallel_size, tp = c->model.tensor_model_parallel_size;
    int64_t need = 1;
    if (cp > 1) need = tr_lcm(need, 2 * cp);
    if (c->model.sequence_parallel && tp > 1) need = tr_lcm(need, cp * tp);
    if (ds->pad_seq_to_mult % need) {
        char hint[96];
        TR_FAIL("dataset.pad_seq_to_mult,model.context_parallel_size,model.sequence_parallel",
                TR_FMT(hint, "set dataset.pad_seq_to_mult=%lld", tr_ll(need)),
                "dataset.pad_seq_to_mult (%lld) must be a multiple of %lld for this CP/SP layout",
                tr_ll(ds->pad_seq_to_mult), tr_ll(need));
    }
}

TR_RULE_FN(tr_check_cp_sft) {
    if (c->dataset.type != TR_DS_SFT) return;
    int64_t cp = c->model.context_parallel_size;
    int64_t ecp = tr_or(c->dist.eval_context_parallel_size, cp);
    if (cp <= 1 && ecp <= 1) return;
    if (!c->model.calculate_per_token_loss)
        TR_FAIL("model.calculate_per_token_loss,model.context_parallel_size",
                "set model.calculate_per_token_loss=true",
                "fine-tuning with context parallelism (%lld) needs model.calculate_per_token_loss",
                tr_ll(cp > ecp ? cp : ecp));
    if (c->ddp.average_in_collective)
        TR_FAIL("ddp.average_in_collective,model.context_parallel_size",
                "set ddp.average_in_collective=false",
                "fine-tuning with context parallelism (%lld) needs ddp.average_in_collective false",
                tr_ll(cp > ecp ? cp : ecp));
}
