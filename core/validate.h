/* finalize() and validate(): derived values, then every rule, all violations at once. */
#ifndef TR_VALIDATE_H
#define TR_VALIDATE_H

#include <stdbool.h>

#include "core/config.h"

/* The cluster the config is resolved for: the MPI world of a real run, or --world-size /
 * --gpus-per-node for one you are not on. */
typedef struct tr_world {
    int world_size;    /* >= 1 */
    int gpus_per_node; /* >= 1; used for warnings such as TP spanning nodes */
} tr_world;

/* Fill derived values (derived.* and the null-means-computed model fields such as
 * ffn_hidden_size, kv_channels, num_query_groups, expert_tensor_parallel_size), apply the
 * mixed-precision preset and comm-overlap defaults, and record each change with origin
 * "derived". Never rejects: impossible inputs are left for validate() to report. */
tr_status tr_config_finalize(tr_config *c, const tr_world *w, tr_diags *d);
/* The same against the caller's `before`, which must hold c's values (the planner's search
 * keeps one in step with its scratch candidate instead of a fresh copy and free per call); the
 * ids of the fields finalize changed go to changed[0..cap), their count to *n_changed (it may
 * exceed cap). */
tr_status tr_config_finalize_against(tr_config *c, const tr_world *w, const tr_config *before,
                                     int *changed, int cap, int *n_changed, tr_diags *d);

typedef struct tr_validate_opts {
    /* Checking a catalog rather than a launch: rules about inputs only a real launch supplies
     * (a pretrained checkpoint for SFT/LoRA, dataset files that must exist) are reported as
     * notes with id prefix "launch." instead of errors, and capability refusals (runtime.*) are
     * notes under their own ids: the entry is valid, this runtime cannot train it yet. */
    bool catalog_mode;
    /* Check that files named by TR_F_LAUNCH fields exist (off for --dry-run on another machine). */
    bool check_files;
    /* Megatron's rules alone: leave out the capability rules (runtime.*), what this runtime
     * cannot run yet. For checks of a configuration's meaning apart from this runtime. */
    bool skip_capability;
    /* Inspecting a config (--print-config, --explain, a plain --dry-run): rules about launch
     * inputs are notes "launch.<id>", as in catalog mode, while every other rule still fails. */
    bool defer_launch_inputs;
    /* Errors alone: leave out the rules whose severity is a warning or a note. A rule reports
     * only at its own severity (tr_rule_fail), so the errors are those of a full run; for
     * callers that need only the verdict (the layout search, docs/plan.md). */
    bool errors_only;
} tr_validate_opts;

/* Run every rule. Returns TR_ERR_CONFIG when any error was reported, TR_OK otherwise
 * (warnings alone do not fail; run_recipe --strict promotes them). */
tr_status tr_config_validate(const tr_config *c, const tr_validate_opts *opts, tr_diags *d);

/* The rule table: stable ids, what each rule checks, and how to fix a violation. Used by
 * validate() and to generate docs/validation-rules.md. */
typedef struct tr_rule {
    const char *id;       /* "parallel.heads_divisible_by_tp" */
    tr_severity severity; /* TR_SEV_ERROR, TR_SEV_WARNING or TR_SEV_NOTE */
    bool launch_input;    /* depends on something only a launch supplies */
    const char *summary;  /* one sentence: the condition that must hold */
    void (*check)(const tr_config *c, const tr_validate_opts *opts, const struct tr_rule *self,
                  tr_diags *d);
} tr_rule;

extern const tr_rule tr_rules[];
extern const int tr_rule_count;

/* Capability rules (ids "runtime.*") say what the training runtime can run. validate() reports
 * them with every other rule; the runtime calls tr_runtime_check before it builds anything, so a
 * config the dry run accepts never stops at launch for a configuration reason, and one it
 * refuses is refused at launch under the same ids, keys and fixes. */
bool tr_rule_is_capability(const tr_rule *r);

/* Run the capability rules alone. Returns TR_ERR_CONFIG when any of them reported an error. */
tr_status tr_runtime_check(const tr_config *c, tr_diags *d);

#endif
