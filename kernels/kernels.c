/* kernels.c - backend lookup and the kernel_<op> wrappers: check the arguments (check.h), then
 * dispatch through the backend's table. Holds no state; computes nothing itself. */
#include "kernels/kernels.h"

#include "core/error.h"
#include "kernels/check.h"

int kernel_has_backend(st_device_kind kind) { return kind == ST_DEVICE_CPU; }

st_status kernel_backend_for(const st_device *dev, const kernel_backend **out) {
  *out = NULL;
  if (!dev || !dev->backend) return st_error(ST_ERR_INVALID_ARG, "kernel_backend_for: no device");
  if (dev->backend->kind == ST_DEVICE_CPU) {
    *out = &kernel_backend_cpu;
    return ST_OK;
  }
  return st_error(ST_ERR_UNSUPPORTED, "no kernel backend for device '%s' in this build",
                  dev->backend->name);
}

/* The shapes of a linear layer: inp [N, C], weight [C, OC] (or [OC, C]), out [N, OC], bias
 * [OC] or NULL. Also checks the backward's dout and dbias, which have the shapes of out and
 * bias. */
static st_status check_linear(const kernel_check *c, const char *out_name, const st_tensor *out,
                              const st_tensor *inp, const st_tensor *weight,
                              kernel_weight_layout layout, const char *bias_name,
                              const st_tensor *bias) {
  ST_CHECK(kernel_check_operand(c, "weight", weight));
  ST_CHECK(kernel_check_ndim(c, "weight", weight, 2));
  int in_dim = layout == KERNEL_WEIGHT_IN_OUT ? 0 : 1;
  int64_t rows = kernel_rows(inp), channels = weight->shape[in_dim],
          out_channels = weight->shape[1 - in_dim];
  ST_CHECK(kernel_check_rows(c, "inp", inp, rows, channels));
  ST_CHECK(kernel_check_operand(c, out_name, out));
  ST_CHECK(kernel_check_rows(c, out_name, out, rows, out_channels));
  if (!bias) return ST_OK;
  ST_CHECK(kernel_check_operand(c, bias_name, bias));
  return kernel_check_shape(c, bias_name, bias, 1, &out_channels);
}

static st_status matmul_forward(const char *op, const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *inp, const st_tensor *weight,
                                kernel_weight_layout layout, const st_tensor *bias,
                                const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, op, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(check_linear(&c, "out", out, inp, weight, layout, "bias", bias));
  return kb->matmul_forward(out, inp, weight, layout, bias, stream);
}

static st_status matmul_backward(const char *op, const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *inp,
                                 const st_tensor *weight, kernel_weight_layout layout,
                                 const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, op, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(check_linear(&c, "dout", dout, inp, weight, layout, "dbias", dbias));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  ST_CHECK(kernel_check_like(&c, "dweight", dweight, weight));
  return kb->matmul_backward(dinp, dweight, dbias, dout, inp, weight, layout, stream);
}

st_status kernel_matmul_forward(const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *inp, const st_tensor *weight,
                                const st_tensor *bias, const st_stream *stream) {
  return matmul_forward(__func__, kb, out, inp, weight, KERNEL_WEIGHT_IN_OUT, bias, stream);
}

st_status kernel_matmul_backward(const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *inp,
                                 const st_tensor *weight, const st_stream *stream) {
  return matmul_backward(__func__, kb, dinp, dweight, dbias, dout, inp, weight,
                         KERNEL_WEIGHT_IN_OUT, stream);
}

st_status kernel_matmul_wt_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_stream *stream) {
  return matmul_forward(__func__, kb, out, inp, weight, KERNEL_WEIGHT_OUT_IN, NULL, stream);
}

st_status kernel_matmul_wt_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dout,
                                    const st_tensor *inp, const st_tensor *weight,
                                    const st_stream *stream) {
  return matmul_backward(__func__, kb, dinp, dweight, NULL, dout, inp, weight, KERNEL_WEIGHT_OUT_IN,
                         stream);
}

