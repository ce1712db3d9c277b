/* trestle_ckpt: inspect, verify and plan loads of Trestle checkpoints without a training run.
 *   trestle_ckpt info DIR [--tensors]
 *   trestle_ckpt verify DIR
 *   trestle_ckpt can-load DIR --layout tp=2,pp=2,dp=1,vpp=1[,dist_opt=1] | KEY=VALUE...
 *   trestle_ckpt export DIR --hf-out HF_DIR ... / import --hf HF_DIR --out DIR ... (ckpt_hf.h)
 * DIR is a checkpoint root (the tracker picks the iteration; --step N picks another) or one
 * iteration directory. Exit status: 0 yes/ok, 1 usage error, 2 the checkpoint is bad or cannot
 * load under that layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/progress.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/checkpoint/reshard.h"
#include "scripts/ckpt_hf.h"

static int usage(FILE *out) {
    fputs("usage: trestle_ckpt info DIR [--tensors] [--step N]\n"
          "       trestle_ckpt verify DIR [--step N]\n"
          "       trestle_ckpt can-load DIR (--layout tp=T,pp=P,dp=D,vpp=V[,dist_opt=1] | "
          "KEY=VALUE...) [--step N]\n"
          "DIR is a checkpoint.save directory (latest iteration) or one iter_XXXXXXX directory.\n"
          "KEY is one of model.tensor_model_parallel_size, model.pipeline_model_parallel_size,\n"
          "model.virtual_pipeline_model_parallel_size, model.context_parallel_size,\n"
          "model.expert_model_parallel_size, ddp.use_distributed_optimizer, or a --layout key\n"
          "(tp, pp, vpp, dp, cp, ep, dist_opt).\n"
          "       trestle_ckpt export DIR --hf-out HF_DIR ... | import --hf HF_DIR --out DIR ...\n"
          "       (trestle_ckpt export --help: the Hugging Face conversions)\n"
          "Exit status: 0 ok, 1 usage error, 2 bad checkpoint or cannot load.\n",
          out);
    return out == stdout ? 0 : 1;
}

/* An iteration directory (has a manifest) or a root resolved through the tracker. */
static tr_status open_dir(const char *dir, long long step, tr_ckpt_reader **r, tr_diags *d) {
    char manifest[4096];
    snprintf(manifest, sizeof manifest, "%s/%s", dir, TR_CKPT_MANIFEST);
    struct stat st;
    char tracker[4096];
    snprintf(tracker, sizeof tracker, "%s/%s", dir, TR_CKPT_TRACKER);
    bool is_root = stat(tracker, &st) == 0 || step >= 0;
    if (!is_root || stat(manifest, &st) == 0) return tr_ckpt_open(dir, r, d);
    char *iter;
    int64_t it;
    TR_TRY(tr_ckpt_find(dir, step, &iter, &it, d));
    tr_status s = tr_ckpt_open(iter, r, d);
    free(iter);
    return s;
}

static void human(uint64_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

static uint64_t entry_bytes(const tr_ckpt_entry *e) {
    uint64_t n = 0;
    for (int s = 0; s < e->n_shards; s++) n += e->shards[s].bytes;
    return n;
}

static void print_shape(const int64_t *shape, int ndim) {
    printf("[");
    for (int i = 0; i < ndim; i++) printf("%s%lld", i ? ", " : "", (long long)shape[i]);
    printf("]");
}

static int cmd_info(tr_ckpt_reader *r, bool tensors) {
    const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
    const tr_ckpt_layout *l = &m->layout;
    printf("iteration:          %lld\n", (long long)m->iteration);
    printf("format version:     %d\n", TR_CKPT_FORMAT_VERSION);
    printf("code version:       %s\n", m->code_version);
    printf("config fingerprint: %016llx\n", (unsigned long long)m->config_fingerprint);
    printf("layout:             tp=%d pp=%d vpp=%d dp=%d cp=%d ep=%d dist_opt=%d (world %d)\n",
           l->tp, l->pp, l->vpp, l->dp, l->cp, l->ep, l->dist_opt, m->world);
    uint64_t total = 0;
    for (int f = 0; f < m->n_files; f++) total += m->files[f].bytes;
    char h[32];
    human(total, h, sizeof h);
    printf("data files:         %d, %s\n", m->n_files, h);
    const char *kinds[] = {"model", "optimizer", "rng", "state"};
    printf("%-10s %8s %8s %14s\n", "kind", "tensors", "shards", "bytes");
    for (int k = 0; k < 4; k++) {
        int nt = 0, ns = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            if (strcmp(tr_ckpt_tensor_kind(m->tensors[i].name), kinds[k]) != 0) continue;
            nt++;
            ns += m->tensors[i].n_shards;
            bytes += entry_bytes(&m->tensors[i]);
        }
        human(bytes, h, sizeof h);
        printf("%-10s %8d %8d %14s\n", kinds[k], nt, ns, h);
    }
    if (tensors)
        for (int i = 0; i < m->n_tensors; i++) {
            const tr_ckpt_entry *e = &m->tensors[i];
            printf("  %s %s ", e->name, tr_ckpt_dtype_name(e->dtype));
            print_shape(e->shape, e->ndim);
            printf(" shards=%d\n", e->n_shards);
        }
    return 0;
}

