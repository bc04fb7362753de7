/* kernels.c - backend lookup and the kernel_<op> wrappers: check the arguments (check.h), then
 * dispatch through the backend's table. Holds no state; computes nothing itself. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kernels/backend_ops.h"
#include "kernels/check.h"
#include "kernels/cuda_facts.h"

int kernel_has_backend(st_device_kind kind) {
#ifdef ST_HAVE_CUDA
  if (kind == ST_DEVICE_CUDA) return 1;
#endif
  return kind == ST_DEVICE_CPU;
}

static const kernel_ops *ops_for(st_device_kind kind) {
#ifdef ST_HAVE_CUDA
  if (kind == ST_DEVICE_CUDA) return &kernel_ops_cuda;
#endif
  return kind == ST_DEVICE_CPU ? &kernel_ops_cpu : NULL;
}

/* The facts of the backend for devices of `kind`, which every build has (backend_ops.h): the
 * kind queries below answer the same with or without the CUDA kernels. */
static const kernel_facts *facts_for(st_device_kind kind) {
  if (kind == ST_DEVICE_CUDA) return &kernel_facts_cuda;
  return kind == ST_DEVICE_CPU ? kernel_ops_cpu.facts : NULL;
}

st_status kernel_backend_create(const st_device *dev, kernel_backend **out) {
  *out = NULL;
  if (!dev || !dev->backend)
    return st_error(ST_ERR_INVALID_ARG, "kernel_backend_create: no device");
  const kernel_ops *ops = ops_for(dev->backend->kind);
  if (!ops) {
    return st_error(ST_ERR_UNSUPPORTED, "no kernel backend for device '%s' in this build",
                    dev->backend->name);
  }
  kernel_backend *kb = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&kb, sizeof *kb, MEM_HOST, MEM_WORKSPACE, NULL));
  *kb = (kernel_backend){.ops = ops, .device = *dev};
  st_status status = ops->context_create ? ops->context_create(dev, &kb->ctx) : ST_OK;
  if (status != ST_OK) {
    mem_free(kb);
    return status;
  }
  *out = kb;
  return ST_OK;
}

void kernel_backend_destroy(kernel_backend *kb) {
  if (!kb) return;
  if (kb->ops->context_destroy) kb->ops->context_destroy(kb->ctx);
  mem_free(kb);
}

const char *kernel_backend_name(const kernel_backend *kb) { return kb->ops->name; }

static const char *const op_names[KERNEL_OP_COUNT] = {
    [KERNEL_OP_MATMUL] = "matmul",
    [KERNEL_OP_MATMUL_GELU] = "matmul_gelu",
    [KERNEL_OP_LAYERNORM] = "layernorm",
    [KERNEL_OP_GELU] = "gelu",
    [KERNEL_OP_ATTENTION] = "attention",
    [KERNEL_OP_ATTENTION_CACHED] = "attention_cached",
    [KERNEL_OP_RESIDUAL] = "residual",
    [KERNEL_OP_EMBEDDING] = "embedding",
    [KERNEL_OP_CLASSIFIER] = "classifier",
    [KERNEL_OP_CAST] = "cast",
    [KERNEL_OP_ADAMW] = "adamw",
    [KERNEL_OP_SUM_SQUARES] = "sum_squares",
    [KERNEL_OP_SUM] = "sum",
    [KERNEL_OP_SCALE] = "scale",
    [KERNEL_OP_FINITE_CHECK] = "finite_check",
    [KERNEL_OP_STEP_FACTORS] = "step_factors",
};

const char *kernel_op_name(kernel_op op) {
  return (unsigned)op < KERNEL_OP_COUNT ? op_names[op] : "unknown";
}

