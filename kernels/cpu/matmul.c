/* matmul.c - linear layers on the CPU: out = inp @ weight + bias, weight stored [in, out] as in
 * GPT-2's Conv1D, or [out, in] for the tied LM head (the same products with the weight's
 * transpose flag flipped). Every product goes through OpenBLAS's cblas_sgemm, which threads itself;
 * the bias broadcast and the bias gradient's column sums are the only loops here. sgemm is never
 * called from inside an OpenMP region, so OpenBLAS's threads and OpenMP's do not compete. */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"

/* acc[c] += sum over rows of x[r, c]. Parallel over column blocks, each summed in row order
 * (see KERNEL_CPU_COLUMN_CHUNK), so the bias gradient is deterministic. */
static void add_column_sums(float *acc, const float *x, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += KERNEL_CPU_COLUMN_CHUNK) {
    int64_t width = cols - c0 < KERNEL_CPU_COLUMN_CHUNK ? cols - c0 : KERNEL_CPU_COLUMN_CHUNK;
    float sum[KERNEL_CPU_COLUMN_CHUNK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *row = x + r * cols + c0;
      for (int64_t j = 0; j < width; j++) sum[j] += row[j];
    }
    for (int64_t j = 0; j < width; j++) acc[c0 + j] += sum[j];
  }
}

st_status kernel_cpu_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                                    const st_tensor *inp, const st_tensor *weight,
                                    kernel_weight_layout layout, const st_tensor *bias,
                                    const st_stream *stream) {
  (void)ctx;
  (void)stream;
  (void)pre_gelu; /* cpu_supports refuses KERNEL_OP_MATMUL_GELU for now */
  int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  int rows = (int)kernel_rows(inp), in = (int)weight->shape[out_in],
      outs = (int)weight->shape[1 - out_in];
  float *y = out->data;
  float beta = 0.0f;
  if (bias) {
    /* Start every row at the bias and let sgemm add the product (beta = 1): one pass over
     * out instead of a second one after the product. */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) memcpy(y + (int64_t)n * outs, bias->data, outs * sizeof *y);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, out_in ? CblasTrans : CblasNoTrans, rows, outs, in, 1.0f,
              inp->data, in, weight->data, out_in ? in : outs, beta, y, outs);
  return ST_OK;
}

st_status kernel_cpu_matmul_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                     const st_tensor *dbias, const st_tensor *dout,
                                     const st_tensor *pre_gelu, const st_tensor *inp,
                                     const st_tensor *weight, kernel_weight_layout layout,
                                     const st_stream *stream) {
  (void)ctx;
  (void)stream;
  (void)pre_gelu; /* cpu_supports refuses KERNEL_OP_MATMUL_GELU for now */
  int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  int rows = (int)kernel_rows(inp), in = (int)weight->shape[out_in],
      outs = (int)weight->shape[1 - out_in];
  if (out_in) {
    /* dinp[N, C] += dout[N, OC] @ weight[OC, C];  dweight[OC, C] += dout^T @ inp[N, C] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, outs, 1.0f, dout->data, outs,
                weight->data, in, 1.0f, dinp->data, in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outs, in, rows, 1.0f, dout->data, outs,
                inp->data, in, 1.0f, dweight->data, in);
  } else {
    /* dinp[N, C] += dout[N, OC] @ weight[C, OC]^T;  dweight[C, OC] += inp^T @ dout[N, OC] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, in, outs, 1.0f, dout->data, outs,
                weight->data, outs, 1.0f, dinp->data, in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, outs, rows, 1.0f, inp->data, in,
                dout->data, outs, 1.0f, dweight->data, outs);
  }
  if (dbias) add_column_sums(dbias->data, dout->data, rows, outs);
  return ST_OK;
}
