/* adamw.c - the AdamW update loop. Bias corrections are computed once per call in double and
 * applied in fp32, as PyTorch's single-tensor implementation does. There is one loop per pair
 * of gradient and parameter dtypes: a straight loop that OpenMP splits over threads and the
 * compiler vectorises (a dtype switch per element would keep it scalar). Every loop does the
 * same fp32 operations in the same order per element, so the results do not depend on the
 * dtype dispatch, the thread count or the vector width. */
#include "optim/adamw.h"

#include <math.h>

#include "core/error.h"

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

/* The loop over a range, with GRAD(i) the fp32 gradient of element i and STORE(i, x) writing
 * the parameter. */
#define ADAMW_LOOP(GRAD, STORE)                                                        \
  do {                                                                                 \
    _Pragma("omp parallel for simd schedule(static)") for (size_t i = 0; i < n; i++) { \
      const float x = adamw_element(c, GRAD(i), &m[i], &v[i], master[i]);              \
      master[i] = x;                                                                   \
      STORE(i, x);                                                                     \
    }                                                                                  \
  } while (0)

#define GRAD_F32(i) grad_f32[i]
#define GRAD_BF16(i) f32_from_bf16(grad_bf16[i])
#define GRAD_ANY(i) dtype_load_f32(r->grad, r->grad_dtype, i)
#define STORE_NONE(i, x) (void)0
#define STORE_F32(i, x) param_f32[i] = (x)
#define STORE_BF16(i, x) param_bf16[i] = bf16_from_f32(x)
#define STORE_ANY(i, x) dtype_store_f32(r->param, r->param_dtype, i, x)

static void update_range(const adamw_coeffs *c, const adamw_range *r) {
  const size_t n = r->n;
  float *master = r->master, *m = r->m, *v = r->v;
  const float *grad_f32 = r->grad;
  const uint16_t *grad_bf16 = r->grad;
  float *param_f32 = r->param;
  uint16_t *param_bf16 = r->param;
  const st_dtype p = r->param ? r->param_dtype : ST_DTYPE_COUNT; /* COUNT: no parameters */
  if (r->grad_dtype == ST_FP32 && p == ST_DTYPE_COUNT) {
    ADAMW_LOOP(GRAD_F32, STORE_NONE);
  } else if (r->grad_dtype == ST_FP32 && p == ST_FP32) {
    ADAMW_LOOP(GRAD_F32, STORE_F32);
  } else if (r->grad_dtype == ST_FP32 && p == ST_BF16) {
    ADAMW_LOOP(GRAD_F32, STORE_BF16);
  } else if (r->grad_dtype == ST_BF16 && p == ST_DTYPE_COUNT) {
    ADAMW_LOOP(GRAD_BF16, STORE_NONE);
  } else if (r->grad_dtype == ST_BF16 && p == ST_FP32) {
    ADAMW_LOOP(GRAD_BF16, STORE_F32);
  } else if (r->grad_dtype == ST_BF16 && p == ST_BF16) {
    ADAMW_LOOP(GRAD_BF16, STORE_BF16);
  } else if (p == ST_DTYPE_COUNT) {
    ADAMW_LOOP(GRAD_ANY, STORE_NONE);
  } else {
    ADAMW_LOOP(GRAD_ANY, STORE_ANY); /* fp16 somewhere: no trainer uses it yet */
  }
}

st_status adamw_update(const adamw_hparams *h, int step, float lr, float weight_decay,
                       float grad_scale, const adamw_range *r) {
  if (step < 1) return st_error(ST_ERR_INVALID_ARG, "AdamW step %d: steps count from 1", step);
  const float b1 = h->beta1, b2 = h->beta2;
  const float correction1 = (float)(1.0 - pow((double)b1, step));
  const adamw_coeffs c = {.b1 = b1,
                          .b2 = b2,
                          .one_minus_b1 = 1.0f - b1,
                          .one_minus_b2 = 1.0f - b2,
                          .eps = h->eps,
                          .correction2_sqrt = (float)sqrt(1.0 - pow((double)b2, step)),
                          .step_size = lr / correction1,
                          .decay = 1.0f - lr * weight_decay,
                          .grad_scale = grad_scale};
  update_range(&c, r);
  return ST_OK;
}
