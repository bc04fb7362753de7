/* matmul.c - linear layers on the CPU: out = inp @ weight + bias, weight stored [in, out] as in
 * GPT-2's Conv1D, or [out, in] for the tied LM head (the same products with the weight's
 * transpose flag flipped). Every product goes through kernel_cpu_sgemm (gemm.c), which cuts it
 * across OpenMP's threads; the bias broadcast and the bias gradient's column sums are the only
 * loops here.
 *
 * The GELU epilogue is not fused on the CPU: the product is written to pre_gelu and gelu.c's
 * loop then makes out from it (backward: dGELU in place over dout before the products), which
 * gives exactly the bits of a matmul followed by kernel_gelu_forward. */
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

/* A linear layer's extents as BLAS takes them: rows of inp, input and output features, and
 * whether the weight is stored [out, in] (the tied head). */
typedef struct linear_dims {
  int out_in, rows, in, outs;
} linear_dims;

static linear_dims linear_dims_of(const st_tensor *inp, const st_tensor *weight,
                                  kernel_weight_layout layout) {
  const int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  return (linear_dims){out_in, (int)kernel_rows(inp), (int)weight->shape[out_in],
                       (int)weight->shape[1 - out_in]};
}

st_status kernel_cpu_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                                    const st_tensor *inp, const st_tensor *weight,
                                    kernel_weight_layout layout, const st_tensor *bias,
                                    const st_stream *stream) {
  (void)ctx;
  (void)stream;
  const linear_dims d = linear_dims_of(inp, weight, layout);
  float *y = pre_gelu ? pre_gelu->data : out->data;
  float beta = 0.0f;
  if (bias) {
    /* Start every row at the bias and let sgemm add the product (beta = 1): one pass over
     * out instead of a second one after the product. */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < d.rows; n++)
      memcpy(y + (int64_t)n * d.outs, bias->data, d.outs * sizeof *y);
    beta = 1.0f;
  }
  kernel_cpu_sgemm(CblasNoTrans, d.out_in ? CblasTrans : CblasNoTrans, d.rows, d.outs, d.in, 1.0f,
                   inp->data, d.in, weight->data, d.out_in ? d.in : d.outs, beta, y, d.outs);
  if (pre_gelu) kernel_cpu_gelu(out->data, y, (int64_t)d.rows * d.outs);
  return ST_OK;
}

st_status kernel_cpu_matmul_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                     const st_tensor *dbias, const st_tensor *dout,
                                     const st_tensor *pre_gelu, const st_tensor *inp,
                                     const st_tensor *weight, kernel_weight_layout layout,
                                     const st_stream *stream) {
  (void)ctx;
  (void)stream;
  const linear_dims d = linear_dims_of(inp, weight, layout);
  /* dout becomes the pre-activation's gradient, which the products below read. */
  if (pre_gelu)
    kernel_cpu_gelu_grad(dout->data, dout->data, pre_gelu->data, (int64_t)d.rows * d.outs, 0);
  if (d.out_in) {
    /* dinp[N, C] = dout[N, OC] @ weight[OC, C];  dweight[OC, C] += dout^T @ inp[N, C] */
    kernel_cpu_sgemm(CblasNoTrans, CblasNoTrans, d.rows, d.in, d.outs, 1.0f, dout->data, d.outs,
                     weight->data, d.in, 0.0f, dinp->data, d.in);
    kernel_cpu_sgemm(CblasTrans, CblasNoTrans, d.outs, d.in, d.rows, 1.0f, dout->data, d.outs,
                     inp->data, d.in, 1.0f, dweight->data, d.in);
  } else {
    /* dinp[N, C] = dout[N, OC] @ weight[C, OC]^T;  dweight[C, OC] += inp^T @ dout[N, OC] */
    kernel_cpu_sgemm(CblasNoTrans, CblasTrans, d.rows, d.in, d.outs, 1.0f, dout->data, d.outs,
                     weight->data, d.outs, 0.0f, dinp->data, d.in);
    kernel_cpu_sgemm(CblasTrans, CblasNoTrans, d.in, d.outs, d.rows, 1.0f, inp->data, d.in,
                     dout->data, d.outs, 1.0f, dweight->data, d.outs);
  }
  if (dbias) add_column_sums(dbias->data, dout->data, d.rows, d.outs);
  return ST_OK;
}
