/* embedding.c - token + position embedding on the CPU, forward and backward.
 *
 * The backward is a scatter-add (rows of dout into the rows of dwte their tokens name), and
 * two tokens of a batch may share a row. Rather than atomics or per-thread copies, threads
 * split the channels (KERNEL_CPU_COLUMN_CHUNK): each walks every token in order over its own
 * columns, so no two threads touch one element and every sum runs in the same order, making
 * the gradients bit-identical whatever the thread count. */
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

st_status kernel_cpu_embedding_forward(void *ctx, const st_tensor *out, const int32_t *tokens,
                                       const st_tensor *wte, const st_tensor *wpe,
                                       const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t seq = out->shape[1], channels = out->shape[2], rows = kernel_rows(out);
  ST_CHECK(kernel_cpu_check_ids("token", tokens, rows, wte->shape[0]));
  const float *token_table = wte->data, *position_table = wpe->data;
  float *y = out->data;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const float *tok = token_table + (int64_t)tokens[r] * channels;
    const float *pos = position_table + (r % seq) * channels;
    for (int64_t c = 0; c < channels; c++) y[r * channels + c] = tok[c] + pos[c];
  }
  return ST_OK;
}

st_status kernel_cpu_embedding_backward(void *ctx, const st_tensor *dwte, const st_tensor *dwpe,
                                        const st_tensor *dout, const int32_t *tokens,
                                        const st_stream *stream) {
  (void)ctx;
  (void)stream;
  int64_t seq = dout->shape[1], channels = dout->shape[2], rows = kernel_rows(dout);
  ST_CHECK(kernel_cpu_check_ids("token", tokens, rows, dwte->shape[0]));
  const float *dy = dout->data;
  float *dtoken = dwte->data, *dpos = dwpe->data;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += KERNEL_CPU_COLUMN_CHUNK) {
    int64_t c1 = c0 + KERNEL_CPU_COLUMN_CHUNK < channels ? c0 + KERNEL_CPU_COLUMN_CHUNK : channels;
    for (int64_t r = 0; r < rows; r++) {
      const float *g = dy + r * channels;
      float *tok = dtoken + (int64_t)tokens[r] * channels, *pos = dpos + (r % seq) * channels;
      for (int64_t c = c0; c < c1; c++) {
        tok[c] += g[c];
        pos[c] += g[c];
      }
    }
  }
  return ST_OK;
}
