/* See scripts/cli_module.h. */
#include "scripts/cli_module.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A CUDA build's run on a CUDA device opens the module with the CUDA runtime in it; every other
 * run opens the one without, so a host run maps no CUDA library (docs/cli.md). */
static const char *module_name(void) {
#ifdef TRESTLE_LAUNCH_CUDA_MODULE
    const char *dev = getenv("TRESTLE_DEVICE");
    if (dev && strcmp(dev, "cuda") == 0) return "trestle_launch_cuda.so";
#endif
    return "trestle_launch.so";
}

/* The module sits beside the executable that was run, wherever it was copied to with it. */
static int module_path(char *buf, size_t cap) {
    const char *env = getenv("TRESTLE_LAUNCH_MODULE");
    if (env && *env) return snprintf(buf, cap, "%s", env) < (int)cap ? 0 : -1;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    return snprintf(buf, cap, "%s/%s", exe, module_name()) < (int)cap ? 0 : -1;
}

/* The module's symbol `name`, or NULL with the reason in `why`. */
static void *module_symbol(const char *name, char *why, size_t cap) {
    char path[4200];
    if (module_path(path, sizeof path) != 0) {
        snprintf(why, cap, "cannot locate %s (set TRESTLE_LAUNCH_MODULE)", module_name());
        return NULL;
    }
    /* Global, because Open MPI's own plugins resolve libmpi's symbols from the global scope;
     * never closed: MPI and the CUDA runtime keep threads and handlers until exit. */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(why, cap, "cannot load the launch module: %s", dlerror());
        return NULL;
    }
    void *sym = dlsym(h, name);
    if (!sym) snprintf(why, cap, "%s has no %s", path, name);
    return sym;
}

int tr_cli_launch_module(const tr_cli *cli, int *argc, char ***argv) {
    char why[4400];
    tr_cli_launch_fn entry;
    *(void **)&entry = module_symbol(TR_CLI_LAUNCH_ENTRY, why, sizeof why);
    if (!entry) {
        fprintf(stderr, "run_recipe: %s\n", why);
        return 1;
    }
    return entry(cli, argc, argv);
}

tr_status tr_cli_plan_module(const tr_cli *cli, tr_diags *d) {
    char why[4400];
    tr_cli_plan_fn entry;
    *(void **)&entry = module_symbol(TR_CLI_PLAN_ENTRY, why, sizeof why);
    if (!entry) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.launch_module", NULL, NULL,
                    "install trestle_launch.so beside run_recipe, or name it with "
                    "TRESTLE_LAUNCH_MODULE",
                    "%s", why);
        return TR_ERR_IO;
    }
    return entry(cli, d);
}
