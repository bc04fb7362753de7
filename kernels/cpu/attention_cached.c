/* attention_cached.c - causal attention of new tokens over a key/value cache on the CPU (the
 * generation path; no backward).
 *
 * The arithmetic is attention.c's, so a token's output matches what the training forward
 * computes for it: per head, scores = scale * q @ k^T and out = probs @ v through kernel_cpu_sgemm
 * on strided views (q rows 3C apart in qkv, cache rows C apart), a max-subtracted softmax in
 * between (attention.c's kernel_cpu_causal_softmax_row). Only the key rows a new token may see take
 * part: new token i (position past + i) sees cache rows [0, past + i], so its scores row is masked
 * from past + i + 1 on. One scratch block of N x (past + N) scores serves every head in turn. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

st_status kernel_cpu_attention_cached_forward(void *ctx, const st_tensor *out,
                                              const st_tensor *k_cache, const st_tensor *v_cache,
                                              const st_tensor *qkv, int64_t past, int64_t n_head,
                                              const st_stream *stream) {
  (void)ctx;
  (void)stream;
  const int64_t n = kernel_rows(qkv), C = kernel_cols(qkv) / 3, hs = C / n_head;
  const int64_t len = past + n; /* key rows any new token sees, at most */
  const float *x = qkv->data;
  float *kc = k_cache->data, *vc = v_cache->data, *y = out->data;
  float *scores = NULL;
  ST_CHECK(mem_alloc((void **)&scores, (size_t)(n * len) * sizeof *scores, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  for (int64_t i = 0; i < n; i++) {
    memcpy(kc + (past + i) * C, x + i * 3 * C + C, (size_t)C * sizeof(float));
    memcpy(vc + (past + i) * C, x + i * 3 * C + 2 * C, (size_t)C * sizeof(float));
  }
  const float scale = 1.0f / sqrtf((float)hs);
  for (int64_t h = 0; h < n_head; h++) {
    /* scores[n, len] = scale * q[n, hs] @ k[len, hs]^T */
    kernel_cpu_sgemm(CblasNoTrans, CblasTrans, (int)n, (int)len, (int)hs, scale, x + h * hs,
                     (int)(3 * C), kc + h * hs, (int)C, 0.0f, scores, (int)len);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) kernel_cpu_causal_softmax_row(scores + i * len, past + i, len);
    /* out[n, hs] = probs[n, len] @ v[len, hs] */
    kernel_cpu_sgemm(CblasNoTrans, CblasNoTrans, (int)n, (int)hs, (int)len, 1.0f, scores, (int)len,
                     vc + h * hs, (int)C, 0.0f, y + h * hs, (int)C);
  }
  mem_free(scores);
  return ST_OK;
}