/* Whether table `o` has every entry of vocabulary op `op`. */
static int ops_have(const kernel_ops *o, kernel_op op) {
  switch (op) {
    case KERNEL_OP_MATMUL:
    case KERNEL_OP_MATMUL_GELU: return o->matmul_forward && o->matmul_backward;
    case KERNEL_OP_LAYERNORM: return o->layernorm_forward && o->layernorm_backward;
    case KERNEL_OP_GELU: return o->gelu_forward && o->gelu_backward;
    case KERNEL_OP_ATTENTION:
      return o->facts->attention_state_numel && o->attention_forward && o->attention_backward;
    case KERNEL_OP_ATTENTION_CACHED: return o->attention_cached_forward != NULL;
    case KERNEL_OP_RESIDUAL: return o->residual_forward != NULL;
    case KERNEL_OP_EMBEDDING: return o->embedding_forward && o->embedding_backward;
    case KERNEL_OP_CLASSIFIER: return o->classifier != NULL;
    case KERNEL_OP_CAST: return o->cast != NULL;
    case KERNEL_OP_ADAMW: return o->adamw != NULL;
    case KERNEL_OP_SUM_SQUARES: return o->sum_squares != NULL;
    case KERNEL_OP_SUM: return o->sum != NULL;
    case KERNEL_OP_SCALE: return o->scale != NULL;
    case KERNEL_OP_FINITE_CHECK: return o->finite_check != NULL;
    case KERNEL_OP_STEP_FACTORS: return o->step_factors != NULL;
    case KERNEL_OP_COUNT: break;
  }
  return 0;
}

int kernel_backend_has(const kernel_backend *kb, kernel_op op) { return ops_have(kb->ops, op); }

static int facts_support(const kernel_facts *f, kernel_op op, st_dtype dtype) {
  if (!f || (unsigned)op >= KERNEL_OP_COUNT || (unsigned)dtype >= ST_DTYPE_COUNT) return 0;
  return f->supports(op, dtype);
}

int kernel_supports(const kernel_backend *kb, kernel_op op, st_dtype dtype) {
  return kb && (unsigned)op < KERNEL_OP_COUNT && ops_have(kb->ops, op) &&
         facts_support(kb->ops->facts, op, dtype);
}

int kernel_kind_supports(st_device_kind kind, kernel_op op, st_dtype dtype) {
  return facts_support(facts_for(kind), op, dtype);
}

/* The ops whose backward writes parameter gradients (kernel_supports_grad_dtype). */
static int writes_param_grads(kernel_op op) {
  return op == KERNEL_OP_MATMUL || op == KERNEL_OP_MATMUL_GELU || op == KERNEL_OP_LAYERNORM ||
         op == KERNEL_OP_EMBEDDING;
}

/* Whether facts `f` say that `op`'s backward on `dtype` writes parameter gradients in
 * grad_dtype, once the op itself is supported on dtype. */
static int facts_support_grad_dtype(const kernel_facts *f, kernel_op op, st_dtype dtype,
                                    st_dtype grad_dtype) {
  if (grad_dtype == dtype) return 1;
  return f->fp32_param_grads && grad_dtype == ST_FP32 && writes_param_grads(op);
}

int kernel_supports_grad_dtype(const kernel_backend *kb, kernel_op op, st_dtype dtype,
                               st_dtype grad_dtype) {
  return kernel_supports(kb, op, dtype) &&
         facts_support_grad_dtype(kb->ops->facts, op, dtype, grad_dtype);
}

int kernel_kind_supports_grad_dtype(st_device_kind kind, kernel_op op, st_dtype dtype,
                                    st_dtype grad_dtype) {
  const kernel_facts *f = facts_for(kind);
  return facts_support(f, op, dtype) && facts_support_grad_dtype(f, op, dtype, grad_dtype);
}

uint64_t kernel_kind_workspace_bytes(st_device_kind kind, mem_kind where) {
  const kernel_facts *f = facts_for(kind);
  return f && f->context_bytes ? f->context_bytes(where) : 0;
}

int kernel_kind_computes_in(st_device_kind kind, st_dtype dtype) {
  static const kernel_op compute_ops[] = {KERNEL_OP_MATMUL,    KERNEL_OP_MATMUL_GELU,
                                          KERNEL_OP_LAYERNORM, KERNEL_OP_ATTENTION,
                                          KERNEL_OP_EMBEDDING, KERNEL_OP_CLASSIFIER};
  const kernel_facts *f = facts_for(kind);
  int all = f != NULL;
  for (size_t i = 0; all && i < sizeof compute_ops / sizeof *compute_ops; i++) {
    all = facts_support(f, compute_ops[i], dtype);
  }
  return all;
}

