/* adamw.c - AdamW over a flat range on the CPU (kernels.h's kernel_adamw): fp32 master, m and v
 * updated in place segment by segment, the parameters written in their dtype as it goes.
 *
 * The gradient factor is the step's (or, when given, the device scalar kernel_step_factors wrote,
 * whose skip flag makes the call a no-op). The bias corrections are computed once per call in
 * double and applied in fp32, as PyTorch's single-tensor implementation does; the decay factor once
 * per segment. There is one loop per pair of gradient and parameter dtypes (fp32, bf16 or fp16
 * each, or no parameters): a straight loop that OpenMP splits over threads and the compiler
 * vectorises (a dtype switch per element would keep it scalar). Every loop does the same fp32
 * operations in the same order per element, so the results do not depend on the dtypes' dispatch,
 * the thread count or the vector width. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"

typedef struct adamw_coeffs {
  float b1, b2, one_minus_b1, one_minus_b2, eps;
  float correction2_sqrt, step_size, decay, grad_scale;
} adamw_coeffs;

/* One element: updates m and v, returns the new master weight. */
static inline float adamw_element(const adamw_coeffs *c, float grad, float *m, float *v,
                                  float master) {
  const float g = grad * c->grad_scale;
  const float mi = c->b1 * *m + c->one_minus_b1 * g;
  const float vi = c->b2 * *v + c->one_minus_b2 * g * g;
  *m = mi;
  *v = vi;
  const float denom = sqrtf(vi) / c->correction2_sqrt + c->eps;
  return master * c->decay - c->step_size * mi / denom;
}

/* One segment's pointers, each already advanced to the segment's first element. */
typedef struct adamw_run {
  float *master, *m, *v;
  const void *grad;
  void *param; /* NULL: no parameters to write */
  int64_t n;
} adamw_run;

/* The loop over a run, with GRAD(i) the fp32 gradient of element i and STORE(i, x) writing the
 * parameter. */
#define ADAMW_LOOP(GRAD, STORE)                                                         \
  do {                                                                                  \
    _Pragma("omp parallel for simd schedule(static)") for (int64_t i = 0; i < n; i++) { \
      const float x = adamw_element(c, GRAD(i), &m[i], &v[i], master[i]);               \
      master[i] = x;                                                                    \
      STORE(i, x);                                                                      \
    }                                                                                   \
  } while (0)

#define GRAD_F32(i) ((const float *)r->grad)[i]
#define GRAD_BF16(i) f32_from_bf16(((const uint16_t *)r->grad)[i])
#define GRAD_F16(i) f32_from_fp16(((const uint16_t *)r->grad)[i])
#define STORE_NONE(i, x) (void)0
#define STORE_F32(i, x) ((float *)r->param)[i] = (x)
#define STORE_BF16(i, x) ((uint16_t *)r->param)[i] = bf16_from_f32(x)
#define STORE_F16(i, x) ((uint16_t *)r->param)[i] = fp16_from_f32(x)

/* The loop for gradients read by GRAD, for each parameter dtype (or none). */
#define ADAMW_FOR_PARAMS(GRAD)      \
  do {                              \
    if (p == ST_FP32) {             \
      ADAMW_LOOP(GRAD, STORE_F32);  \
    } else if (p == ST_BF16) {      \
      ADAMW_LOOP(GRAD, STORE_BF16); \
    } else if (p == ST_FP16) {      \
      ADAMW_LOOP(GRAD, STORE_F16);  \
    } else {                        \
      ADAMW_LOOP(GRAD, STORE_NONE); \
    }                               \
  } while (0)

static void update_run(const adamw_coeffs *c, const adamw_run *r, st_dtype grad, st_dtype param) {
  const int64_t n = r->n;
  float *master = r->master, *m = r->m, *v = r->v;
  const st_dtype p = r->param ? param : ST_DTYPE_COUNT; /* COUNT: no parameters */
  switch (grad) {
    case ST_FP32: ADAMW_FOR_PARAMS(GRAD_F32); break;
    case ST_BF16: ADAMW_FOR_PARAMS(GRAD_BF16); break;
    case ST_FP16: ADAMW_FOR_PARAMS(GRAD_F16); break;
  }
}

st_status kernel_cpu_adamw(void *ctx, const st_tensor *param, const st_tensor *master,
                           const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                           const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                           int segment_count, const st_stream *stream) {
  (void)ctx;
  (void)stream;
  float grad_scale = step->grad_scale;
  if (step->factors) {
    if (step->factors[KERNEL_STEP_SKIP] != 0.0f) return ST_OK; /* a skipped step */
    grad_scale = step->factors[KERNEL_STEP_GRAD_SCALE];
  }
  const float b1 = step->beta1, b2 = step->beta2;
  const float correction1 = (float)(1.0 - pow((double)b1, step->step));
  adamw_coeffs c = {.b1 = b1,
                    .b2 = b2,
                    .one_minus_b1 = 1.0f - b1,
                    .one_minus_b2 = 1.0f - b2,
                    .eps = step->eps,
                    .correction2_sqrt = (float)sqrt(1.0 - pow((double)b2, step->step)),
                    .step_size = step->lr / correction1,
                    .grad_scale = grad_scale};
  const size_t gsize = dtype_size(grad->dtype), psize = param ? dtype_size(param->dtype) : 0;
  for (int s = 0; s < segment_count; s++) {
    const int64_t at = segments[s].begin;
    c.decay = 1.0f - step->lr * segments[s].weight_decay;
    const adamw_run run = {
        .master = (float *)master->data + at,
        .m = (float *)m->data + at,
        .v = (float *)v->data + at,
        .grad = (const char *)grad->data + (size_t)at * gsize,
        .param = param ? (char *)param->data + (size_t)at * psize : NULL,
        .n = segments[s].count,
    };
    update_run(&c, &run, grad->dtype, param ? param->dtype : ST_DTYPE_COUNT);
  }
  return ST_OK;
}
