/* kernels.h - the compute ops of shardtrain: one interface, one implementation per device.
 *
 * A kernel backend is a table of function pointers (CPU: OpenBLAS + OpenMP, kernels/cpu/;
 * CUDA: kernels/cuda/, later). Callers get the backend of their device once with
 * kernel_backend_for() and call the kernel_<op>() wrappers below, which check shapes, dtypes,
 * devices and contiguity the same way for every backend and then dispatch; callers never test
 * which backend they hold, and a backend may assume its arguments were checked.
 *
 * Conventions shared by every op:
 * - Rows: an activation's last dimension is its features and every other dimension counts
 *   rows, so [B, T, C] and [B*T, C] are the same N = B*T rows of C.
 * - Arguments: the backend, outputs, inputs, scalars, then the stream the op runs on. The
 *   CPU backend runs synchronously; on CUDA an op only enqueues work.
 * - Dtypes: activations, weights and their gradients of one op share a dtype the backend
 *   computes in (CPU: fp32 only); statistics (LayerNorm mean/rstd, per-token losses) are fp32.
 * - Gradients ACCUMULATE: every backward op adds (+=) into every gradient it produces.
 *   Parameter gradients sum over micro-batches, and an activation's gradient is the sum over
 *   the branches that read it (the residual stream), so the engine zeroes a gradient buffer
 *   where its sum starts and never needs a separate add. The one exception is
 *   kernel_crossentropy_backward, which starts the chain and overwrites dlogits.
 * - Outputs never alias inputs unless an op says so.
 * - Token ids and targets are int32 arrays in the device's memory, as many as the rows of the
 *   tensor they go with: core's st_dtype has no integer type, so they travel as pointers.
 */
#ifndef ST_KERNELS_KERNELS_H
#define ST_KERNELS_KERNELS_H

#include <stdint.h>

#include "core/device.h"
#include "core/tensor.h"
#include "shardtrain.h"

/* LayerNorm's epsilon (GPT-2's). */
#define KERNEL_LAYERNORM_EPS 1e-5f

/* The rows convention: the extent of the last dimension, and the product of all the others. */
int64_t kernel_cols(const st_tensor *t);
int64_t kernel_rows(const st_tensor *t);

/* How a linear layer's weight is stored: [in, out] (Hugging Face Conv1D, every layer of GPT-2)
 * or [out, in] (the LM head, which is the token embedding wte[V, C] itself). */
typedef enum kernel_weight_layout {
  KERNEL_WEIGHT_IN_OUT = 0,
  KERNEL_WEIGHT_OUT_IN = 1
} kernel_weight_layout;

/* What a backend implements; argument order and meaning as in the kernel_<op> wrappers. */
typedef struct kernel_backend {
  const char *name;
  st_device_kind device;
  unsigned compute_dtypes; /* bit (1u << dtype) for each dtype its compute ops accept */
  st_status (*matmul_forward)(const st_tensor *out, const st_tensor *inp, const st_tensor *weight,
                              kernel_weight_layout layout, const st_tensor *bias,
                              const st_stream *stream);
  st_status (*matmul_backward)(const st_tensor *dinp, const st_tensor *dweight,
                               const st_tensor *dbias, const st_tensor *dout, const st_tensor *inp,
                               const st_tensor *weight, kernel_weight_layout layout,
                               const st_stream *stream);
  st_status (*layernorm_forward)(const st_tensor *out, const st_tensor *mean, const st_tensor *rstd,
                                 const st_tensor *inp, const st_tensor *weight,
                                 const st_tensor *bias, const st_stream *stream);
  st_status (*layernorm_backward)(const st_tensor *dinp, const st_tensor *dweight,
                                  const st_tensor *dbias, const st_tensor *dout,
                                  const st_tensor *inp, const st_tensor *weight,
                                  const st_tensor *mean, const st_tensor *rstd,
                                  const st_stream *stream);
  st_status (*gelu_forward)(const st_tensor *out, const st_tensor *inp, const st_stream *stream);
  st_status (*gelu_backward)(const st_tensor *dinp, const st_tensor *dout, const st_tensor *inp,
                             const st_stream *stream);
  st_status (*attention_forward)(const st_tensor *out, const st_tensor *probs, const st_tensor *qkv,
                                 const st_stream *stream);
  st_status (*attention_backward)(const st_tensor *dqkv, const st_tensor *dout,
                                  const st_tensor *qkv, const st_tensor *probs,
                                  const st_stream *stream);
  st_status (*attention_cached_forward)(const st_tensor *out, const st_tensor *k_cache,
                                        const st_tensor *v_cache, const st_tensor *qkv,
                                        int64_t past, int64_t n_head, const st_stream *stream);
  st_status (*residual_forward)(const st_tensor *out, const st_tensor *a, const st_tensor *b,
                                const st_stream *stream);
  st_status (*embedding_forward)(const st_tensor *out, const int32_t *tokens, const st_tensor *wte,
                                 const st_tensor *wpe, const st_stream *stream);
  st_status (*embedding_backward)(const st_tensor *dwte, const st_tensor *dwpe,
                                  const st_tensor *dout, const int32_t *tokens,
                                  const st_stream *stream);
  st_status (*crossentropy_forward)(const st_tensor *losses, const st_tensor *logits,
                                    const int32_t *targets, int64_t vocab, const st_stream *stream);
  st_status (*crossentropy_backward)(const st_tensor *dlogits, const st_tensor *logits,
                                     const int32_t *targets, int64_t vocab, float dloss_scale,
                                     const st_stream *stream);
  st_status (*cast)(const st_tensor *dst, const st_tensor *src, const st_stream *stream);
  st_status (*sum_squares)(double *out, const st_tensor *x, const st_stream *stream);
} kernel_backend;