/* The start of every op that computes: kernel_check_begin, then `t` (named `name`) sets the
 * op's compute dtype (kernel_check_compute). */
static st_status begin_compute(kernel_check *c, const char *op, kernel_op kop,
                               const kernel_backend *kb, const st_stream *stream, const char *name,
                               const st_tensor *t) {
  ST_CHECK(kernel_check_begin(c, op, kop, kb, stream));
  return kernel_check_compute(c, name, t);
}

/* The shapes of a linear layer: inp [N, C], weight [C, OC] (or [OC, C]), out [N, OC]. Also
 * checks the backward's dout, which has the shape of out. The bias [OC] (or dbias) is the
 * caller's: an operand in the forward, a parameter gradient in the backward. */
static st_status check_linear(const kernel_check *c, const char *out_name, const st_tensor *out,
                              const st_tensor *inp, const st_tensor *weight,
                              kernel_weight_layout layout) {
  ST_CHECK(kernel_check_operand(c, "weight", weight));
  ST_CHECK(kernel_check_ndim(c, "weight", weight, 2));
  int in_dim = layout == KERNEL_WEIGHT_IN_OUT ? 0 : 1;
  int64_t rows = kernel_rows(inp), channels = weight->shape[in_dim],
          out_channels = weight->shape[1 - in_dim];
  ST_CHECK(kernel_check_rows(c, "inp", inp, rows, channels));
  ST_CHECK(kernel_check_operand(c, out_name, out));
  return kernel_check_rows(c, out_name, out, rows, out_channels);
}

/* A layer's parameter gradients: dweight shaped like weight, and dbias (NULL: none) of
 * bias_len values in dweight's dtype, each in a dtype the backend writes them in. */
static st_status check_layer_grads(const kernel_check *c, const st_tensor *dweight,
                                   const st_tensor *weight, const st_tensor *dbias,
                                   int64_t bias_len) {
  ST_CHECK(kernel_check_param_grad(c, "dweight", dweight));
  ST_CHECK(kernel_check_shape(c, "dweight", dweight, weight->ndim, weight->shape));
  if (!dbias) return ST_OK;
  ST_CHECK(kernel_check_param_grad(c, "dbias", dbias));
  ST_CHECK(kernel_check_same_dtype(c, "dbias", dbias, "dweight", dweight));
  return kernel_check_shape(c, "dbias", dbias, 1, &bias_len);
}

/* Every matmul wrapper: the plain and tied-head forms (pre_gelu NULL) and the GELU epilogue,
 * whose pre_gelu has out's shape and whose bias is required. */
static st_status matmul_forward(const char *op, const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *pre_gelu, const st_tensor *inp,
                                const st_tensor *weight, kernel_weight_layout layout,
                                const st_tensor *bias, const st_stream *stream) {
  kernel_check c;
  const kernel_op kop = pre_gelu ? KERNEL_OP_MATMUL_GELU : KERNEL_OP_MATMUL;
  ST_CHECK(begin_compute(&c, op, kop, kb, stream, "inp", inp));
  ST_CHECK(check_linear(&c, "out", out, inp, weight, layout));
  if (bias) {
    ST_CHECK(kernel_check_operand(&c, "bias", bias));
    ST_CHECK(kernel_check_shape(&c, "bias", bias, 1, (const int64_t[]){kernel_cols(out)}));
  }
  if (kop == KERNEL_OP_MATMUL_GELU) {
    if (!bias) return st_error(ST_ERR_INVALID_ARG, "%s: bias is NULL", op);
    ST_CHECK(kernel_check_like(&c, "pre_gelu", pre_gelu, out));
  }
  return kb->ops->matmul_forward(kb->ctx, out, pre_gelu, inp, weight, layout, bias, stream);
}

