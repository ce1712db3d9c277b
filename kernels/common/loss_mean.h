/* The microbatch loss: the mean of the per-row losses over the rows that train (target >= 0),
 * summed in double in row order and rounded once, so the CPU op and the one-thread CUDA kernel
 * give the same bits. 0 when no row trains. */
#ifndef TR_KERNELS_LOSS_MEAN_H
#define TR_KERNELS_LOSS_MEAN_H

#include <stdint.h>

#include "kernels/common/hostdev.h"

TR_HOST_DEVICE float tr_masked_loss_mean(const float *losses, const int32_t *targets, int rows) {
    double sum = 0.0;
    int64_t valid = 0;
    for (int r = 0; r < rows; r++) {
        if (targets[r] < 0) continue;
        sum += losses[r];
        valid++;
    }
    return valid ? (float)(sum / (double)valid) : 0.0f;
}

#endif