static int cmd_verify(tr_ckpt_reader *r, tr_diags *d) {
    const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
    uint64_t total = 0;
    int shards = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        total += entry_bytes(&m->tensors[i]);
        shards += m->tensors[i].n_shards;
    }
    tr_ckpt_progress p;
    tr_ckpt_progress_init(&p, "verify", total, NULL);
    tr_status s = tr_ckpt_verify(r, &p, d);
    tr_ckpt_progress_finish(&p);
    if (s != TR_OK) return 2;
    char h[32];
    human(total, h, sizeof h);
    printf("ok: %d tensors, %d shards, %s verified (iteration %lld)\n", m->n_tensors, shards, h,
           (long long)m->iteration);
    return 0;
}

static int cmd_can_load(tr_ckpt_reader *r, const tr_ckpt_layout *target, tr_diags *d) {
    const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
    tr_ckpt_plan_item *items;
    tr_status s = tr_ckpt_plan(m, target, &items, d);
    if (s == TR_ERR_NOMEM) return 2;
    int counts[3] = {0, 0, 0};
    const char *names[3] = {"identical", "reshard", "impossible"};
    for (int i = 0; i < m->n_tensors; i++) {
        counts[items[i].kind]++;
        printf("  %-10s %s%s%s\n", names[items[i].kind], items[i].name, items[i].why[0] ? ": " : "",
               items[i].why);
    }
    free(items);
    const tr_ckpt_layout *l = &m->layout;
    printf("saved as tp=%d pp=%d vpp=%d dp=%d ep=%d dist_opt=%d; target tp=%d pp=%d vpp=%d "
           "dp=%d ep=%d dist_opt=%d\n",
           l->tp, l->pp, l->vpp, l->dp, l->ep, l->dist_opt, target->tp, target->pp, target->vpp,
           target->dp, target->ep, target->dist_opt);
    printf("%s: %d identical, %d resharded, %d impossible\n",
           counts[2] ? "cannot load" : "can load", counts[0], counts[1], counts[2]);
    return counts[2] ? 2 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return usage(stdout);
    const char *cmd = argv[1];
    if (strcmp(cmd, "export") == 0 || strcmp(cmd, "import") == 0)
        return tr_ckpt_hf_main(argc, argv);
    if (strcmp(cmd, "info") != 0 && strcmp(cmd, "verify") != 0 && strcmp(cmd, "can-load") != 0) {
        fprintf(stderr, "trestle_ckpt: unknown command '%s'\n", cmd);
        return usage(stderr);
    }
    if (argc < 3) return usage(stderr);
    const char *dir = argv[2];
    bool tensors = false, have_layout = false;
    long long step = -1;
    tr_diags d;
    tr_diags_init(&d);
    tr_ckpt_layout target;
    tr_ckpt_layout_init(&target);
    int rc = 0;
    for (int i = 3; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tensors") == 0 && strcmp(cmd, "info") == 0) {
            tensors = true;
        } else if (strcmp(a, "--step") == 0 && i + 1 < argc) {
            char *end;
            step = strtoll(argv[++i], &end, 10);
            if (*end || step < 0) {
                fprintf(stderr, "trestle_ckpt: --step needs an iteration number\n");
                rc = 1;
            }
        } else if (strcmp(cmd, "can-load") == 0 && strcmp(a, "--layout") == 0 && i + 1 < argc) {
            have_layout = true;
            if (tr_ckpt_layout_parse(argv[++i], &target, &d) != TR_OK) rc = 1;
        } else if (strcmp(cmd, "can-load") == 0 && a[0] != '-' && strchr(a, '=')) {
            have_layout = true;
            if (tr_ckpt_layout_parse(a, &target, &d) != TR_OK) rc = 1;
        } else {
            fprintf(stderr, "trestle_ckpt: unexpected argument '%s'\n", a);
            rc = 1;
        }
    }
    if (rc == 0 && strcmp(cmd, "can-load") == 0 && !have_layout) {
        fprintf(stderr, "trestle_ckpt: can-load needs --layout or KEY=VALUE overrides\n");
        rc = 1;
    }
    tr_ckpt_reader *r = NULL;
    if (rc == 0 && open_dir(dir, step, &r, &d) != TR_OK) rc = 2;
    if (rc == 0) {
        if (strcmp(cmd, "info") == 0)
            rc = cmd_info(r, tensors);
        else if (strcmp(cmd, "verify") == 0)
            rc = cmd_verify(r, &d);
        else
            rc = cmd_can_load(r, &target, &d);
    }
    tr_ckpt_close(r);
    tr_diags_print_text(&d, stderr, false);
    if (rc == 1 && d.n_errors) usage(stderr);
    tr_diags_free(&d);
    return rc;
}
