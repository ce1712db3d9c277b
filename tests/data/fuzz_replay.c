/* Replays a fuzz corpus without libFuzzer, so CI runs every harness on every build: each file
 * given (or each file in each directory given) is fed to LLVMFuzzerTestOneInput as is, then as a
 * fixed number of deterministic mutations (bit flips, interesting bytes, cuts, splices). A crash,
 * a sanitizer report or a leak fails the test; the harness itself checks its invariants. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t next(uint64_t *s) { /* splitmix64: the same mutations on every run */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void mutate_and_run(const uint8_t *data, size_t size, int rounds, uint64_t seed) {
    size_t cap = size * 2 + 16;
    uint8_t *buf = malloc(cap);
    static const uint8_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\', '{', '[', ' ', 0xc3};
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, data, size);
        size_t n = size;
        int edits = 1 + (int)(next(&seed) % 4);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = next(&seed) % n;
            switch (next(&seed) % 5) {
            case 0:
                buf[at] ^= (uint8_t)(1u << (next(&seed) % 8));
                break;
            case 1:
                buf[at] = interesting[next(&seed) % sizeof interesting];
                break;
            case 2:
                n = at;
                break; /* cut */
            case 3: {  /* duplicate a chunk */
                size_t len = next(&seed) % (n - at + 1);
                if (len > cap - n) len = cap - n;
                memmove(buf + at + len, buf + at, n - at);
                n += len;
            } break;
            case 4:
                memset(buf + at, 0xff, n - at < 8 ? n - at : 8);
                break;
            }
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
}

static int run_file(const char *path, int rounds) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc((size_t)len + 1);
    size_t n = fread(data, 1, (size_t)len, f);
    fclose(f);
    LLVMFuzzerTestOneInput(data, n);
    uint64_t seed = 0;
    for (const char *c = path; *c; c++) seed = seed * 131 + (uint8_t)*c;
    mutate_and_run(data, n, rounds, seed);
    free(data);
    return 1;
}

int main(int argc, char **argv) {
    int rounds = 200, files = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--rounds=", 9)) {
            rounds = atoi(argv[i] + 9);
            continue;
        }
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: %s does not exist\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            files += run_file(argv[i], rounds);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            files += run_file(path, rounds);
        }
        if (d) closedir(d);
    }
    printf("fuzz_replay: %d inputs, %d mutations each, no failure\n", files, rounds);
    return files > 0 ? 0 : 1;
}
