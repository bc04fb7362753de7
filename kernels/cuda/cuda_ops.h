/* cuda_ops.h - the CUDA backend's ops, one group per .cu file, gathered into kernel_ops_cuda by
 * backend.c. Private to kernels/cuda/. Every op receives arguments already checked by the
 * kernel_<op> wrappers (kernels.c), only enqueues work on stream->handle (a cudaStream_t) and
 * returns: no op synchronises the device or the stream, and none allocates (scratch comes from
 * the context's workspace regions, context.h). A launch or cuBLASLt failure comes back as
 * ST_ERR_CUDA naming the op; a fault inside a kernel surfaces at the next synchronisation. */
#ifndef ST_KERNELS_CUDA_CUDA_OPS_H
#define ST_KERNELS_CUDA_CUDA_OPS_H

#include "kernels/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

st_status cuda_context_create(const st_device *dev, void **ctx);
void cuda_context_destroy(void *ctx);

/* matmul.cu */
st_status cuda_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                              const st_tensor *inp, const st_tensor *weight,
                              kernel_weight_layout layout, const st_tensor *bias,
                              const st_stream *stream);
st_status cuda_matmul_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                               const st_tensor *dbias, const st_tensor *dout,
                               const st_tensor *pre_gelu, const st_tensor *inp,
                               const st_tensor *weight, kernel_weight_layout layout,
                               const st_stream *stream);

/* colsum.cu: deterministic sums over rows (bias and LayerNorm parameter gradients). */
typedef enum cuda_colsum_mode {
  CUDA_COLSUM_PLAIN = 0,     /* out0[c] += sum_r x[r, c] */
  CUDA_COLSUM_DGELU = 1,     /* x[r, c] *= gelu'(aux[r, c]) in place, then as PLAIN */
  CUDA_COLSUM_LAYERNORM = 2, /* out0[c] += sum_r x * (aux - mean[r]) rstd[r], out1[c] += sum_r x */
} cuda_colsum_mode;

/* Whether cuda_colsum takes `cols` columns in `mode` (ST_ERR_UNSUPPORTED if not): for an op that
 * must refuse before its first launch. */
st_status cuda_colsum_check(const char *op, cuda_colsum_mode mode, int64_t cols);

/* x and aux are of `dtype`; out0 and out1 (parameter gradients) of out_dtype: dtype, or fp32. */
st_status cuda_colsum(void *ctx, const char *op, cuda_colsum_mode mode, st_dtype dtype,
                      int64_t rows, int64_t cols, void *x, const void *aux, const float *mean,
                      const float *rstd, st_dtype out_dtype, void *out0, void *out1,
                      const st_stream *stream);

/* layernorm.cu */
st_status cuda_layernorm_forward(void *ctx, const st_tensor *residual, const st_tensor *out,
                                 const st_tensor *mean, const st_tensor *rstd, const st_tensor *a,
                                 const st_tensor *b, const st_tensor *weight, const st_tensor *bias,
                                 const st_stream *stream);
st_status cuda_layernorm_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                  const st_tensor *dbias, const st_tensor *dout,
                                  const st_tensor *inp, const st_tensor *weight,
                                  const st_tensor *mean, const st_tensor *rstd,
                                  const st_stream *stream);

/* elementwise.cu */
st_status cuda_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                            const st_stream *stream);
st_status cuda_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                             const st_tensor *inp, const st_stream *stream);
st_status cuda_residual_forward(void *ctx, const st_tensor *out, const st_tensor *a,
                                const st_tensor *b, const st_stream *stream);
st_status cuda_cast(void *ctx, const st_tensor *dst, const st_tensor *src, const st_stream *stream);
st_status cuda_scale(void *ctx, const st_tensor *x, float factor, const st_stream *stream);
st_status cuda_finite_check(void *ctx, const st_tensor *flag, const st_tensor *x,
                            const st_stream *stream);

/* reduce.cu */
st_status cuda_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                           const st_stream *stream);
st_status cuda_sum(void *ctx, const st_tensor *out, const st_tensor *x, const st_stream *stream);

/* attention.cu */
const char *cuda_attention_kind_name(void *ctx);
int64_t cuda_attention_fallbacks(void *ctx);
st_status cuda_attention_forward(void *ctx, const st_tensor *out, const st_tensor *state,
                                 const st_tensor *qkv, int64_t n_head, const st_stream *stream);
st_status cuda_attention_backward(void *ctx, const st_tensor *dqkv, const st_tensor *dout,
                                  const st_tensor *qkv, const st_tensor *out,
                                  const st_tensor *state, int64_t n_head, const st_stream *stream);
st_status cuda_attention_cached_forward(void *ctx, const st_tensor *out, const st_tensor *k_cache,
                                        const st_tensor *v_cache, const st_tensor *qkv,
                                        int64_t past, int64_t n_head, const st_stream *stream);

/* embedding.cu */
st_status cuda_embedding_forward(void *ctx, const st_tensor *out, const int32_t *tokens,
                                 const st_tensor *wte, const st_tensor *wpe,
                                 const st_stream *stream);
st_status cuda_embedding_backward(void *ctx, const st_tensor *dwte, const st_tensor *dwpe,
                                  const st_tensor *dout, const int32_t *tokens,
                                  const st_stream *stream);

/* classifier.cu */
st_status cuda_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                          const st_tensor *logits, const int32_t *targets, int64_t vocab,
                          float dloss_scale, const st_stream *stream);

/* step_factors.cu */
st_status cuda_step_factors(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                            const st_tensor *flag, double max_norm, double loss_scale,
                            const st_stream *stream);

/* adamw.cu */
st_status cuda_adamw(void *ctx, const st_tensor *param, const st_tensor *master, const st_tensor *m,
                     const st_tensor *v, const st_tensor *grad, const kernel_adamw_step *step,
                     const kernel_adamw_segment *segments, int segment_count,
                     const st_stream *stream);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_CUDA_OPS_H */
