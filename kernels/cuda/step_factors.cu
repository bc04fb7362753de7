// step_factors.cu - the step's decision on the device (kernels.h's kernel_step_factors): AdamW's
// gradient factor (clipping and 1 / loss scale) and whether the step is skipped, computed from
// the reduced scalars where they are, so the host enqueues AdamW without reading them.
//
// Launch shape: one thread, once per step, running the rule the CPU backend runs (step_rule.h),
// so the factor has the CPU's bits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/step_rule.h"

namespace {

__global__ void step_factors_kernel(float *factors, const float *sumsq, const float *flag,
                                    double max_norm, double loss_scale) {
  step_rule(factors, *sumsq, *flag, max_norm, loss_scale);
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
