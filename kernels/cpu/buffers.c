/* buffers.c - whole-buffer ops on the CPU: fp32 <-> bf16 casts (core/dtype.h's conversion) and
 * the sum of squares behind the global gradient norm. */
#include "kernels/cpu/cpu_ops.h"

/* The sum of squares is cut into this many slices whatever the thread count, each summed in
 * order and the partial sums added in slice order, so the result is bit-identical for any
 * number of threads (an OpenMP reduction would combine partials in an unspecified order). */
#define SUM_SQUARES_SLICES 64

st_status kernel_cpu_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                          const st_stream *stream) {
  (void)ctx;
  (void)stream;
  dtype_convert(dst->data, dst->dtype, src->data, src->dtype, (size_t)tensor_numel(src));
  return ST_OK;
}

static double slice_sum_squares(const st_tensor *x, int64_t begin, int64_t end) {
  double sum = 0.0;
  if (x->dtype == ST_FP32) {
    const float *v = x->data;
    for (int64_t i = begin; i < end; i++) sum += (double)v[i] * v[i];
  } else {
    const uint16_t *v = x->data;
    for (int64_t i = begin; i < end; i++) sum += (double)f32_from_bf16(v[i]) * f32_from_bf16(v[i]);
  }
  return sum;
}

st_status kernel_cpu_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                                 const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t count = tensor_numel(x);
  double partial[SUM_SQUARES_SLICES];
#pragma omp parallel for schedule(static)
  for (int s = 0; s < SUM_SQUARES_SLICES; s++) {
    partial[s] =
        slice_sum_squares(x, count * s / SUM_SQUARES_SLICES, count * (s + 1) / SUM_SQUARES_SLICES);
  }
  double sum = 0.0;
  for (int s = 0; s < SUM_SQUARES_SLICES; s++) sum += partial[s];
  *(float *)out->data += (float)sum;
  return ST_OK;
}