/* Whether this build has kernels for a kind of device. */
int kernel_has_backend(st_device_kind kind);

/* The backend that computes on `dev`'s device. ST_ERR_UNSUPPORTED when this build has no
 * kernels for that device. */
st_status kernel_backend_for(const st_device *dev, const kernel_backend **out);

/* ---- Linear layers ------------------------------------------------------------------------- */

/* out[N, OC] = inp[N, C] @ weight[C, OC] + bias[OC]. The weight is stored [in, out] like
 * Hugging Face GPT-2's Conv1D. bias may be NULL (no bias). */
st_status kernel_matmul_forward(const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *inp, const st_tensor *weight,
                                const st_tensor *bias, const st_stream *stream);

/* dinp += dout @ weight^T, dweight += inp^T @ dout, dbias += dout summed over rows.
 * dbias is NULL exactly when the forward had no bias. */
st_status kernel_matmul_backward(const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *inp,
                                 const st_tensor *weight, const st_stream *stream);

/* The tied LM head: out[N, V] = inp[N, C] @ weight[V, C]^T, the weight stored [out, in]; no
 * bias. */
st_status kernel_matmul_wt_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_stream *stream);

/* dinp += dout @ weight, dweight[V, C] += dout^T @ inp. */
st_status kernel_matmul_wt_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dout,
                                    const st_tensor *inp, const st_tensor *weight,
                                    const st_stream *stream);

/* ---- Normalisation and activation ---------------------------------------------------------- */

/* out = (inp - mean) * rstd * weight + bias over each row of C features, with
 * rstd = 1 / sqrt(var + KERNEL_LAYERNORM_EPS) (biased variance). Saves mean[N] and rstd[N]
 * for the backward. */
st_status kernel_layernorm_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *mean, const st_tensor *rstd,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_tensor *bias, const st_stream *stream);

/* dinp, dweight, dbias += the gradients of layernorm_forward, from the saved mean and rstd. */
st_status kernel_layernorm_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dbias,
                                    const st_tensor *dout, const st_tensor *inp,
                                    const st_tensor *weight, const st_tensor *mean,
                                    const st_tensor *rstd, const st_stream *stream);

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's tanh-approximated GELU. */
st_status kernel_gelu_forward(const kernel_backend *kb, const st_tensor *out, const st_tensor *inp,
                              const st_stream *stream);

/* dinp += dout * gelu'(inp). */
st_status kernel_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                               const st_tensor *dout, const st_tensor *inp,
                               const st_stream *stream);

/* ---- Attention ----------------------------------------------------------------------------- */

/* Causal multi-head self-attention. qkv[B, T, 3C] holds q, k, v side by side in that order
 * (Hugging Face GPT-2's c_attn output); head h owns features [h*hs, (h+1)*hs) of each, with
 * NH = probs' dimension 1 and hs = C / NH. out[B, T, C] = softmax(q k^T / sqrt(hs), causal) v,
 * heads side by side. probs[B, NH, T, T] receives the softmax (zero above the diagonal), which
 * the backward reads. */
st_status kernel_attention_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *probs, const st_tensor *qkv,
                                   const st_stream *stream);

