/* deferred_ops.c - the CPU kernels as queued host functions (deferred_ops.h). */
#include "tests/kernels/deferred_ops.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tests/core/lazy_device.h"

typedef enum op_id {
  MATMUL_FORWARD,
  MATMUL_BACKWARD,
  LAYERNORM_FORWARD,
  LAYERNORM_BACKWARD,
  GELU_FORWARD,
  GELU_BACKWARD,
  ATTENTION_FORWARD,
  ATTENTION_BACKWARD,
  ATTENTION_CACHED_FORWARD,
  RESIDUAL_FORWARD,
  EMBEDDING_FORWARD,
  EMBEDDING_BACKWARD,
  CLASSIFIER,
  CAST,
  SCALE,
  SUM_SQUARES,
  SUM,
  FINITE_CHECK,
  STEP_FACTORS,
  ADAMW
} op_id;

enum { MAX_TENSORS = 9 };

/* One queued op: its tensors by value (NULL ones marked absent) and its other arguments. */
typedef struct call {
  op_id op;
  st_tensor tensors[MAX_TENSORS];
  unsigned present; /* bit k: tensors[k] was given */
  st_stream stream;
  kernel_weight_layout layout;
  int64_t n[2]; /* n_head and past, or vocab */
  double x[2];  /* max_norm and loss_scale, or the classifier's and scale's factor */
  const int32_t *ids;
  kernel_adamw_step step;
  kernel_adamw_segment *segments;
  int segment_count;
} call;

static st_status first_failure = ST_OK;

st_status deferred_ops_status(void) {
  const st_status status = first_failure;
  first_failure = ST_OK;
  return status;
}

/* The k-th tensor of the call, or NULL where none was given. */
static const st_tensor *arg(const call *c, int k) {
  return c->present >> k & 1 ? &c->tensors[k] : NULL;
}

static st_status run(const call *c) {
  const kernel_ops *cpu = &kernel_ops_cpu;
  const st_stream *s = &c->stream;
  switch (c->op) {
    case MATMUL_FORWARD:
      return cpu->matmul_forward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), c->layout,
                                 arg(c, 4), s);
    case MATMUL_BACKWARD:
      return cpu->matmul_backward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), arg(c, 4),
                                  arg(c, 5), arg(c, 6), c->layout, s);
    case LAYERNORM_FORWARD:
      return cpu->layernorm_forward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), arg(c, 4),
                                    arg(c, 5), arg(c, 6), arg(c, 7), s);
    case LAYERNORM_BACKWARD:
      return cpu->layernorm_backward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), arg(c, 4),
                                     arg(c, 5), arg(c, 6), arg(c, 7), s);
    case GELU_FORWARD: return cpu->gelu_forward(NULL, arg(c, 0), arg(c, 1), s);
    case GELU_BACKWARD: return cpu->gelu_backward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), s);
    case ATTENTION_FORWARD:
      return cpu->attention_forward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), c->n[0], s);
    case ATTENTION_BACKWARD:
      return cpu->attention_backward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), arg(c, 4),
                                     c->n[0], s);
    case ATTENTION_CACHED_FORWARD:
      return cpu->attention_cached_forward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3),
                                           c->n[1], c->n[0], s);
    case RESIDUAL_FORWARD: return cpu->residual_forward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), s);
    case EMBEDDING_FORWARD:
      return cpu->embedding_forward(NULL, arg(c, 0), c->ids, arg(c, 1), arg(c, 2), s);
    case EMBEDDING_BACKWARD:
      return cpu->embedding_backward(NULL, arg(c, 0), arg(c, 1), arg(c, 2), c->ids, s);
    case CLASSIFIER:
      return cpu->classifier(NULL, arg(c, 0), arg(c, 1), arg(c, 2), c->ids, c->n[0], (float)c->x[0],
                             s);
    case CAST: return cpu->cast(NULL, arg(c, 0), arg(c, 1), s);
    case SCALE: return cpu->scale(NULL, arg(c, 0), (float)c->x[0], s);
    case SUM_SQUARES: return cpu->sum_squares(NULL, arg(c, 0), arg(c, 1), s);
    case SUM: return cpu->sum(NULL, arg(c, 0), arg(c, 1), s);
    case FINITE_CHECK: return cpu->finite_check(NULL, arg(c, 0), arg(c, 1), s);
    case STEP_FACTORS:
      return cpu->step_factors(NULL, arg(c, 0), arg(c, 1), arg(c, 2), c->x[0], c->x[1], s);
    case ADAMW:
      return cpu->adamw(NULL, arg(c, 0), arg(c, 1), arg(c, 2), arg(c, 3), arg(c, 4), &c->step,
                        c->segments, c->segment_count, s);
  }
  return st_error(ST_ERR_INTERNAL, "deferred op %d unknown", (int)c->op);
}

