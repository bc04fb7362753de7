/* buffers.c - whole-buffer ops on the CPU: fp32 <-> bf16 / fp16 casts (core/dtype.h's
 * conversions), the sum of squares behind the global gradient norm, and the sum behind the
 * step's loss. */
#include "kernels/cpu/cpu_ops.h"

/* A sum is cut into this many slices whatever the thread count, each summed in
 * order and the partial sums added in slice order, so the result is bit-identical for any
 * number of threads (an OpenMP reduction would combine partials in an unspecified order). */
#define SUM_SLICES 64

st_status kernel_cpu_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                          const st_stream *stream) {
  (void)ctx;
  (void)stream;
  dtype_convert(dst->data, dst->dtype, src->data, src->dtype, (size_t)tensor_numel(src));
  return ST_OK;
}

/* Sum of x[i]^2 (square) or x[i] over [begin, end), in double. */
static double slice_sum(const st_tensor *x, int64_t begin, int64_t end, int square) {
  double sum = 0.0;
  for (int64_t i = begin; i < end; i++) {
    double v = dtype_load_f32(x->data, x->dtype, (size_t)i);
    sum += square ? v * v : v;
  }
  return sum;
}

/* out[0] += the sum over x in SUM_SLICES fixed slices, added in slice order. */
static void add_sum(const st_tensor *out, const st_tensor *x, int square) {
  int64_t count = tensor_numel(x);
  double partial[SUM_SLICES];
#pragma omp parallel for schedule(static)
  for (int s = 0; s < SUM_SLICES; s++) {
    partial[s] = slice_sum(x, count * s / SUM_SLICES, count * (s + 1) / SUM_SLICES, square);
  }
  double sum = 0.0;
  for (int s = 0; s < SUM_SLICES; s++) sum += partial[s];
  *(float *)out->data += (float)sum;
}

st_status kernel_cpu_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                                 const st_stream *stream) {
  (void)ctx;
  (void)stream;
  add_sum(out, x, 1);
  return ST_OK;
}

st_status kernel_cpu_sum(void *ctx, const st_tensor *out, const st_tensor *x,
                         const st_stream *stream) {
  (void)ctx;
  (void)stream;
  add_sum(out, x, 0);
  return ST_OK;
}