static st_status matmul_backward(const char *op, const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *pre_gelu,
                                 const st_tensor *inp, const st_tensor *weight,
                                 kernel_weight_layout layout, const st_stream *stream) {
  kernel_check c;
  const kernel_op kop = pre_gelu ? KERNEL_OP_MATMUL_GELU : KERNEL_OP_MATMUL;
  ST_CHECK(begin_compute(&c, op, kop, kb, stream, "inp", inp));
  ST_CHECK(check_linear(&c, "dout", dout, inp, weight, layout));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  ST_CHECK(check_layer_grads(&c, dweight, weight, dbias, kernel_cols(dout)));
  if (kop == KERNEL_OP_MATMUL_GELU) {
    if (!dbias) return st_error(ST_ERR_INVALID_ARG, "%s: dbias is NULL", op);
    ST_CHECK(kernel_check_like(&c, "pre_gelu", pre_gelu, dout));
  }
  return kb->ops->matmul_backward(kb->ctx, dinp, dweight, dbias, dout, pre_gelu, inp, weight,
                                  layout, stream);
}

st_status kernel_matmul_forward(const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *inp, const st_tensor *weight,
                                const st_tensor *bias, const st_stream *stream) {
  return matmul_forward(__func__, kb, out, NULL, inp, weight, KERNEL_WEIGHT_IN_OUT, bias, stream);
}

st_status kernel_matmul_backward(const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *inp,
                                 const st_tensor *weight, const st_stream *stream) {
  return matmul_backward(__func__, kb, dinp, dweight, dbias, dout, NULL, inp, weight,
                         KERNEL_WEIGHT_IN_OUT, stream);
}

st_status kernel_matmul_wt_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_stream *stream) {
  return matmul_forward(__func__, kb, out, NULL, inp, weight, KERNEL_WEIGHT_OUT_IN, NULL, stream);
}

st_status kernel_matmul_wt_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dout,
                                    const st_tensor *inp, const st_tensor *weight,
                                    const st_stream *stream) {
  return matmul_backward(__func__, kb, dinp, dweight, NULL, dout, NULL, inp, weight,
                         KERNEL_WEIGHT_OUT_IN, stream);
}

st_status kernel_matmul_gelu_forward(const kernel_backend *kb, const st_tensor *out,
                                     const st_tensor *pre_gelu, const st_tensor *inp,
                                     const st_tensor *weight, const st_tensor *bias,
                                     const st_stream *stream) {
  if (!pre_gelu) return st_error(ST_ERR_INVALID_ARG, "%s: pre_gelu is NULL", __func__);
  return matmul_forward(__func__, kb, out, pre_gelu, inp, weight, KERNEL_WEIGHT_IN_OUT, bias,
                        stream);
}

st_status kernel_matmul_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                                      const st_tensor *dweight, const st_tensor *dbias,
                                      const st_tensor *dout, const st_tensor *pre_gelu,
                                      const st_tensor *inp, const st_tensor *weight,
                                      const st_stream *stream) {
  if (!pre_gelu) return st_error(ST_ERR_INVALID_ARG, "%s: pre_gelu is NULL", __func__);
  return matmul_backward(__func__, kb, dinp, dweight, dbias, dout, pre_gelu, inp, weight,
                         KERNEL_WEIGHT_IN_OUT, stream);
}

/* The shapes of a LayerNorm: inp and out [N, C], mean and rstd N values, weight [C]. The
 * backward passes dout for out. The bias [C] (or dbias) is the caller's, as for a linear
 * layer's. */
static st_status check_layernorm(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const st_tensor *mean, const st_tensor *rstd, const st_tensor *inp,
                                 const st_tensor *weight) {
  int64_t rows = kernel_rows(inp), channels = kernel_cols(inp);
  ST_CHECK(kernel_check_like(c, out_name, out, inp));
  ST_CHECK(kernel_check_stats(c, "mean", mean));
  ST_CHECK(kernel_check_numel(c, "mean", mean, rows));
  ST_CHECK(kernel_check_stats(c, "rstd", rstd));
  ST_CHECK(kernel_check_numel(c, "rstd", rstd, rows));
  ST_CHECK(kernel_check_operand(c, "weight", weight));
  return kernel_check_shape(c, "weight", weight, 1, &channels);
}

