/* Runs a fuzz target without libFuzzer: every file of a corpus directory (or single files), then a
 * fixed-seed mutation loop over the corpus, so CI exercises the harness deterministically under
 * the sanitizers. Usage: replay CORPUS_DIR_OR_FILE... [--iterations N] [--seed S] */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MUTANT 8192

typedef struct input {
    uint8_t *data;
    size_t size;
} input;

typedef struct corpus {
    input *v;
    int n, cap;
} corpus;

static int add_file(corpus *c, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    input in = {NULL, 0};
    size_t cap = 0;
    for (;;) {
        if (in.size == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *d = realloc(in.data, cap);
            if (!d) abort();
            in.data = d;
        }
        size_t got = fread(in.data + in.size, 1, cap - in.size, f);
        if (!got) break;
        in.size += got;
    }
    fclose(f);
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->v = realloc(c->v, (size_t)c->cap * sizeof *c->v);
        if (!c->v) abort();
    }
    c->v[c->n++] = in;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Files of a directory in name order, so runs are reproducible. */
static int add_path(corpus *c, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) return add_file(c, path);
    DIR *dir = opendir(path);
    if (!dir) return 1;
    char **names = NULL;
    int n = 0, errors = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
        sprintf(names[n++], "%s/%s", path, e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        errors += add_file(c, names[i]);
        free(names[i]);
    }
    free(names);
    return errors;
}

static uint64_t rng_state;

static uint64_t next_rand(void) {
    uint64_t x = rng_state; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static size_t below(size_t n) {
    return n ? (size_t)(next_rand() % n) : 0;
}

/* Bytes that matter to the grammars, so mutations reach the interesting branches. */
static const char special[] = "[]{},:'\"=+~-#&*!|>\\$\n\t \0.0123456789";

static size_t mutate(uint8_t *buf, size_t size, const corpus *c) {
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds; r++) {
        switch (below(6)) {
        case 0: /* bit flip */
            if (size) buf[below(size)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* insert a byte */
        case 2:
            if (size < MAX_MUTANT) {
                size_t at = below(size + 1);
                memmove(buf + at + 1, buf + at, size - at);
                buf[at] =
                    below(3) ? (uint8_t)special[below(sizeof special - 1)] : (uint8_t)below(256);
                size++;
            }
            break;
        case 3: /* delete a run */
            if (size) {
                size_t at = below(size), len = 1 + below(size - at < 8 ? size - at : 8);
                memmove(buf + at, buf + at + len, size - at - len);
                size -= len;
            }
            break;
        case 4: { /* splice: our prefix, another input's suffix */
            const input *o = &c->v[below((size_t)c->n)];
            size_t cut = below(size + 1), from = below(o->size + 1);
            size_t len = o->size - from;
            if (cut + len > MAX_MUTANT) len = MAX_MUTANT - cut;
            memcpy(buf + cut, o->data + from, len);
            size = cut + len;
            break;
        }
        case 5: /* duplicate a chunk (deep nesting, long lists) */
            if (size) {
                size_t at = below(size), len = 1 + below(size - at < 32 ? size - at : 32);
                if (size + len <= MAX_MUTANT) {
                    memmove(buf + at + len, buf + at, size - at);
                    size += len;
                }
            }
            break;
        }
    }
    return size;
}

int main(int argc, char **argv) {
    corpus c = {0};
    long iterations = 0;
    uint64_t seed = 0x7265706c6179ull;
    int errors = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
            iterations = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else
            errors += add_path(&c, argv[i]);
    }
    if (errors || c.n == 0) {
        fprintf(stderr, "replay: no corpus (usage: replay DIR_OR_FILE... [--iterations N])\n");
        return 2;
    }
    for (int i = 0; i < c.n; i++) LLVMFuzzerTestOneInput(c.v[i].data, c.v[i].size);
    rng_state = seed ? seed : 1;
    uint8_t *buf = malloc(MAX_MUTANT);
    if (!buf) abort();
    for (long it = 0; it < iterations; it++) {
        const input *in = &c.v[below((size_t)c.n)];
        size_t size = in->size < MAX_MUTANT ? in->size : MAX_MUTANT;
        memcpy(buf, in->data, size);
        size = mutate(buf, size, &c);
        LLVMFuzzerTestOneInput(buf, size);
    }
    printf("replay: %d corpus inputs and %ld mutants passed\n", c.n, iterations);
    free(buf);
    for (int i = 0; i < c.n; i++) free(c.v[i].data);
    free(c.v);
    return 0;
}
