/* adamw.h - AdamW on a contiguous range of fp32 master weights.
 *
 * The update is applied per range so that it runs unchanged on a rank's owned shard: the
 * caller walks the intersection of its shard with each parameter and passes that parameter's
 * weight decay (non-zero only for tensors of rank >= 2). The arithmetic follows PyTorch's
 * torch.optim.AdamW (decoupled decay applied first, bias-corrected moments):
 *   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * with g = grad * grad_scale (the clipping coefficient). */
#ifndef ST_OPTIM_ADAMW_H
#define ST_OPTIM_ADAMW_H

#include <stddef.h>

#include "shardtrain.h"

typedef struct adamw_hparams {
  float beta1;
  float beta2;
  float eps;
} adamw_hparams;

#define ADAMW_HPARAMS_DEFAULT \
  { 0.9f, 0.95f, 1e-8f }

/* One AdamW step on n elements. `step` counts from 1. param, m and v are updated in place. */
st_status adamw_update(const adamw_hparams *h, int step, float lr, float weight_decay,
                       float grad_scale, float *param, const float *grad, float *m, float *v,
                       size_t n);

#endif /* ST_OPTIM_ADAMW_H */
