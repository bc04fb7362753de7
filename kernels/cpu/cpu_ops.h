/* cpu_ops.h - the CPU backend's ops, one group per file, gathered into kernel_ops_cpu by
 * backend.c. Private to kernels/cpu/. Every op takes arguments already checked by the
 * kernel_<op> wrappers (fp32 compute, except the whole-buffer ops that also read and write bf16
 * and fp16; contiguous; consistent shapes) and runs synchronously, so the stream is unused.
 * BLAS takes int extents, which GPT shapes never approach (2^31 rows of 768 floats would be
 * 6 TB). */
#ifndef ST_KERNELS_CPU_CPU_OPS_H
#define ST_KERNELS_CPU_CPU_OPS_H

#include <cblas.h>

#include "kernels/backend_ops.h"

/* Width of the column blocks that a gradient summed over rows (bias, LayerNorm and embedding
 * gradients) hands to one thread each. Each column is summed in row order by one thread, so
 * these gradients are bit-identical whatever the thread count; 64 floats fill whole cache
 * lines and vectorise, and still split C = 768 twelve ways. */
#define KERNEL_CPU_COLUMN_CHUNK 64

/* C = alpha op(A) op(B) + beta C in row-major order, as cblas_sgemm takes it, threaded by OpenMP
 * with the same bits on any number of threads (gemm.c): every product of the CPU backend goes
 * through it. */
void kernel_cpu_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc);
/* Sets OpenBLAS's pthread build to one thread (gemm.c), outside parallel regions: what a caller
 * does before a region whose threads call kernel_cpu_sgemm. */
void kernel_cpu_blas_single_thread(void);

st_status kernel_cpu_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                                    const st_tensor *inp, const st_tensor *weight,
                                    kernel_weight_layout layout, const st_tensor *bias,
                                    const st_stream *stream);
st_status kernel_cpu_matmul_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                     const st_tensor *dbias, const st_tensor *dout,
                                     const st_tensor *pre_gelu, const st_tensor *inp,
                                     const st_tensor *weight, kernel_weight_layout layout,
                                     const st_stream *stream);

st_status kernel_cpu_layernorm_forward(void *ctx, const st_tensor *residual, const st_tensor *out,
                                       const st_tensor *mean, const st_tensor *rstd,
                                       const st_tensor *a, const st_tensor *b_in,
                                       const st_tensor *weight, const st_tensor *bias,
                                       const st_stream *stream);
st_status kernel_cpu_layernorm_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                        const st_tensor *dbias, const st_tensor *dout,
                                        const st_tensor *inp, const st_tensor *weight,
                                        const st_tensor *mean, const st_tensor *rstd,
                                        const st_stream *stream);

/* y = gelu(x) over count elements; y may be x. */
void kernel_cpu_gelu(float *y, const float *x, int64_t count);
/* dx = dy * gelu'(x) (accumulate 0; dx may then be dy) or dx += dy * gelu'(x) (accumulate 1). */
void kernel_cpu_gelu_grad(float *dx, const float *dy, const float *x, int64_t count,
                          int accumulate);
st_status kernel_cpu_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                                  const st_stream *stream);
st_status kernel_cpu_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                                   const st_tensor *inp, const st_stream *stream);

/* Scores row[0..len) of a query that sees keys [0, last] to probabilities in place, max-subtracted;
 * the masked ones, row[last+1..len), become 0 so the product with v that follows adds nothing
 * for them. The training attention and the cached one share it, so a generated token's output
 * matches what the training forward computes for it. */
void kernel_cpu_causal_softmax_row(float *row, int64_t last, int64_t len);
int64_t kernel_cpu_attention_state_numel(int64_t batch, int64_t n_head, int64_t seq);
uint64_t kernel_cpu_attention_scratch_bytes(int64_t seq);
st_status kernel_cpu_attention_forward(void *ctx, const st_tensor *out, const st_tensor *probs,
                                       const st_tensor *qkv, int64_t n_head,
                                       const st_stream *stream);
st_status kernel_cpu_attention_backward(void *ctx, const st_tensor *dqkv, const st_tensor *dout,
                                        const st_tensor *qkv, const st_tensor *out,
                                        const st_tensor *probs, int64_t n_head,
                                        const st_stream *stream);
st_status kernel_cpu_attention_cached_forward(void *ctx, const st_tensor *out,
                                              const st_tensor *k_cache, const st_tensor *v_cache,
                                              const st_tensor *qkv, int64_t past, int64_t n_head,
                                              const st_stream *stream);

st_status kernel_cpu_residual_forward(void *ctx, const st_tensor *out, const st_tensor *a,
                                      const st_tensor *b, const st_stream *stream);

st_status kernel_cpu_embedding_forward(void *ctx, const st_tensor *out, const int32_t *tokens,
                                       const st_tensor *wte, const st_tensor *wpe,
                                       const st_stream *stream);
st_status kernel_cpu_embedding_backward(void *ctx, const st_tensor *dwte, const st_tensor *dwpe,
                                        const st_tensor *dout, const int32_t *tokens,
                                        const st_stream *stream);

st_status kernel_cpu_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                                const st_tensor *logits, const int32_t *targets, int64_t vocab,
                                float dloss_scale, const st_stream *stream);

st_status kernel_cpu_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                          const st_stream *stream);
st_status kernel_cpu_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                                 const st_stream *stream);
st_status kernel_cpu_sum(void *ctx, const st_tensor *out, const st_tensor *x,
                         const st_stream *stream);

st_status kernel_cpu_adamw(void *ctx, const st_tensor *param, const st_tensor *master,
                           const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                           const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                           int segment_count, const st_stream *stream);
st_status kernel_cpu_scale(void *ctx, const st_tensor *x, float factor, const st_stream *stream);
st_status kernel_cpu_finite_check(void *ctx, const st_tensor *flag, const st_tensor *x,
                                  const st_stream *stream);
st_status kernel_cpu_step_factors(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                                  const st_tensor *flag, double max_norm, double loss_scale,
                                  const st_stream *stream);

/* ST_ERR_INVALID_ARG naming the first of ids[0..count) outside [0, limit): an id indexes
 * memory, and host memory is cheap to check before it is trusted. `what` names the ids. */
st_status kernel_cpu_check_ids(const char *what, const int32_t *ids, int64_t count, int64_t limit);

#endif /* ST_KERNELS_CPU_CPU_OPS_H */
