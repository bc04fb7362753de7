/* gelu.c - GPT-2's tanh-approximated GELU on the CPU, forward and backward, elementwise and
 * parallel over elements. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f

st_status kernel_cpu_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                                  const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t count = tensor_numel(inp);
  const float *x = inp->data;
  float *y = out->data;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float u = GELU_SQRT_2_OVER_PI * (x[i] + GELU_CUBIC * x[i] * x[i] * x[i]);
    y[i] = 0.5f * x[i] * (1.0f + tanhf(u));
  }
  return ST_OK;
}

st_status kernel_cpu_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                                   const st_tensor *inp, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t count = tensor_numel(inp);
  const float *x = inp->data, *dy = dout->data;
  float *dx = dinp->data;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float u = GELU_SQRT_2_OVER_PI * (x[i] + GELU_CUBIC * x[i] * x[i] * x[i]);
    float th = tanhf(u);
    /* d/dx of 0.5 x (1 + tanh u): the tanh term plus x times its derivative through u. */
    float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x[i] * x[i]);
    float grad = 0.5f * (1.0f + th) + 0.5f * x[i] * (1.0f - th * th) * du_dx;
    dx[i] += grad * dy[i];
  }
  return ST_OK;
}
