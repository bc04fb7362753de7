/* step_rule.h - the rule of kernel_step_factors (kernels.h), written once for every backend: the
 * CPU calls it on the host, CUDA in a one-thread kernel. AdamW's gradient factor is the clip
 * coefficient of the unscaled norm over the loss scale, computed in double in this order (IEEE
 * division and square root on both, no fast math), so both backends produce the same bits; the
 * step is skipped when the overflow flag is raised or the sum of squares is not finite, tested on
 * the bits alone (no compiler option such as -ffinite-math-only can fold the test away). */
#ifndef ST_KERNELS_STEP_RULE_H
#define ST_KERNELS_STEP_RULE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

#ifdef __CUDACC__
#define ST_STEP_RULE_FN static inline __host__ __device__
#else
#define ST_STEP_RULE_FN static inline
#endif

/* factors[KERNEL_STEP_GRAD_SCALE] and factors[KERNEL_STEP_SKIP] from the reduced sum of squares
 * of the scaled gradients and the overflow flag. max_norm <= 0: no clipping. */
ST_STEP_RULE_FN void step_rule(float *factors, float sumsq, float flag, double max_norm,
                               double loss_scale) {
  uint32_t bits;
  memcpy(&bits, &sumsq, sizeof bits);
  if (flag != 0.0f || (bits & 0x7f800000u) == 0x7f800000u) {
    factors[KERNEL_STEP_GRAD_SCALE] = 0.0f;
    factors[KERNEL_STEP_SKIP] = 1.0f;
    return;
  }
  const double norm = sqrt((double)sumsq) / loss_scale;
  float clip = 1.0f;
  if (max_norm > 0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) clip = (float)coefficient;
  }
  factors[KERNEL_STEP_GRAD_SCALE] = (float)((double)clip / loss_scale);
  factors[KERNEL_STEP_SKIP] = 0.0f;
}

#undef ST_STEP_RULE_FN

#endif /* ST_KERNELS_STEP_RULE_H */
