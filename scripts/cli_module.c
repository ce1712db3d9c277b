/* See scripts/cli_module.h. */
#include "scripts/cli_module.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    return snprintf(buf, cap, "%s/trestle_launch.so", exe) < (int)cap ? 0 : -1;
}

int tr_cli_launch_module(const tr_cli *cli, int *argc, char ***argv) {
    char path[4200];
    if (module_path(path, sizeof path) != 0) {
        fprintf(stderr,
                "run_recipe: cannot locate trestle_launch.so (set TRESTLE_LAUNCH_MODULE)\n");
        return 1;
    }
    /* Global, because Open MPI's own plugins resolve libmpi's symbols from the global scope;
     * never closed: MPI and the CUDA runtime keep threads and handlers until exit. */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "run_recipe: cannot load the launch module: %s\n", dlerror());
        return 1;
    }
    tr_cli_launch_fn entry;
    *(void **)&entry = dlsym(h, TR_CLI_LAUNCH_ENTRY);
    if (!entry) {
        fprintf(stderr, "run_recipe: %s has no %s\n", path, TR_CLI_LAUNCH_ENTRY);
        return 1;
    }
    return entry(cli, argc, argv);
}