st_status kernel_layernorm_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *mean, const st_tensor *rstd,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_tensor *bias, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_LAYERNORM, kb, stream, "inp", inp));
  ST_CHECK(check_layernorm(&c, "out", out, mean, rstd, inp, weight));
  ST_CHECK(kernel_check_like(&c, "bias", bias, weight));
  return kb->ops->layernorm_forward(kb->ctx, NULL, out, mean, rstd, inp, NULL, weight, bias,
                                    stream);
}

st_status kernel_layernorm_residual_forward(const kernel_backend *kb, const st_tensor *residual,
                                            const st_tensor *out, const st_tensor *mean,
                                            const st_tensor *rstd, const st_tensor *a,
                                            const st_tensor *b, const st_tensor *weight,
                                            const st_tensor *bias, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_LAYERNORM, kb, stream, "a", a));
  ST_CHECK(kernel_check_like(&c, "b", b, a));
  ST_CHECK(kernel_check_like(&c, "residual", residual, a));
  ST_CHECK(check_layernorm(&c, "out", out, mean, rstd, a, weight));
  ST_CHECK(kernel_check_like(&c, "bias", bias, weight));
  return kb->ops->layernorm_forward(kb->ctx, residual, out, mean, rstd, a, b, weight, bias, stream);
}

st_status kernel_layernorm_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dbias,
                                    const st_tensor *dout, const st_tensor *inp,
                                    const st_tensor *weight, const st_tensor *mean,
                                    const st_tensor *rstd, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_LAYERNORM, kb, stream, "inp", inp));
  ST_CHECK(check_layernorm(&c, "dout", dout, mean, rstd, inp, weight));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  ST_CHECK(check_layer_grads(&c, dweight, weight, dbias, weight->shape[0]));
  ST_CHECK(kernel_check_placed(&c, "dbias", dbias)); /* a LayerNorm always has its bias */
  return kb->ops->layernorm_backward(kb->ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                     stream);
}

st_status kernel_gelu_forward(const kernel_backend *kb, const st_tensor *out, const st_tensor *inp,
                              const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_GELU, kb, stream, "inp", inp));
  ST_CHECK(kernel_check_like(&c, "out", out, inp));
  return kb->ops->gelu_forward(kb->ctx, out, inp, stream);
}

st_status kernel_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                               const st_tensor *dout, const st_tensor *inp,
                               const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_GELU, kb, stream, "inp", inp));
  ST_CHECK(kernel_check_like(&c, "dout", dout, inp));
  ST_CHECK(kernel_check_like(&c, "dinp", dinp, inp));
  return kb->ops->gelu_backward(kb->ctx, dinp, dout, inp, stream);
}

const char *kernel_attention_kind(const kernel_backend *kb) {
  return kb->ops->attention_kind ? kb->ops->attention_kind(kb->ctx) : kb->ops->name;
}

int64_t kernel_attention_fallbacks(const kernel_backend *kb) {
  return kb->ops->attention_fallbacks ? kb->ops->attention_fallbacks(kb->ctx) : 0;
}

int64_t kernel_attention_state_numel(const kernel_backend *kb, int64_t batch, int64_t n_head,
                                     int64_t seq) {
  if (!kb || !ops_have(kb->ops, KERNEL_OP_ATTENTION)) return 0;
  return kb->ops->facts->attention_state_numel(batch, n_head, seq);
}

int64_t kernel_kind_attention_state_numel(st_device_kind kind, int64_t batch, int64_t n_head,
                                          int64_t seq) {
  const kernel_facts *f = facts_for(kind);
  return f && f->attention_state_numel ? f->attention_state_numel(batch, n_head, seq) : 0;
}

uint64_t kernel_kind_attention_scratch_bytes(st_device_kind kind, int64_t seq) {
  const kernel_facts *f = facts_for(kind);
  return f && f->attention_scratch_bytes ? f->attention_scratch_bytes(seq) : 0;
}

