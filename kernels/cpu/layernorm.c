/* layernorm.c - LayerNorm over the last dimension on the CPU, forward and backward.
 *
 * The forward normalises each row independently (parallel over rows) with a two-pass mean and
 * variance, which stays accurate when the mean is large against the spread. The backward
 * splits in two: the input gradient is per row, the weight and bias gradients are sums over
 * rows and run over column blocks (KERNEL_CPU_COLUMN_CHUNK) so they are deterministic. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

st_status kernel_cpu_layernorm_forward(void *ctx, const st_tensor *residual, const st_tensor *out,
                                       const st_tensor *mean, const st_tensor *rstd,
                                       const st_tensor *a, const st_tensor *b_in,
                                       const st_tensor *weight, const st_tensor *bias,
                                       const st_stream *stream) {
  const st_tensor *inp = a;
  if (residual) {
    ST_CHECK(kernel_cpu_residual_forward(ctx, residual, a, b_in, stream));
    inp = residual;
  }
  int64_t rows = kernel_rows(inp), channels = kernel_cols(inp);
  const float *w = weight->data, *b = bias->data;
  float *row_mean = mean->data, *row_rstd = rstd->data;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; n++) {
    const float *x = (const float *)inp->data + n * channels;
    float *y = (float *)out->data + n * channels;
    float m = 0.0f;
    for (int64_t c = 0; c < channels; c++) m += x[c];
    m /= (float)channels;
    float var = 0.0f;
    for (int64_t c = 0; c < channels; c++) var += (x[c] - m) * (x[c] - m);
    var /= (float)channels;
    float s = 1.0f / sqrtf(var + KERNEL_LAYERNORM_EPS);
    for (int64_t c = 0; c < channels; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
    row_mean[n] = m;
    row_rstd[n] = s;
  }
  return ST_OK;
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, with g = dout * weight and
 * xhat the normalised input: the gradient through the mean and the variance folded in. */
static void add_input_grad(float *dinp, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int64_t rows, int64_t channels) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; n++) {
    const float *x = inp + n * channels, *dy = dout + n * channels;
    float *dx = dinp + n * channels;
    float g_mean = 0.0f, g_xhat_mean = 0.0f;
    for (int64_t c = 0; c < channels; c++) {
      float xhat = (x[c] - mean[n]) * rstd[n];
      g_mean += dy[c] * w[c];
      g_xhat_mean += dy[c] * w[c] * xhat;
    }
    g_mean /= (float)channels;
    g_xhat_mean /= (float)channels;
    for (int64_t c = 0; c < channels; c++) {
      float xhat = (x[c] - mean[n]) * rstd[n];
      dx[c] += rstd[n] * (dy[c] * w[c] - g_mean - xhat * g_xhat_mean);
    }
  }
}

/* dweight[c] += sum over rows of dout * xhat, dbias[c] += sum over rows of dout. */
static void add_param_grads(float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *mean, const float *rstd, int64_t rows, int64_t channels) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += KERNEL_CPU_COLUMN_CHUNK) {
    int64_t width =
        channels - c0 < KERNEL_CPU_COLUMN_CHUNK ? channels - c0 : KERNEL_CPU_COLUMN_CHUNK;
    float dw[KERNEL_CPU_COLUMN_CHUNK] = {0}, db[KERNEL_CPU_COLUMN_CHUNK] = {0};
    for (int64_t n = 0; n < rows; n++) {
      const float *x = inp + n * channels + c0, *dy = dout + n * channels + c0;
      for (int64_t j = 0; j < width; j++) {
        dw[j] += dy[j] * (x[j] - mean[n]) * rstd[n];
        db[j] += dy[j];
      }
    }
    for (int64_t j = 0; j < width; j++) {
      dweight[c0 + j] += dw[j];
      dbias[c0 + j] += db[j];
    }
  }
}

st_status kernel_cpu_layernorm_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                        const st_tensor *dbias, const st_tensor *dout,
                                        const st_tensor *inp, const st_tensor *weight,
                                        const st_tensor *mean, const st_tensor *rstd,
                                        const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t rows = kernel_rows(inp), channels = kernel_cols(inp);
  add_input_grad(dinp->data, dout->data, inp->data, weight->data, mean->data, rstd->data, rows,
                 channels);
  add_param_grads(dweight->data, dbias->data, dout->data, inp->data, mean->data, rstd->data, rows,
                  channels);
  return ST_OK;
}
