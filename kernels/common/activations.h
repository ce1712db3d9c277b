/* Scalar activation maths shared by the CPU loops and CUDA kernels. Derivatives are written out
 * by hand so both backends round identically and neither needs autograd. */
#ifndef TR_KERNELS_ACTIVATIONS_H
#define TR_KERNELS_ACTIVATIONS_H

#include <math.h>

#include "kernels/common/hostdev.h"

#define TR_SQRT_2_OVER_PI 0.7978845608028654f
#define TR_INV_SQRT_2     0.7071067811865476f
#define TR_INV_SQRT_2PI   0.3989422804014327f
#define TR_GELU_TANH_C    0.044715f

TR_HOST_DEVICE float tr_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * TR_INV_SQRT_2));
}

TR_HOST_DEVICE float tr_gelu_erf_grad(float x) {
    float cdf = 0.5f * (1.0f + erff(x * TR_INV_SQRT_2));
    float pdf = TR_INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

TR_HOST_DEVICE float tr_gelu_tanh(float x) {
    float u = TR_SQRT_2_OVER_PI * (x + TR_GELU_TANH_C * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

TR_HOST_DEVICE float tr_gelu_tanh_grad(float x) {
    float u = TR_SQRT_2_OVER_PI * (x + TR_GELU_TANH_C * x * x * x);
    float t = tanhf(u);
    float du = TR_SQRT_2_OVER_PI * (1.0f + 3.0f * TR_GELU_TANH_C * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* expf(-x) overflows to inf for very negative x, and x/inf = -0 is the right limit, so no branch.
 */
TR_HOST_DEVICE float tr_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

TR_HOST_DEVICE float tr_silu(float x) {
    return x * tr_sigmoid(x);
}

TR_HOST_DEVICE float tr_silu_grad(float x) {
    float s = tr_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

#endif
