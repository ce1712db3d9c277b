/* preprocess_data: JSONL -> Megatron .bin/.idx (see docs/data.md).
 *   preprocess_data --input docs.jsonl --output-prefix out/my --json-keys text
 *                   --tokenizer-type hf --tokenizer-model tok/ --workers 8 --append-eod
 * Writes out/my_text_document.{bin,idx}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/preprocess.h"

static void usage(FILE *f) {
    fprintf(f, "usage: preprocess_data --input FILE.jsonl --output-prefix PREFIX\n"
               "         [--json-keys KEY...] (default text) [--workers N] (default 1)\n"
               "         [--append-eod] [--quiet]\n"
               "         --tokenizer-type byte|null|gpt2|hf\n"
               "         [--vocab-file vocab.json --merge-file merges.txt]   (gpt2)\n"
               "         [--tokenizer-model tokenizer.json|DIR]             (hf)\n"
               "         [--vocab-size N]                                   (null)\n");
}

int main(int argc, char **argv) {
    tr_preprocess_opts o = {0};
    const char *keys[16] = {"text"};
    int n_keys = 0;
    const char *type = NULL, *vocab = NULL, *merges = NULL, *model = NULL;
    long long vocab_size = 0;
    bool quiet = false;
    o.workers = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--append-eod")) {
            o.append_eod = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--json-keys") && next) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && n_keys < 16)
                keys[n_keys++] = argv[++i];
        } else if (next && !strcmp(a, "--input")) {
            o.input = argv[++i];
        } else if (next && !strcmp(a, "--output-prefix")) {
            o.output_prefix = argv[++i];
        } else if (next && !strcmp(a, "--workers")) {
            o.workers = atoi(argv[++i]);
        } else if (next && !strcmp(a, "--tokenizer-type")) {
            type = argv[++i];
        } else if (next && !strcmp(a, "--vocab-file")) {
            vocab = argv[++i];
        } else if (next && !strcmp(a, "--merge-file")) {
            merges = argv[++i];
        } else if (next && !strcmp(a, "--tokenizer-model")) {
            model = argv[++i];
        } else if (next && !strcmp(a, "--vocab-size")) {
            vocab_size = atoll(argv[++i]);
        } else {
            fprintf(stderr, "preprocess_data: unknown or incomplete argument %s (argv[%d])\n", a,
                    i);
            usage(stderr);
            return 2;
        }
    }
    if (!o.input || !o.output_prefix || !type || o.workers < 1 || o.workers > 256) {
        fprintf(stderr, "preprocess_data: --input, --output-prefix and --tokenizer-type are "
                        "required; --workers must be 1..256\n");
        usage(stderr);
        return 2;
    }
    o.json_keys = keys;
    o.n_keys = n_keys ? n_keys : 1;
    o.progress = quiet ? NULL : stderr;
    tr_diags d;
    tr_diags_init(&d);
    tr_tokenizer *tok = NULL;
    tr_status s;
    if (!strcmp(type, "byte"))
        s = tr_tokenizer_byte_level(&tok);
    else if (!strcmp(type, "null"))
        s = tr_tokenizer_null(vocab_size, -1, -1, &tok, &d);
    else if (!strcmp(type, "gpt2") && vocab && merges)
        s = tr_tokenizer_gpt2(vocab, merges, &tok, &d);
    else if (!strcmp(type, "hf") && model)
        s = tr_tokenizer_hf(model, &tok, &d);
    else {
        fprintf(stderr, "preprocess_data: --tokenizer-type %s needs its files (see --help)\n",
                type);
        return 2;
    }
    tr_preprocess_stats st;
    if (s == TR_OK) s = tr_preprocess_jsonl(&o, tok, &st, &d);
    tr_diags_print_text(&d, stderr, isatty(2));
    if (s == TR_OK && !quiet)
        fprintf(stderr, "%lld documents, %lld tokens, %.1f MB in %.2f s (%.2f MB/s)\n",
                st.documents, st.tokens, (double)st.bytes / 1e6, st.seconds,
                (double)st.bytes / 1e6 / (st.seconds > 0 ? st.seconds : 1e-9));
    tr_tokenizer_free(tok);
    tr_diags_free(&d);
    return s == TR_OK ? 0 : 1;
}