/* The shapes of an attention: qkv [B, T, 3C] with n_head dividing C, out [B, T, C], and an
 * fp32 state of the size the backend asks for. The backward passes dout for out. */
static st_status check_attention(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const st_tensor *state, const st_tensor *qkv, int64_t n_head) {
  ST_CHECK(kernel_check_ndim(c, "qkv", qkv, 3));
  int64_t batch = qkv->shape[0], seq = qkv->shape[1], channels = qkv->shape[2] / 3;
  if (qkv->shape[2] % 3 != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: qkv has %lld features, not a multiple of 3", c->op,
                    (long long)qkv->shape[2]);
  }
  if (n_head < 1 || channels % n_head != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %lld heads do not divide %lld channels", c->op,
                    (long long)n_head, (long long)channels);
  }
  ST_CHECK(kernel_check_stats(c, "state", state));
  ST_CHECK(kernel_check_numel(c, "state", state,
                              kernel_attention_state_numel(c->kb, batch, n_head, seq)));
  ST_CHECK(kernel_check_operand(c, out_name, out));
  return kernel_check_shape(c, out_name, out, 3, (int64_t[]){batch, seq, channels});
}

st_status kernel_attention_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *state, const st_tensor *qkv, int64_t n_head,
                                   const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_ATTENTION, kb, stream, "qkv", qkv));
  ST_CHECK(check_attention(&c, "out", out, state, qkv, n_head));
  return kb->ops->attention_forward(kb->ctx, out, state, qkv, n_head, stream);
}

st_status kernel_attention_backward(const kernel_backend *kb, const st_tensor *dqkv,
                                    const st_tensor *dout, const st_tensor *qkv,
                                    const st_tensor *out, const st_tensor *state, int64_t n_head,
                                    const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_ATTENTION, kb, stream, "qkv", qkv));
  ST_CHECK(check_attention(&c, "dout", dout, state, qkv, n_head));
  ST_CHECK(kernel_check_like(&c, "out", out, dout));
  ST_CHECK(kernel_check_like(&c, "dqkv", dqkv, qkv));
  return kb->ops->attention_backward(kb->ctx, dqkv, dout, qkv, out, state, n_head, stream);
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
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_ATTENTION_CACHED, kb, stream, "qkv", qkv));
  ST_CHECK(check_attention_cached(&c, out, k_cache, v_cache, qkv, past, n_head));
  return kb->ops->attention_cached_forward(kb->ctx, out, k_cache, v_cache, qkv, past, n_head,
                                           stream);
}

st_status kernel_residual_forward(const kernel_backend *kb, const st_tensor *out,
                                  const st_tensor *a, const st_tensor *b, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_RESIDUAL, kb, stream, "a", a));
  ST_CHECK(kernel_check_like(&c, "b", b, a));
  ST_CHECK(kernel_check_like(&c, "out", out, a));
  return kb->ops->residual_forward(kb->ctx, out, a, b, stream);
}

/* How an embedding's tables are checked: the forward's wte and wpe are operands
 * (kernel_check_operand), the backward's dwte and dwpe parameter gradients
 * (kernel_check_param_grad). */
typedef st_status (*table_dtype_check)(const kernel_check *c, const char *name, const st_tensor *t);

/* The shapes of an embedding: out [B, T, C], wte [V, C], wpe [maxT, C] with T <= maxT. The
 * backward passes dout, dwte and dwpe for out, wte and wpe. */
