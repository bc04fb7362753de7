/* adamw.c - the AdamW update loop. Bias corrections are computed once per call in double and
 * applied in fp32, as PyTorch's single-tensor implementation does. */
#include "optim/adamw.h"

#include <math.h>

#include "core/error.h"

st_status adamw_update(const adamw_hparams *h, int step, float lr, float weight_decay,
                       float grad_scale, const adamw_range *r) {
  if (step < 1) return st_error(ST_ERR_INVALID_ARG, "AdamW step %d: steps count from 1", step);
  const float b1 = h->beta1, b2 = h->beta2;
  const float correction1 = (float)(1.0 - pow((double)b1, step));
  const float correction2_sqrt = (float)sqrt(1.0 - pow((double)b2, step));
  const float step_size = lr / correction1;
  const float decay = 1.0f - lr * weight_decay;
  float *master = r->master, *m = r->m, *v = r->v;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < r->n; i++) {
    float g = dtype_load_f32(r->grad, r->grad_dtype, i) * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / correction2_sqrt + h->eps;
    master[i] = master[i] * decay - step_size * mi / denom;
    if (r->param) dtype_store_f32(r->param, r->param_dtype, i, master[i]);
  }
  return ST_OK;
}
