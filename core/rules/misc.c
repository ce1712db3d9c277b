/* Rules on the small sections (profiling, PEFT) and on files a launch must be able to read. */
#include <stdlib.h>
#include <sys/stat.h>

#include "core/rules/rule.h"

TR_RULE_FN(tr_check_pytorch_profiler) {
    if (!c->profiling.use_pytorch_profiler) return;
    TR_FAIL("profiling.use_pytorch_profiler", "use profiling.use_nsys_profiler instead",
            "profiling.use_pytorch_profiler is not available (Trestle has no PyTorch)");
}

TR_RULE_FN(tr_check_profile_steps) {
    int64_t a = c->profiling.profile_step_start, b = c->profiling.profile_step_end;
    if (b >= a) return;
    TR_FAIL("profiling.profile_step_end,profiling.profile_step_start",
            "make profile_step_end at least profile_step_start",
            "profiling.profile_step_end (%lld) must be >= profiling.profile_step_start (%lld)",
            tr_ll(b), tr_ll(a));
}

TR_RULE_FN(tr_check_peft_exclude_modules) {
    if (!tr_strlist_set(&c->peft.exclude_modules) || !tr_strlist_set(&c->peft.target_modules))
        return;
    TR_FAIL("peft.exclude_modules,peft.target_modules", "set peft.target_modules=[]",
            "peft.exclude_modules needs an empty peft.target_modules");
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void check_path(const tr_config *c, const tr_validate_opts *opts, const tr_rule *self,
                       tr_diags *d, const char *key, const char *path, const char *suffix) {
    char full[4096];
    snprintf(full, sizeof full, "%s%s", path, suffix);
    if (exists(full)) return;
    char hint[128];
    TR_FAIL(key, TR_FMT(hint, "fix the path in %s", key), "%s names \"%s\", which does not exist",
            key, full);
}

/* Indexed-dataset prefixes name a .bin/.idx pair; weights in a blend are skipped. A blend may
 * come as list items or as one string ("0.3 a 0.7 b", Megatron's data_path.split()), so items
 * are split into words; a text corpus path is taken whole (it may contain spaces). */
static void check_blend_paths(const tr_config *c, const tr_validate_opts *opts, const tr_rule *self,
                              tr_diags *d, const tr_str_list *l, const char *key) {
    if (l->null) return;
    bool text = c->dataset.type == TR_DS_TEXT;
    for (int i = 0; i < l->n; i++) {
        if (text) {
            check_path(c, opts, self, d, key, l->v[i], "");
            continue;
        }
        char *words = strdup(l->v[i]), *save = NULL;
        if (!words) return;
        for (char *w = strtok_r(words, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
            char *end;
            strtod(w, &end);
            if (end != w && !*end) continue;
            check_path(c, opts, self, d, key, w, ".bin");
            check_path(c, opts, self, d, key, w, ".idx");
        }
        free(words);
    }
}

TR_RULE_FN(tr_check_launch_files_exist) {
    if (!opts->check_files) return;
    check_blend_paths(c, opts, self, d, &c->dataset.data_path, "dataset.data_path");
    check_blend_paths(c, opts, self, d, &c->dataset.train_data_path, "dataset.train_data_path");
    check_blend_paths(c, opts, self, d, &c->dataset.valid_data_path, "dataset.valid_data_path");
    check_blend_paths(c, opts, self, d, &c->dataset.test_data_path, "dataset.test_data_path");
    const struct {
        const char *key, *path;
    } f[] = {
        {"dataset.dataset_root", c->dataset.type == TR_DS_SFT ? c->dataset.dataset_root : NULL},
        {"checkpoint.pretrained_checkpoint", c->checkpoint.pretrained_checkpoint},
        /* A missing load directory means "start fresh" unless the user asked otherwise. */
        {"checkpoint.load", c->checkpoint.exit_on_missing_checkpoint ? c->checkpoint.load : NULL},
        {"tokenizer.tokenizer_model", c->tokenizer.tokenizer_model},
        {"tokenizer.vocab_file", c->tokenizer.vocab_file},
        {"tokenizer.merge_file", c->tokenizer.merge_file},
        {"tokenizer.metadata_path", c->tokenizer.metadata_path},
        {"tokenizer.chat_template_path", c->tokenizer.chat_template_path},
        {"dist.nccl_communicator_config_path", c->dist.nccl_communicator_config_path},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].path) check_path(c, opts, self, d, f[i].key, f[i].path, "");
}
