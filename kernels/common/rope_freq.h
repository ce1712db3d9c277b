/* RoPE inverse frequencies, including Llama-3's piecewise rescaling, in double so that both
 * backends build the same cos/sin table regardless of their float library. */
#ifndef TR_KERNELS_ROPE_FREQ_H
#define TR_KERNELS_ROPE_FREQ_H

#include <math.h>

#include "kernels/common/hostdev.h"

typedef struct tr_rope_params {
    int rot_dim;          /* rotated channels per head: int(head_dim * rotary_percent), even */
    double base;          /* rotary_base, 10000 by default */
    double interp_factor; /* seq_len_interpolation_factor; positions are divided by it; 0 = off */
    int llama3;           /* apply Llama-3 frequency scaling */
    double factor;        /* llama3: scale for long wavelengths (8 in Llama 3.1) */
    double low_freq_factor;
    double high_freq_factor;
    double original_max_position;
} tr_rope_params;

TR_HOST_DEVICE double tr_rope_inv_freq(const tr_rope_params *p, int i) {
    double f = 1.0 / pow(p->base, (2.0 * i) / (double)p->rot_dim);
    if (!p->llama3) return f;
    double low_wavelen = p->original_max_position / p->low_freq_factor;
    double high_wavelen = p->original_max_position / p->high_freq_factor;
    double wavelen = 2.0 * 3.14159265358979323846 / f;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / p->factor;
    double s = (p->original_max_position / wavelen - p->low_freq_factor) /
               (p->high_freq_factor - p->low_freq_factor);
    return (1.0 - s) * f / p->factor + s * f;
}

#endif
