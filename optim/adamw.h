/* adamw.h - AdamW on a contiguous range of fp32 master weights.
 *
 * The update is applied per range so that it runs unchanged on a rank's owned shard: the
 * caller walks the intersection of its shard with each parameter and passes that parameter's
 * weight decay (non-zero only for tensors of rank >= 2). The arithmetic follows PyTorch's
 * torch.optim.AdamW (decoupled decay applied first, bias-corrected moments):
 *   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * with g = grad * grad_scale (the clipping coefficient), computed in fp32 whatever the
 * gradients' dtype. */
#ifndef ST_OPTIM_ADAMW_H
#define ST_OPTIM_ADAMW_H

#include <stddef.h>

#include "core/dtype.h"
#include "shardtrain.h"

typedef struct adamw_hparams {
  float beta1;
  float beta2;
  float eps;
} adamw_hparams;

#define ADAMW_HPARAMS_DEFAULT \
  { 0.9f, 0.95f, 1e-8f }

/* One contiguous range: fp32 master weights and moments, updated in place; the gradients in
 * their (reduce) dtype; and, when `param` is not NULL, the low-precision parameters the model
 * computes with, overwritten with the updated master rounded to param_dtype. */
typedef struct adamw_range {
  float *master, *m, *v;
  const void *grad;
  st_dtype grad_dtype;
  void *param;
  st_dtype param_dtype;
  size_t n;
} adamw_range;

/* One AdamW step on a range. `step` counts from 1. */
st_status adamw_update(const adamw_hparams *h, int step, float lr, float weight_decay,
                       float grad_scale, const adamw_range *r);

#endif /* ST_OPTIM_ADAMW_H */
