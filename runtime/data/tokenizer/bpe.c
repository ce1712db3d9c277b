#include "runtime/data/tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* GPT-2's printable stand-ins: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves;
 * the 68 others map, in byte order, to U+0100 onwards. */
static bool printable_byte(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

int tr_bpe_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return printable_byte((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    int k = (int)cp - 256;
    for (int b = 0; b < 256; b++)
        if (!printable_byte(b) && k-- == 0) return b;
    return -1;
}

int tr_bpe_unmap(const char *s, size_t len, char *out) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    int n = 0;
    while (p < end) {
        uint32_t cp;
        if (p[0] < 0x80) {
            cp = p[0];
            p++;
        } else if ((p[0] & 0xe0) == 0xc0 && end - p >= 2 && (p[1] & 0xc0) == 0x80) {
            cp = ((uint32_t)(p[0] & 0x1f) << 6) | (p[1] & 0x3f);
            p += 2;
        } else {
            return -1; /* every stand-in is below U+0800 */
        }
        int b = tr_bpe_unicode_to_byte(cp);
        if (b < 0) return -1;
        out[n++] = (char)b;
    }
    return n;
}

static uint64_t hash_bytes(const char *s, size_t len) {
    return XXH3_64bits(s, len);
}

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

tr_status tr_bpe_init(tr_bpe *b, int64_t n_ids) {
    memset(b, 0, sizeof *b);
    if (n_ids <= 0 || n_ids > INT32_MAX / 4) return TR_ERR_INVALID;
    b->n_ids = n_ids;
    b->token = calloc((size_t)n_ids, sizeof *b->token);
    b->token_len = calloc((size_t)n_ids, sizeof *b->token_len);
    b->vocab_cap = 16;
    while (b->vocab_cap < (size_t)n_ids * 2) b->vocab_cap *= 2;
    b->vocab = calloc(b->vocab_cap, sizeof *b->vocab);
    b->merges_cap = b->vocab_cap;
    b->merges = calloc(b->merges_cap, sizeof *b->merges);
    for (int i = 0; i < 256; i++) b->byte_id[i] = -1;
    if (!b->token || !b->token_len || !b->vocab || !b->merges) {
        tr_bpe_free(b);
        return TR_ERR_NOMEM;
    }
    return TR_OK;
}

void tr_bpe_free(tr_bpe *b) {
    if (b->token)
        for (int64_t i = 0; i < b->n_ids; i++) free(b->token[i]);
    free(b->token);
    free(b->token_len);
    free(b->vocab);
    free(b->merges);
    memset(b, 0, sizeof *b);
}

int64_t tr_bpe_lookup(const tr_bpe *b, const char *s, size_t len) {
    uint64_t h = hash_bytes(s, len);
    for (size_t i = h & (b->vocab_cap - 1);; i = (i + 1) & (b->vocab_cap - 1)) {
        const tr_bpe_entry *e = &b->vocab[i];
        if (!e->used) return -1;
        if (e->key == h && (size_t)b->token_len[e->a] == len && memcmp(b->token[e->a], s, len) == 0)
            return e->a;
    }
}

tr_status tr_bpe_add_token(tr_bpe *b, int64_t id, const char *s, size_t len) {
    if (id < 0 || id >= b->n_ids || b->token[id] || len > INT32_MAX) return TR_ERR_INVALID;
    if (tr_bpe_lookup(b, s, len) >= 0) return TR_ERR_INVALID; /* two ids for the same bytes */
    b->token[id] = malloc(len + 1);
    if (!b->token[id]) return TR_ERR_NOMEM;
    memcpy(b->token[id], s, len);
    b->token[id][len] = '\0';
    b->token_len[id] = (int32_t)len;
    uint64_t h = hash_bytes(s, len);
    size_t i = h & (b->vocab_cap - 1);
    while (b->vocab[i].used) i = (i + 1) & (b->vocab_cap - 1);
    b->vocab[i] = (tr_bpe_entry){h, (int32_t)id, 0, true};
    if (len == 1) b->byte_id[(unsigned char)s[0]] = (int32_t)id;
    return TR_OK;
}

static const tr_bpe_entry *find_merge(const tr_bpe *b, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (size_t i = mix(key) & (b->merges_cap - 1);; i = (i + 1) & (b->merges_cap - 1)) {
        const tr_bpe_entry *e = &b->merges[i];
        if (!e->used) return NULL;
        if (e->key == key) return e;
    }
}

static tr_status grow_merges(tr_bpe *b) {
    size_t cap = b->merges_cap * 2;
    tr_bpe_entry *m = calloc(cap, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    for (size_t j = 0; j < b->merges_cap; j++) {
        if (!b->merges[j].used) continue;
        size_t i = mix(b->merges[j].key) & (cap - 1);
        while (m[i].used) i = (i + 1) & (cap - 1);
        m[i] = b->merges[j];
    }
    free(b->merges);
    b->merges = m;
    b->merges_cap = cap;
    return TR_OK;
}

tr_status tr_bpe_add_merge(tr_bpe *b, int64_t left, int64_t right, int64_t *merged) {
    *merged = -1;
    if (left < 0 || right < 0 || left >= b->n_ids || right >= b->n_ids || !b->token[left] ||
        !b->token[right])
        return TR_ERR_INVALID;
    size_t ll = (size_t)b->token_len[left], rl = (size_t)b->token_len[right];
    char stack[256], *cat = ll + rl <= sizeof stack ? stack : malloc(ll + rl);
    if (!cat) return TR_ERR_NOMEM;
    memcpy(cat, b->token[left], ll);
    memcpy(cat + ll, b->token[right], rl);
    int64_t id = tr_bpe_lookup(b, cat, ll + rl);
    if (cat != stack) free(cat);
    if (id < 0) return TR_ERR_NOTFOUND;
    *merged = id;
    if (find_merge(b, (int32_t)left, (int32_t)right)) return TR_OK; /* HF keeps the first rank */
    if (2 * (b->n_merges + 1) > b->merges_cap) TR_TRY(grow_merges(b));
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = mix(key) & (b->merges_cap - 1);
    while (b->merges[i].used) i = (i + 1) & (b->merges_cap - 1);
    b->merges[i] = (tr_bpe_entry){key, (int32_t)b->n_merges, (int32_t)id, true};
    b->n_merges++;
    return TR_OK;
}

tr_status tr_bpe_finish(tr_bpe *b) {
    for (int i = 0; i < 256; i++)
        if (b->byte_id[i] < 0) return TR_ERR_NOTFOUND;
    return TR_OK;
}

static int32_t pair_rank(const tr_bpe *b, int32_t l, int32_t r, int32_t *merged) {
    const tr_bpe_entry *e = find_merge(b, l, r);
    if (!e) return INT32_MAX;
    *merged = e->b;
    return e->a;
}

tr_status tr_bpe_encode_word(const tr_bpe *b, const char *w, size_t n, tr_token_ids *out) {
    if (n == 0) return TR_OK;
    if (b->ignore_merges) {
        int64_t whole = tr_bpe_lookup(b, w, n);
        if (whole >= 0) return tr_token_ids_push(out, whole);
    }
    int32_t stack_sym[128], stack_rank[128], stack_merged[128];
    int32_t *sym = stack_sym, *rank = stack_rank, *merged = stack_merged;
    if (n > 128) {
        sym = malloc(n * sizeof *sym);
        rank = malloc(n * sizeof *rank);
        merged = malloc(n * sizeof *merged);
        if (!sym || !rank || !merged) {
            free(sym), free(rank), free(merged);
            return TR_ERR_NOMEM;
        }
    }
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = b->byte_id[(unsigned char)w[i]];
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(b, sym[i], sym[i + 1], &merged[i]);
    /* Lowest rank first, leftmost among equals: the order Hugging Face's BPE applies merges in. */
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = merged[best];
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (m - best - 2) * sizeof *merged);
        m--;
        if (best > 0) rank[best - 1] = pair_rank(b, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < m) rank[best] = pair_rank(b, sym[best], sym[best + 1], &merged[best]);
    }
    tr_status s = TR_OK;
    for (size_t i = 0; i < m && s == TR_OK; i++) s = tr_token_ids_push(out, sym[i]);
    if (sym != stack_sym) free(sym), free(rank), free(merged);
    return s;
}
