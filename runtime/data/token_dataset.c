/* See runtime/data/token_dataset.h: what every token-dataset source shares. */
#include "runtime/data/token_dataset.h"

#include <stdlib.h>

#include "kernels/common/philox.h"

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t tr_train_data_shuffle(int64_t index, int64_t n, uint64_t seed) {
    if (n <= 1) return 0;
    uint64_t epoch = (uint64_t)(index / n);
    int64_t j = index % n;
    tr_philox4 r = tr_philox4x32_10(epoch, seed ^ 0x73687566ull);
    uint64_t a64 = ((uint64_t)r.v[0] << 32 | r.v[1]) % (uint64_t)n;
    int64_t a = (int64_t)a64;
    if (a == 0) a = 1;
    while (gcd64(a, n) != 1) a = a + 1 < n ? a + 1 : 1;
    int64_t b = (int64_t)((((uint64_t)r.v[2] << 32) | r.v[3]) % (uint64_t)n);
    return (int64_t)(((__int128)a * j + b) % n);
}

tr_status tr_train_data_split(const char *split, const char *fallback, double out[3], tr_diags *d) {
    const char *s = split ? split : fallback;
    double v[3] = {0, 0, 0}, sum = 0.0;
    int n = 0;
    const char *p = s;
    while (*p && n < 3) {
        char *end;
        v[n] = strtod(p, &end);
        if (end == p || v[n] < 0) break;
        sum += v[n++];
        p = end;
        if (*p == ',' || *p == '/') p++;
    }
    if (*p || n == 0 || !(sum > 0))
        return tr_diag_add(d, TR_SEV_ERROR, "data.bad_split", NULL, "dataset.split",
                           "write the split as up to three non-negative weights, e.g. 98,2,0",
                           "cannot read dataset.split \"%s\"", s);
    for (int i = 0; i < 3; i++) out[i] = v[i] / sum;
    return TR_OK;
}
