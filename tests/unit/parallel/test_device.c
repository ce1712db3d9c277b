/* The device layer (runtime/device/device.h): backend selection and its diagnostics, the host
 * backend, and the cpu-strict test mode, whose whole point is that a host access to a device buffer
 * faults and a host pointer handed to an op is refused. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "tests/unit/harness.h"

/* Whether reading p in a child process kills it with SIGSEGV. */
static bool read_faults(const volatile float *p) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not a sanitizer's report: the plain fault */
        float v = *p;
        _exit(v == 12345.0f ? 3 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

static void test_parse_and_diagnostics(void) {
    tr_device_kind k;
    CHECK(tr_device_kind_parse(NULL, &k) == TR_OK && k == TR_DEVICE_CPU);
    CHECK(tr_device_kind_parse("", &k) == TR_OK && k == TR_DEVICE_CPU);
    CHECK(tr_device_kind_parse("cuda", &k) == TR_OK && k == TR_DEVICE_CUDA);
    CHECK(tr_device_kind_parse("cpu-strict", &k) == TR_OK && k == TR_DEVICE_CPU_STRICT);
    CHECK(tr_device_kind_parse("cpu-count", &k) == TR_OK && k == TR_DEVICE_CPU_COUNT);
    CHECK(tr_device_kind_parse("CUDA", &k) == TR_ERR_INVALID);

    tr_diags d;
    tr_diags_init(&d);
    tr_device *dev = NULL;
    setenv("TRESTLE_DEVICE", "gpu0", 1);
    CHECK(tr_device_open_from_env(0, 1, &d, &dev) == TR_ERR_CONFIG);
    CHECK(dev == NULL);
    CHECK(tr_diags_find(&d, "device.unknown") != NULL);
    unsetenv("TRESTLE_DEVICE");
    CHECK(tr_device_open_from_env(0, 1, &d, &dev) == TR_OK);
    CHECK(dev == tr_device_host());
    CHECK(tr_device_host_visible(dev));
    tr_device_close(dev); /* the host device is never freed */
    CHECK(tr_device_ops(tr_device_host()) == tr_ops_cpu());

    /* cuda is either usable here or a diagnostic, never a crash. */
    tr_diags_clear(&d);
    tr_status st = tr_device_open(TR_DEVICE_CUDA, 0, 1, &d, &dev);
    if (st == TR_OK) {
        CHECK(!tr_device_host_visible(dev));
        tr_device_close(dev);
    } else {
        CHECK(st == TR_ERR_CONFIG);
        CHECK(tr_diags_find(&d, "device.unavailable") != NULL);
    }
    tr_diags_free(&d);
}

static void test_host_backend(void) {
    tr_device *dev = tr_device_host();
    float *x = NULL, *y = NULL;
    CHECK(tr_device_alloc(dev, TR_MEM_PARAMS, 5 * sizeof(float), (void **)&x) == TR_OK);
    CHECK(tr_device_alloc(dev, TR_MEM_GRADS, 5 * sizeof(float), (void **)&y) == TR_OK);
    for (int i = 0; i < 5; i++) CHECK(x[i] == 0.0f); /* zeroed */
    float h[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    CHECK(tr_device_to_device(dev, x, h, sizeof h) == TR_OK);
    CHECK(tr_device_copy(dev, y, x, sizeof h) == TR_OK);
    CHECK(tr_device_to_host(dev, back, y, sizeof back) == TR_OK);
    CHECK(memcmp(h, back, sizeof h) == 0);
    float ss = 0.0f;
    CHECK(tr_device_sum_squares(dev, x, 5, &ss) == TR_OK);
    CHECK(ss == 55.0f);
    CHECK(tr_device_memset0(dev, x, sizeof h) == TR_OK);
    CHECK(x[4] == 0.0f);
    tr_device_free(dev, TR_MEM_GRADS, y);
    tr_device_free(dev, TR_MEM_PARAMS, x);
}

static void test_strict_guards_buffers(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_device *dev = NULL;
    CHECK(tr_device_open(TR_DEVICE_CPU_STRICT, 0, 1, &d, &dev) == TR_OK);
    if (!dev) return;
    CHECK(!tr_device_host_visible(dev));
    const tr_ops *ops = tr_device_ops(dev);
    CHECK(ops != tr_ops_cpu());
    float *x = NULL, *y = NULL;
    CHECK(tr_device_alloc(dev, TR_MEM_ACTIVATIONS, 6 * sizeof(float), (void **)&x) == TR_OK);
    CHECK(tr_device_alloc(dev, TR_MEM_WORKSPACE, 6 * sizeof(float), (void **)&y) == TR_OK);

    /* The host cannot read a device buffer outside the device layer. */
    CHECK(read_faults(x));
    CHECK(read_faults(y + 5));

    /* Through copies and ops it works, with the CPU op's results. */
    float h[6] = {1, -2, 3, -4, 5, -6}, back[6] = {0};
    CHECK(tr_device_to_host(dev, back, x, sizeof back) == TR_OK);
    for (int i = 0; i < 6; i++) CHECK(back[i] == 0.0f); /* zeroed */
    CHECK(tr_device_to_device(dev, x, h, sizeof h) == TR_OK);
    CHECK(ops->copy_2d(y, 3, x + 3, 3, 1, 3) == TR_OK);
    CHECK(ops->scale(y, 3, 2.0f) == TR_OK);
    CHECK(tr_device_to_host(dev, back, y, 3 * sizeof(float)) == TR_OK);
    CHECK(back[0] == 2 * h[3] && back[1] == 2 * h[4] && back[2] == 2 * h[5]);
    float ss = 0.0f;
    CHECK(tr_device_sum_squares(dev, x, 6, &ss) == TR_OK);
    CHECK(ss == 91.0f);
    CHECK(read_faults(x)); /* protected again after ops and copies */

    /* A host pointer where device memory is required is refused, not used. */
    float host_out = -1.0f;
    CHECK(ops->sum_squares(&host_out, x, 6) == TR_ERR_INVALID);
    CHECK(host_out == -1.0f);
    CHECK(ops->add(x, h, 6) == TR_ERR_INVALID);
    /* Copies: the device side must be a device buffer, the range inside it, the host side not
     * a device buffer. */
    CHECK(tr_device_to_device(dev, back, h, sizeof h) == TR_ERR_INVALID);
    CHECK(tr_device_to_host(dev, y, x, sizeof h) == TR_ERR_INVALID);
    CHECK(tr_device_copy(dev, y, x, 8192) == TR_ERR_INVALID);

    tr_device_free(dev, TR_MEM_WORKSPACE, y);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, x);
    CHECK(tr_device_peak(dev, TR_MEM_ACTIVATIONS) >= 6 * sizeof(float));
    tr_device_close(dev);
    tr_diags_free(&d);
}

/* cpu-count: host memory the host may touch, each allocation counted in whole pages per kind
 * (the planner's --gpu cpu rounding), the peak kept after a free. */
static void test_count_counts_pages(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_device *dev = NULL;
    CHECK(tr_device_open(TR_DEVICE_CPU_COUNT, 0, 1, &d, &dev) == TR_OK);
    if (!dev) return;
    CHECK(tr_device_host_visible(dev) && tr_device_ops(dev) == tr_ops_cpu());
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* opening takes the device scratch (one page) */
    CHECK(tr_device_peak(dev, TR_MEM_WORKSPACE) == page);
    float *x = NULL, *y = NULL;
    CHECK(tr_device_alloc(dev, TR_MEM_ACTIVATIONS, page + sizeof(float), (void **)&x) == TR_OK);
    CHECK(x && x[0] == 0.0f && x[page / sizeof(float)] == 0.0f); /* zeroed, host-visible */
    x[3] = 1.0f;
    CHECK(tr_device_peak(dev, TR_MEM_ACTIVATIONS) == 2 * page);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, x);
    CHECK(tr_device_alloc(dev, TR_MEM_ACTIVATIONS, 0, (void **)&y) == TR_OK);
    CHECK(tr_device_peak(dev, TR_MEM_ACTIVATIONS) == 2 * page); /* 1 page in use, peak 2 */
    tr_device_free(dev, TR_MEM_ACTIVATIONS, y);
    CHECK(tr_device_peak(dev, TR_MEM_PARAMS) == 0);
    tr_device_close(dev);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_parse_and_diagnostics), TR_TEST(test_host_backend),
             TR_TEST(test_strict_guards_buffers), TR_TEST(test_count_counts_pages))