/* The shapes of a LayerNorm: inp and out [N, C], mean and rstd N values, weight and bias [C].
 * The backward passes dout for out and dbias for bias. */
static st_status check_layernorm(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const st_tensor *mean, const st_tensor *rstd, const st_tensor *inp,
                                 const st_tensor *weight, const char *bias_name,
                                 const st_tensor *bias) {
  int64_t rows = kernel_rows(inp), channels = kernel_cols(inp);
  ST_CHECK(kernel_check_like(c, out_name, out, inp));
  ST_CHECK(kernel_check_stats(c, "mean", mean));
  ST_CHECK(kernel_check_numel(c, "mean", mean, rows));
  ST_CHECK(kernel_check_stats(c, "rstd", rstd));
  ST_CHECK(kernel_check_numel(c, "rstd", rstd, rows));
  ST_CHECK(kernel_check_operand(c, "weight", weight));
  ST_CHECK(kernel_check_shape(c, "weight", weight, 1, &channels));
  ST_CHECK(kernel_check_operand(c, bias_name, bias));
  return kernel_check_shape(c, bias_name, bias, 1, &channels);
}

st_status kernel_layernorm_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *mean, const st_tensor *rstd,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_tensor *bias, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(check_layernorm(&c, "out", out, mean, rstd, inp, weight, "bias", bias));
  return kb->layernorm_forward(out, mean, rstd, inp, weight, bias, stream);
}

st_status kernel_layernorm_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dbias,
                                    const st_tensor *dout, const st_tensor *inp,
                                    const st_tensor *weight, const st_tensor *mean,
                                    const st_tensor *rstd, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(check_layernorm(&c, "dout", dout, mean, rstd, inp, weight, "dbias", dbias));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  ST_CHECK(kernel_check_like(&c, "dweight", dweight, weight));
  return kb->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, stream);
}

st_status kernel_gelu_forward(const kernel_backend *kb, const st_tensor *out, const st_tensor *inp,
                              const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(kernel_check_like(&c, "out", out, inp));
  return kb->gelu_forward(out, inp, stream);
}

st_status kernel_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                               const st_tensor *dout, const st_tensor *inp,
                               const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "inp", inp));
  ST_CHECK(kernel_check_like(&c, "dout", dout, inp));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  return kb->gelu_backward(dinp, dout, inp, stream);
}

/* The shapes of an attention: qkv [B, T, 3C], probs [B, NH, T, T] with NH dividing C, and
 * out [B, T, C]. The backward passes dout for out. */
static st_status check_attention(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const st_tensor *probs, const st_tensor *qkv) {
  ST_CHECK(kernel_check_ndim(c, "qkv", qkv, 3));
  int64_t batch = qkv->shape[0], seq = qkv->shape[1], channels = qkv->shape[2] / 3;
  if (qkv->shape[2] % 3 != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: qkv has %lld features, not a multiple of 3", c->op,
                    (long long)qkv->shape[2]);
  }
  ST_CHECK(kernel_check_operand(c, "probs", probs));
  ST_CHECK(kernel_check_ndim(c, "probs", probs, 4));
  int64_t heads = probs->shape[1];
  if (heads < 1 || channels % heads != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %lld heads do not divide %lld channels", c->op,
                    (long long)heads, (long long)channels);
  }
  ST_CHECK(kernel_check_shape(c, "probs", probs, 4, (int64_t[]){batch, heads, seq, seq}));
  ST_CHECK(kernel_check_operand(c, out_name, out));
  return kernel_check_shape(c, out_name, out, 3, (int64_t[]){batch, seq, channels});
}

st_status kernel_attention_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *probs, const st_tensor *qkv,
                                   const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "qkv", qkv));
  ST_CHECK(check_attention(&c, "out", out, probs, qkv));
  return kb->attention_forward(out, probs, qkv, stream);
}

