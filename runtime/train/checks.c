/* Settings of the train/dataset/logger sections that the loop cannot honour yet. Each one is a
 * diagnostic naming its key: an error when ignoring it would change the maths, a warning when
 * only a log value is missing. */
#include "runtime/train/checks.h"

static int refuse(tr_diags *d, const char *key, const char *hint, const char *what) {
    return tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL, key, hint,
                       "the CPU training runtime does not implement %s yet", what) != TR_OK;
}

static void not_logged(tr_diags *d, const char *key, const char *what) {
    tr_diag_add(d, TR_SEV_WARNING, "runtime.not_logged", NULL, key, "set it to false",
                "%s is not logged by the CPU training runtime yet", what);
}

int tr_train_check_features(const tr_config *c, tr_diags *d) {
    int bad = 0;
    if (c->dataset.reset_position_ids == 1)
        bad |= refuse(d, "dataset.reset_position_ids", "set dataset.reset_position_ids=false",
                      "position ids restarting at document boundaries");
    if (c->dataset.reset_attention_mask == 1)
        bad |= refuse(d, "dataset.reset_attention_mask", "set dataset.reset_attention_mask=false",
                      "attention masks cut at document boundaries");
    if (!c->train.rampup_batch_size.null)
        bad |= refuse(d, "train.rampup_batch_size", "set train.rampup_batch_size=null",
                      "batch-size ramp-up");
    if (c->logger.log_num_zeros_in_grad || c->optimizer.log_num_zeros_in_grad)
        not_logged(d, "logger.log_num_zeros_in_grad", "the number of zero gradients");
    if (c->logger.log_memory) not_logged(d, "logger.log_memory", "device memory");
    return bad;
}