static void run_and_free(void *p) {
  call *c = p;
  const st_status status = run(c);
  if (first_failure == ST_OK) first_failure = status;
  free(c->segments);
  free(c);
}

/* A call of `op` holding `count` tensors (NULL ones absent), on `stream`; NULL when out of
 * memory. */
static call *make(op_id op, const st_tensor *const *tensors, int count, const st_stream *stream) {
  call *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->op = op;
  c->stream = *stream;
  for (int k = 0; k < count; k++) {
    if (tensors[k]) c->tensors[k] = *tensors[k], c->present |= 1u << k;
  }
  return c;
}

static st_status queue(call *c) {
  if (!c) return st_error(ST_ERR_OOM, "deferred op: out of memory");
  const st_status status = lazy_stream_host_fn(&c->stream, run_and_free, c);
  if (status != ST_OK) run_and_free(c); /* not queued: nothing else will free it */
  return status;
}

#define TENSORS(...) \
  (const st_tensor *const[]) { __VA_ARGS__ }
#define COUNT(...) (int)(sizeof TENSORS(__VA_ARGS__) / sizeof(const st_tensor *))
#define MAKE(op, stream, ...) make(op, TENSORS(__VA_ARGS__), COUNT(__VA_ARGS__), stream)

static st_status d_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                                  const st_tensor *inp, const st_tensor *weight,
                                  kernel_weight_layout layout, const st_tensor *bias,
                                  const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(MATMUL_FORWARD, stream, out, pre_gelu, inp, weight, bias);
  if (c) c->layout = layout;
  return queue(c);
}

static st_status d_matmul_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                   const st_tensor *dbias, const st_tensor *dout,
                                   const st_tensor *pre_gelu, const st_tensor *inp,
                                   const st_tensor *weight, kernel_weight_layout layout,
                                   const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(MATMUL_BACKWARD, stream, dinp, dweight, dbias, dout, pre_gelu, inp, weight);
  if (c) c->layout = layout;
  return queue(c);
}

static st_status d_layernorm_forward(void *ctx, const st_tensor *residual, const st_tensor *out,
                                     const st_tensor *mean, const st_tensor *rstd,
                                     const st_tensor *a, const st_tensor *b,
                                     const st_tensor *weight, const st_tensor *bias,
                                     const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(LAYERNORM_FORWARD, stream, residual, out, mean, rstd, a, b, weight, bias));
}

static st_status d_layernorm_backward(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                      const st_tensor *dbias, const st_tensor *dout,
                                      const st_tensor *inp, const st_tensor *weight,
                                      const st_tensor *mean, const st_tensor *rstd,
                                      const st_stream *stream) {
  (void)ctx;
  return queue(
      MAKE(LAYERNORM_BACKWARD, stream, dinp, dweight, dbias, dout, inp, weight, mean, rstd));
}

static st_status d_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                                const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(GELU_FORWARD, stream, out, inp));
}

static st_status d_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                                 const st_tensor *inp, const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(GELU_BACKWARD, stream, dinp, dout, inp));
}

static st_status d_attention_forward(void *ctx, const st_tensor *out, const st_tensor *state,
                                     const st_tensor *qkv, int64_t n_head,
                                     const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(ATTENTION_FORWARD, stream, out, state, qkv);
  if (c) c->n[0] = n_head;
  return queue(c);
}

static st_status d_attention_backward(void *ctx, const st_tensor *dqkv, const st_tensor *dout,
                                      const st_tensor *qkv, const st_tensor *out,
                                      const st_tensor *state, int64_t n_head,
                                      const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(ATTENTION_BACKWARD, stream, dqkv, dout, qkv, out, state);
  if (c) c->n[0] = n_head;
  return queue(c);
}

