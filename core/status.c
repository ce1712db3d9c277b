#include "core/status.h"

const char *tr_status_name(tr_status s) {
    switch (s) {
    case TR_OK:
        return "ok";
    case TR_ERR_INVALID:
        return "invalid input";
    case TR_ERR_CONFIG:
        return "invalid configuration";
    case TR_ERR_NOTFOUND:
        return "not found";
    case TR_ERR_IO:
        return "I/O error";
    case TR_ERR_NOMEM:
        return "out of memory";
    case TR_ERR_COMM:
        return "communication error";
    case TR_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}
