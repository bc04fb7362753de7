/* residual.c - the residual add on the CPU: out = a + b elementwise. out may alias a or b,
 * since each element is read before it is written. Its backward is no op (see kernels.h). */
#include "kernels/cpu/cpu_ops.h"

st_status kernel_cpu_residual_forward(void *ctx, const st_tensor *out, const st_tensor *a,
                                      const st_tensor *b, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t count = tensor_numel(a);
  const float *x = a->data, *y = b->data;
  float *z = out->data;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i++) z[i] = x[i] + y[i];
  return ST_OK;
}
