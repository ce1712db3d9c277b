/* Status codes returned by every library function. Only main() turns them into exit codes. */
#ifndef TR_STATUS_H
#define TR_STATUS_H

typedef enum tr_status {
    TR_OK = 0,
    TR_ERR_INVALID,  /* bad input: CLI, YAML, recipe, checkpoint, dataset, tokenizer */
    TR_ERR_CONFIG,   /* the config failed validation; details are in the diagnostics */
    TR_ERR_NOTFOUND, /* a named thing (recipe, file, key) does not exist */
    TR_ERR_IO,       /* the operating system refused a read or write */
    TR_ERR_NOMEM,
    TR_ERR_COMM,    /* a collective or point-to-point operation failed or timed out */
    TR_ERR_INTERNAL /* a broken invariant inside Trestle: always a bug */
} tr_status;

const char *tr_status_name(tr_status s);

/* Propagate a non-OK status to the caller. */
#define TR_TRY(expr)                                                                               \
    do {                                                                                           \
        tr_status tr_try_s_ = (expr);                                                              \
        if (tr_try_s_ != TR_OK) return tr_try_s_;                                                  \
    } while (0)

#endif
