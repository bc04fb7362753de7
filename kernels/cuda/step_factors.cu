// step_factors.cu - the step's decision on the device (kernels.h's kernel_step_factors): AdamW's
// gradient factor (clipping and 1 / loss scale) and whether the step is skipped, computed from
// the reduced scalars where they are, so the host enqueues AdamW without reading them.
//
// Launch shape: one thread, once per step; it performs the CPU backend's double operations in
// the same order (IEEE division and square root: nvcc's defaults, no fast math), so the factor
// has the CPU's bits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

__global__ void step_factors_kernel(float *factors, const float *sumsq, const float *flag,
                                    double max_norm, double loss_scale) {
  const float s = *sumsq;
  if (*flag != 0.0f || !isfinite(s)) {
    factors[KERNEL_STEP_GRAD_SCALE] = 0.0f;
    factors[KERNEL_STEP_SKIP] = 1.0f;
    return;
  }
  const double norm = sqrt((double)s) / loss_scale;
  float clip = 1.0f;
  if (max_norm > 0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) clip = (float)coefficient;
  }
  factors[KERNEL_STEP_GRAD_SCALE] = (float)((double)clip / loss_scale);
  factors[KERNEL_STEP_SKIP] = 0.0f;
}

}  // namespace

extern "C" st_status cuda_step_factors(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                                       const st_tensor *flag, double max_norm, double loss_scale,
                                       const st_stream *stream) {
  (void)ctx;
  step_factors_kernel<<<1, 1, 0, stk::stream_of(stream)>>>(
      static_cast<float *>(factors->data), static_cast<const float *>(sumsq->data),
      static_cast<const float *>(flag->data), max_norm, loss_scale);
  return stk::launched("step_factors", "step_factors_kernel");
}