st_status kernel_attention_backward(const kernel_backend *kb, const st_tensor *dqkv,
                                    const st_tensor *dout, const st_tensor *qkv,
                                    const st_tensor *probs, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "qkv", qkv));
  ST_CHECK(check_attention(&c, "dout", dout, probs, qkv));
  ST_CHECK(kernel_check_like(&c, "dqkv", dqkv, qkv));
  return kb->attention_backward(dqkv, dout, qkv, probs, stream);
}

/* The shapes of a cached attention: qkv N rows of 3C, out N rows of C, both caches [S, C] with
 * past + N <= S, and n_head dividing C. */
static st_status check_attention_cached(const kernel_check *c, const st_tensor *out,
                                        const st_tensor *k_cache, const st_tensor *v_cache,
                                        const st_tensor *qkv, int64_t past, int64_t n_head) {
  int64_t rows = kernel_rows(qkv), channels = kernel_cols(qkv) / 3;
  if (kernel_cols(qkv) % 3 != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: qkv has %lld features, not a multiple of 3", c->op,
                    (long long)kernel_cols(qkv));
  }
  if (n_head < 1 || channels % n_head != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %lld heads do not divide %lld channels", c->op,
                    (long long)n_head, (long long)channels);
  }
  ST_CHECK(kernel_check_operand(c, "out", out));
  ST_CHECK(kernel_check_rows(c, "out", out, rows, channels));
  ST_CHECK(kernel_check_operand(c, "k_cache", k_cache));
  ST_CHECK(kernel_check_ndim(c, "k_cache", k_cache, 2));
  ST_CHECK(kernel_check_rows(c, "k_cache", k_cache, k_cache->shape[0], channels));
  ST_CHECK(kernel_check_like(c, "v_cache", v_cache, k_cache));
  if (past < 0 || past > k_cache->shape[0] - rows) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: %lld new tokens after %lld cached do not fit a cache of %lld positions",
                    c->op, (long long)rows, (long long)past, (long long)k_cache->shape[0]);
  }
  return ST_OK;
}

st_status kernel_attention_cached_forward(const kernel_backend *kb, const st_tensor *out,
                                          const st_tensor *k_cache, const st_tensor *v_cache,
                                          const st_tensor *qkv, int64_t past, int64_t n_head,
                                          const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "qkv", qkv));
  ST_CHECK(check_attention_cached(&c, out, k_cache, v_cache, qkv, past, n_head));
  return kb->attention_cached_forward(out, k_cache, v_cache, qkv, past, n_head, stream);
}

st_status kernel_residual_forward(const kernel_backend *kb, const st_tensor *out,
                                  const st_tensor *a, const st_tensor *b, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "a", a));
  ST_CHECK(kernel_check_like(&c, "b", b, a));
  ST_CHECK(kernel_check_like(&c, "out", out, a));
  return kb->residual_forward(out, a, b, stream);
}

/* The shapes of an embedding: out [B, T, C], wte [V, C], wpe [maxT, C] with T <= maxT. The
 * backward passes dout, dwte and dwpe for out, wte and wpe. */
static st_status check_embedding(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const int32_t *tokens, const char *wte_name, const st_tensor *wte,
                                 const char *wpe_name, const st_tensor *wpe) {
  ST_CHECK(kernel_check_ndim(c, out_name, out, 3));
  int64_t seq = out->shape[1], channels = out->shape[2];
  ST_CHECK(kernel_check_ids(c, "tokens", tokens));
  ST_CHECK(kernel_check_operand(c, wte_name, wte));
  ST_CHECK(kernel_check_ndim(c, wte_name, wte, 2));
  ST_CHECK(kernel_check_rows(c, wte_name, wte, wte->shape[0], channels));
  ST_CHECK(kernel_check_operand(c, wpe_name, wpe));
  ST_CHECK(kernel_check_ndim(c, wpe_name, wpe, 2));
  ST_CHECK(kernel_check_rows(c, wpe_name, wpe, wpe->shape[0], channels));
  if (wpe->shape[0] < seq) {
    return st_error(ST_ERR_INVALID_ARG, "%s: sequence of %lld tokens, %s has only %lld positions",
                    c->op, (long long)seq, wpe_name, (long long)wpe->shape[0]);
  }
  return ST_OK;
}

