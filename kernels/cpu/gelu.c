/* gelu.c - GPT-2's tanh-approximated GELU on the CPU, forward and backward, elementwise and
 * parallel over elements. The loops here also serve the matmul's GELU epilogue (matmul.c), so
 * the fused and the separate forms give the same bits. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_CUBIC 0.044715f

void kernel_cpu_gelu(float *y, const float *x, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float u = GELU_SQRT_2_OVER_PI * (x[i] + GELU_CUBIC * x[i] * x[i] * x[i]);
    y[i] = 0.5f * x[i] * (1.0f + tanhf(u));
  }
}

void kernel_cpu_gelu_grad(float *dx, const float *dy, const float *x, int64_t count,
                          int accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) {
    float u = GELU_SQRT_2_OVER_PI * (x[i] + GELU_CUBIC * x[i] * x[i] * x[i]);
    float th = tanhf(u);
    /* d/dx of 0.5 x (1 + tanh u): the tanh term plus x times its derivative through u. */
    float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * x[i] * x[i]);
    float grad = 0.5f * (1.0f + th) + 0.5f * x[i] * (1.0f - th * th) * du_dx;
    /* dy[i] is read before dx[i] is written, so dx may be dy when overwriting. */
    dx[i] = accumulate ? dx[i] + grad * dy[i] : grad * dy[i];
  }
}

st_status kernel_cpu_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                                  const st_stream *stream) {
  (void)ctx;
  (void)stream;
  kernel_cpu_gelu(out->data, inp->data, tensor_numel(inp));
  return ST_OK;
}

st_status kernel_cpu_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                                   const st_tensor *inp, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  kernel_cpu_gelu_grad(dinp->data, dout->data, inp->data, tensor_numel(inp), 1);
  return ST_OK;
}
