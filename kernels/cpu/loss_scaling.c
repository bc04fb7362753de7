/* loss_scaling.c - the CPU ops of fp16 loss scaling: scaling a buffer in place (unscaling
 * gradients), the finite check that raises the step's overflow flag, and the step's factors
 * (AdamW's unscaled, clipped gradient factor and whether the step is skipped). The first two read
 * and write fp32, bf16 and fp16 through core/dtype.h, so a rounding here is the casts'
 * rounding. */
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/step_rule.h"

st_status kernel_cpu_scale(void *ctx, const st_tensor *x, float factor, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  const int64_t n = tensor_numel(x);
  const st_dtype d = x->dtype;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    dtype_store_f32(x->data, d, (size_t)i, dtype_load_f32(x->data, d, (size_t)i) * factor);
  }
  return ST_OK;
}

/* An inf or NaN has every exponent bit set, whatever the sign or the mantissa: a test of the
 * bits alone, which no compiler option (-ffinite-math-only) can fold away. */
static int is_nonfinite(const void *data, st_dtype dtype, int64_t i) {
  if (dtype == ST_FP32) {
    uint32_t bits;
    memcpy(&bits, (const char *)data + 4 * i, sizeof bits);
    return (bits & 0x7f800000u) == 0x7f800000u;
  }
  const uint16_t bits = ((const uint16_t *)data)[i];
  const uint16_t exponent = dtype == ST_BF16 ? 0x7f80u : 0x7c00u;
  return (bits & exponent) == exponent;
}

st_status kernel_cpu_finite_check(void *ctx, const st_tensor *flag, const st_tensor *x,
                                  const st_stream *stream) {
  (void)ctx;
  (void)stream;
  const int64_t n = tensor_numel(x);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found)
  for (int64_t i = 0; i < n; i++) found |= is_nonfinite(x->data, x->dtype, i);
  if (found) *(float *)flag->data = 1.0f;
  return ST_OK;
}

st_status kernel_cpu_step_factors(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                                  const st_tensor *flag, double max_norm, double loss_scale,
                                  const st_stream *stream) {
  (void)ctx;
  (void)stream;
  step_rule(factors->data, *(const float *)sumsq->data, *(const float *)flag->data, max_norm,
            loss_scale);
  return ST_OK;
}