static st_status d_attention_cached_forward(void *ctx, const st_tensor *out,
                                            const st_tensor *k_cache, const st_tensor *v_cache,
                                            const st_tensor *qkv, int64_t past, int64_t n_head,
                                            const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(ATTENTION_CACHED_FORWARD, stream, out, k_cache, v_cache, qkv);
  if (c) c->n[0] = n_head, c->n[1] = past;
  return queue(c);
}

static st_status d_residual_forward(void *ctx, const st_tensor *out, const st_tensor *a,
                                    const st_tensor *b, const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(RESIDUAL_FORWARD, stream, out, a, b));
}

static st_status d_embedding_forward(void *ctx, const st_tensor *out, const int32_t *tokens,
                                     const st_tensor *wte, const st_tensor *wpe,
                                     const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(EMBEDDING_FORWARD, stream, out, wte, wpe);
  if (c) c->ids = tokens;
  return queue(c);
}

static st_status d_embedding_backward(void *ctx, const st_tensor *dwte, const st_tensor *dwpe,
                                      const st_tensor *dout, const int32_t *tokens,
                                      const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(EMBEDDING_BACKWARD, stream, dwte, dwpe, dout);
  if (c) c->ids = tokens;
  return queue(c);
}

static st_status d_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                              const st_tensor *logits, const int32_t *targets, int64_t vocab,
                              float dloss_scale, const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(CLASSIFIER, stream, losses, dlogits, logits);
  if (c) c->ids = targets, c->n[0] = vocab, c->x[0] = dloss_scale;
  return queue(c);
}

static st_status d_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                        const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(CAST, stream, dst, src));
}

static st_status d_scale(void *ctx, const st_tensor *x, float factor, const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(SCALE, stream, x);
  if (c) c->x[0] = factor;
  return queue(c);
}

static st_status d_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                               const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(SUM_SQUARES, stream, out, x));
}

static st_status d_sum(void *ctx, const st_tensor *out, const st_tensor *x,
                       const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(SUM, stream, out, x));
}

static st_status d_finite_check(void *ctx, const st_tensor *flag, const st_tensor *x,
                                const st_stream *stream) {
  (void)ctx;
  return queue(MAKE(FINITE_CHECK, stream, flag, x));
}

static st_status d_step_factors(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                                const st_tensor *flag, double max_norm, double loss_scale,
                                const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(STEP_FACTORS, stream, factors, sumsq, flag);
  if (c) c->x[0] = max_norm, c->x[1] = loss_scale;
  return queue(c);
}

static st_status d_adamw(void *ctx, const st_tensor *param, const st_tensor *master,
                         const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                         const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                         int segment_count, const st_stream *stream) {
  (void)ctx;
  call *c = MAKE(ADAMW, stream, param, master, m, v, grad);
  if (!c) return queue(c);
  c->step = *step;
  c->segment_count = segment_count;
  const size_t bytes = (size_t)(segment_count > 0 ? segment_count : 1) * sizeof *segments;
  c->segments = malloc(bytes);
  if (!c->segments) {
    free(c);
    return queue(NULL);
  }
  if (segment_count > 0) memcpy(c->segments, segments, bytes);
  return queue(c);
}

const kernel_ops *deferred_ops(void) {
  static kernel_ops table;
  table = kernel_ops_cpu;
  table.name = "cpu, deferred";
  table.matmul_forward = d_matmul_forward;
  table.matmul_backward = d_matmul_backward;
  table.layernorm_forward = d_layernorm_forward;
  table.layernorm_backward = d_layernorm_backward;
  table.gelu_forward = d_gelu_forward;
  table.gelu_backward = d_gelu_backward;
  table.attention_forward = d_attention_forward;
  table.attention_backward = d_attention_backward;
  table.attention_cached_forward = d_attention_cached_forward;
  table.residual_forward = d_residual_forward;
  table.embedding_forward = d_embedding_forward;
  table.embedding_backward = d_embedding_backward;
  table.classifier = d_classifier;
  table.cast = d_cast;
  table.scale = d_scale;
  table.sum_squares = d_sum_squares;
  table.sum = d_sum;
  table.finite_check = d_finite_check;
  table.step_factors = d_step_factors;
  table.adamw = d_adamw;
  return &table;
}