static st_status check_embedding(const kernel_check *c, const char *out_name, const st_tensor *out,
                                 const int32_t *tokens, table_dtype_check table_dtype,
                                 const char *wte_name, const st_tensor *wte, const char *wpe_name,
                                 const st_tensor *wpe) {
  ST_CHECK(kernel_check_ndim(c, out_name, out, 3));
  int64_t seq = out->shape[1], channels = out->shape[2];
  ST_CHECK(kernel_check_ids(c, "tokens", tokens));
  ST_CHECK(table_dtype(c, wte_name, wte));
  ST_CHECK(kernel_check_ndim(c, wte_name, wte, 2));
  ST_CHECK(kernel_check_rows(c, wte_name, wte, wte->shape[0], channels));
  ST_CHECK(table_dtype(c, wpe_name, wpe));
  ST_CHECK(kernel_check_same_dtype(c, wpe_name, wpe, wte_name, wte));
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
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_EMBEDDING, kb, stream, "out", out));
  ST_CHECK(check_embedding(&c, "out", out, tokens, kernel_check_operand, "wte", wte, "wpe", wpe));
  return kb->ops->embedding_forward(kb->ctx, out, tokens, wte, wpe, stream);
}

st_status kernel_embedding_backward(const kernel_backend *kb, const st_tensor *dwte,
                                    const st_tensor *dwpe, const st_tensor *dout,
                                    const int32_t *tokens, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_EMBEDDING, kb, stream, "dout", dout));
  ST_CHECK(check_embedding(&c, "dout", dout, tokens, kernel_check_param_grad, "dwte", dwte, "dwpe",
                           dwpe));
  return kb->ops->embedding_backward(kb->ctx, dwte, dwpe, dout, tokens, stream);
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

st_status kernel_classifier(const kernel_backend *kb, const st_tensor *losses,
                            const st_tensor *dlogits, const st_tensor *logits,
                            const int32_t *targets, int64_t vocab, float dloss_scale,
                            const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_CLASSIFIER, kb, stream, "logits", logits));
  ST_CHECK(check_loss(&c, logits, targets, vocab));
  ST_CHECK(kernel_check_stats(&c, "losses", losses));
  ST_CHECK(kernel_check_numel(&c, "losses", losses, kernel_rows(logits)));
  if (dlogits) ST_CHECK(kernel_check_like(&c, "dlogits", dlogits, logits));
  return kb->ops->classifier(kb->ctx, losses, dlogits, logits, targets, vocab, dloss_scale, stream);
}

st_status kernel_cast(const kernel_backend *kb, const st_tensor *dst, const st_tensor *src,
                      const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, KERNEL_OP_CAST, kb, stream));
  ST_CHECK(kernel_check_placed(&c, "src", src));
  ST_CHECK(kernel_check_placed(&c, "dst", dst));
  ST_CHECK(kernel_check_numel(&c, "dst", dst, tensor_numel(src)));
  const st_dtype low = src->dtype == ST_FP32 ? dst->dtype : src->dtype;
  const int fp32_side = src->dtype == ST_FP32 || dst->dtype == ST_FP32;
  if (!fp32_side || !kernel_supports(kb, KERNEL_OP_CAST, low)) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: no cast from %s to %s on the %s backend", __func__,
                    dtype_name(src->dtype), dtype_name(dst->dtype), kb->ops->name);
  }
  return kb->ops->cast(kb->ctx, dst, src, stream);
}

st_status kernel_scale(const kernel_backend *kb, const st_tensor *x, float factor,
                       const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, __func__, KERNEL_OP_SCALE, kb, stream, "x", x));
  return kb->ops->scale(kb->ctx, x, factor, stream);
}

/* The reductions into a device scalar (sum of squares, sum, finite check): x a whole buffer in
 * a dtype the op runs on, `out` (named `out_name`) one fp32 element. */
static st_status check_reduction(const char *op, kernel_op kop, const kernel_backend *kb,
                                 const char *out_name, const st_tensor *out, const st_tensor *x,
                                 const st_stream *stream) {
  kernel_check c;
  ST_CHECK(begin_compute(&c, op, kop, kb, stream, "x", x));
  ST_CHECK(kernel_check_stats(&c, out_name, out));
  return kernel_check_numel(&c, out_name, out, 1);
}

st_status kernel_sum_squares(const kernel_backend *kb, const st_tensor *out, const st_tensor *x,
                             const st_stream *stream) {
  ST_CHECK(check_reduction(__func__, KERNEL_OP_SUM_SQUARES, kb, "out", out, x, stream));
  return kb->ops->sum_squares(kb->ctx, out, x, stream);
}