st_status kernel_embedding_forward(const kernel_backend *kb, const st_tensor *out,
                                   const int32_t *tokens, const st_tensor *wte,
                                   const st_tensor *wpe, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "out", out));
  ST_CHECK(check_embedding(&c, "out", out, tokens, "wte", wte, "wpe", wpe));
  return kb->embedding_forward(out, tokens, wte, wpe, stream);
}

st_status kernel_embedding_backward(const kernel_backend *kb, const st_tensor *dwte,
                                    const st_tensor *dwpe, const st_tensor *dout,
                                    const int32_t *tokens, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "dout", dout));
  ST_CHECK(check_embedding(&c, "dout", dout, tokens, "dwte", dwte, "dwpe", dwpe));
  return kb->embedding_backward(dwte, dwpe, dout, tokens, stream);
}

/* The shapes of a loss: logits [N, Vp] with 1 <= vocab <= Vp, and N targets. */
static st_status check_loss(const kernel_check *c, const st_tensor *logits, const int32_t *targets,
                            int64_t vocab) {
  if (vocab < 1 || vocab > kernel_cols(logits)) {
    return st_error(ST_ERR_INVALID_ARG, "%s: vocabulary of %lld for logits of %lld columns", c->op,
                    (long long)vocab, (long long)kernel_cols(logits));
  }
  return kernel_check_ids(c, "targets", targets);
}

st_status kernel_crossentropy_forward(const kernel_backend *kb, const st_tensor *losses,
                                      const st_tensor *logits, const int32_t *targets,
                                      int64_t vocab, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "logits", logits));
  ST_CHECK(check_loss(&c, logits, targets, vocab));
  ST_CHECK(kernel_check_stats(&c, "losses", losses));
  ST_CHECK(kernel_check_numel(&c, "losses", losses, kernel_rows(logits)));
  return kb->crossentropy_forward(losses, logits, targets, vocab, stream);
}

st_status kernel_crossentropy_backward(const kernel_backend *kb, const st_tensor *dlogits,
                                       const st_tensor *logits, const int32_t *targets,
                                       int64_t vocab, float dloss_scale, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_compute(&c, "logits", logits));
  ST_CHECK(check_loss(&c, logits, targets, vocab));
  ST_CHECK(kernel_check_like(&c, "dlogits", dlogits, logits));
  return kb->crossentropy_backward(dlogits, logits, targets, vocab, dloss_scale, stream);
}

st_status kernel_cast(const kernel_backend *kb, const st_tensor *dst, const st_tensor *src,
                      const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  ST_CHECK(kernel_check_placed(&c, "src", src));
  ST_CHECK(kernel_check_placed(&c, "dst", dst));
  ST_CHECK(kernel_check_numel(&c, "dst", dst, tensor_numel(src)));
  int supported = (src->dtype == ST_FP32 && dst->dtype == ST_BF16) ||
                  (src->dtype == ST_BF16 && dst->dtype == ST_FP32);
  if (!supported) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: no cast from %s to %s", __func__,
                    dtype_name(src->dtype), dtype_name(dst->dtype));
  }
  return kb->cast(dst, src, stream);
}

st_status kernel_sum_squares(const kernel_backend *kb, double *out, const st_tensor *x,
                             const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, kb, stream));
  if (!out) return st_error(ST_ERR_INVALID_ARG, "%s: out is NULL", __func__);
  ST_CHECK(kernel_check_placed(&c, "x", x));
  if (x->dtype != ST_FP32 && x->dtype != ST_BF16) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: x is %s, expected fp32 or bf16", __func__,
                    dtype_name(x->dtype));
  }
  return kb->sum_squares(out, x, stream);
}