/* dqkv += the gradient of attention_forward with respect to qkv. A backend may use scratch
 * memory from the allocator's workspace category (the CPU takes T*T floats). */
st_status kernel_attention_backward(const kernel_backend *kb, const st_tensor *dqkv,
                                    const st_tensor *dout, const st_tensor *qkv,
                                    const st_tensor *probs, const st_stream *stream);

/* Causal attention of N new tokens of one sequence over a key/value cache, for generation: the
 * new tokens sit at positions [past, past + N). qkv[N, 3C] holds their q, k and v as in
 * attention_forward (n_head heads of hs = C / n_head features). Their k and v are first stored
 * in rows [past, past + N) of k_cache and v_cache [S, C] (past + N <= S); then out[N, C] holds,
 * for new token i and each head, softmax(q_i k[0 .. past + i]^T / sqrt(hs)) v[0 .. past + i],
 * heads side by side. Cache rows from past + N on are neither read nor written, and nothing is
 * kept for a backward. A backend may take scratch memory from the allocator's workspace
 * category (the CPU takes N x (past + N) floats). */
st_status kernel_attention_cached_forward(const kernel_backend *kb, const st_tensor *out,
                                          const st_tensor *k_cache, const st_tensor *v_cache,
                                          const st_tensor *qkv, int64_t past, int64_t n_head,
                                          const st_stream *stream);

/* ---- Residual stream and embeddings -------------------------------------------------------- */

/* out = a + b, elementwise; out may alias a or b. There is no residual backward op: the
 * gradient of out reaches a and b unchanged, and since every backward op accumulates, the
 * engine keeps one gradient buffer for the residual stream and lets each branch add to it. */
st_status kernel_residual_forward(const kernel_backend *kb, const st_tensor *out,
                                  const st_tensor *a, const st_tensor *b, const st_stream *stream);

/* out[b, t, :] = wte[tokens[b*T + t], :] + wpe[t, :] for out[B, T, C], wte[V, C] and
 * wpe[maxT, C] with T <= maxT. Token ids must lie in [0, V). */
st_status kernel_embedding_forward(const kernel_backend *kb, const st_tensor *out,
                                   const int32_t *tokens, const st_tensor *wte,
                                   const st_tensor *wpe, const st_stream *stream);

/* dwte[tokens[b*T + t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :]. Deterministic:
 * the result does not depend on thread count or scheduling (no atomics). */
st_status kernel_embedding_backward(const kernel_backend *kb, const st_tensor *dwte,
                                    const st_tensor *dwpe, const st_tensor *dout,
                                    const int32_t *tokens, const st_stream *stream);

/* ---- Loss ---------------------------------------------------------------------------------- */

/* losses[n] = -log softmax(logits[n, :vocab])[targets[n]] for logits[N, Vp], vocab <= Vp.
 * Columns [vocab, Vp) are padding and take no part. Targets must lie in [0, vocab). */
st_status kernel_crossentropy_forward(const kernel_backend *kb, const st_tensor *losses,
                                      const st_tensor *logits, const int32_t *targets,
                                      int64_t vocab, const st_stream *stream);

/* dlogits = (softmax(logits[n, :vocab]) - onehot(targets[n])) * dloss_scale, and 0 in the
 * padding columns: the gradient of dloss_scale * sum(losses). OVERWRITES dlogits, which may
 * alias logits (the engine reuses the largest activation in place). The engine passes
 * dloss_scale = 1 / (tokens in the global batch). */
st_status kernel_crossentropy_backward(const kernel_backend *kb, const st_tensor *dlogits,
                                       const st_tensor *logits, const int32_t *targets,
                                       int64_t vocab, float dloss_scale, const st_stream *stream);

/* ---- Whole buffers ------------------------------------------------------------------------- */

/* dst = src converted elementwise, fp32 -> bf16 (round to nearest even) or bf16 -> fp32;
 * the two hold the same number of elements. */
st_status kernel_cast(const kernel_backend *kb, const st_tensor *dst, const st_tensor *src,
                      const st_stream *stream);

/* *out = sum of x[i]^2 over a fp32 or bf16 buffer, accumulated in double (for the global
 * gradient norm). Waits for the stream: *out is host memory. Deterministic for a given input. */
st_status kernel_sum_squares(const kernel_backend *kb, double *out, const st_tensor *x,
                             const st_stream *stream);

/* Backends, for kernels.c's dispatch. */
extern const kernel_backend kernel_backend_cpu;

#endif /* ST_KERNELS_KERNELS_H */