st_status kernel_sum(const kernel_backend *kb, const st_tensor *out, const st_tensor *x,
                     const st_stream *stream) {
  ST_CHECK(check_reduction(__func__, KERNEL_OP_SUM, kb, "out", out, x, stream));
  return kb->ops->sum(kb->ctx, out, x, stream);
}

st_status kernel_finite_check(const kernel_backend *kb, const st_tensor *flag, const st_tensor *x,
                              const st_stream *stream) {
  ST_CHECK(check_reduction(__func__, KERNEL_OP_FINITE_CHECK, kb, "flag", flag, x, stream));
  return kb->ops->finite_check(kb->ctx, flag, x, stream);
}

st_status kernel_step_factors(const kernel_backend *kb, const st_tensor *factors,
                              const st_tensor *sumsq, const st_tensor *flag, double max_norm,
                              double loss_scale, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, KERNEL_OP_STEP_FACTORS, kb, stream));
  ST_CHECK(kernel_check_stats(&c, "factors", factors));
  ST_CHECK(kernel_check_numel(&c, "factors", factors, KERNEL_STEP_FACTORS));
  ST_CHECK(kernel_check_stats(&c, "sumsq", sumsq));
  ST_CHECK(kernel_check_numel(&c, "sumsq", sumsq, 1));
  ST_CHECK(kernel_check_stats(&c, "flag", flag));
  ST_CHECK(kernel_check_numel(&c, "flag", flag, 1));
  if (!(loss_scale > 0) || isnan(max_norm)) {
    return st_error(ST_ERR_INVALID_ARG, "%s: loss scale %g must be positive, max norm %g a number",
                    __func__, loss_scale, max_norm);
  }
  return kb->ops->step_factors(kb->ctx, factors, sumsq, flag, max_norm, loss_scale, stream);
}

/* The segments of an AdamW range: sorted, disjoint, inside [0, n). */
static st_status check_segments(const char *op, const kernel_adamw_segment *segments, int count,
                                int64_t n) {
  if (count < 0 || (count > 0 && !segments)) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %d segments at %p", op, count, (const void *)segments);
  }
  int64_t end = 0;
  for (int i = 0; i < count; i++) {
    const kernel_adamw_segment *s = &segments[i];
    if (s->begin < end || s->count < 0 || s->begin + s->count > n) {
      return st_error(ST_ERR_INVALID_ARG,
                      "%s: segment %d [%lld, +%lld) is out of order or outside [0, %lld)", op, i,
                      (long long)s->begin, (long long)s->count, (long long)n);
    }
    end = s->begin + s->count;
  }
  return ST_OK;
}

st_status kernel_adamw(const kernel_backend *kb, const st_tensor *param, const st_tensor *master,
                       const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                       const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                       int segment_count, const st_stream *stream) {
  kernel_check c;
  ST_CHECK(kernel_check_begin(&c, __func__, KERNEL_OP_ADAMW, kb, stream));
  if (!step || step->step < 1) {
    return st_error(ST_ERR_INVALID_ARG, "%s: the step count must start at 1", __func__);
  }
  ST_CHECK(kernel_check_stats(&c, "master", master));
  const int64_t n = tensor_numel(master);
  ST_CHECK(kernel_check_stats(&c, "m", m));
  ST_CHECK(kernel_check_numel(&c, "m", m, n));
  ST_CHECK(kernel_check_stats(&c, "v", v));
  ST_CHECK(kernel_check_numel(&c, "v", v, n));
  ST_CHECK(kernel_check_compute(&c, "grad", grad));
  ST_CHECK(kernel_check_numel(&c, "grad", grad, n));
  if (param) {
    ST_CHECK(kernel_check_compute(&c, "param", param));
    ST_CHECK(kernel_check_numel(&c, "param", param, n));
  }
  ST_CHECK(check_segments(__func__, segments, segment_count, n));
  return kb->ops->adamw(kb->ctx, param, master, m, v, grad, step, segments, segment_count, stream);
}
