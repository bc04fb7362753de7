/* train_step.c - gradients, norm, clipping and AdamW for one step. */
#include "engine/train_step.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "optim/clip.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) {
    unit *un = &m->units[u];
    size_t bytes = (size_t)un->layout.shard_numel * sizeof(float);
    ST_CHECK(stream_memcpy(&m->stream, un->master, un->params + unit_shard_begin(un), bytes));
    ST_CHECK(stream_memset(&m->stream, un->adam_m, 0, bytes));
    ST_CHECK(stream_memset(&m->stream, un->adam_v, 0, bytes));
  }
  return stream_sync(&m->stream);
}

/* Sum of squares of the gradients this rank owns (padding is zero and adds nothing). */
static st_status owned_grad_sumsq(gpt_model *m, double *out) {
  *out = 0;
  for (int u = 0; u < m->n_units; u++) {
    unit *un = &m->units[u];
    st_tensor shard = {0};
    const int64_t n = un->layout.shard_numel;
    ST_CHECK(tensor_make(&shard, un->grads + unit_shard_begin(un), ST_FP32,
                         m->dev->backend->kind, 1, &n));
    double part = 0;
    ST_CHECK(kernel_sum_squares(m->kb, &part, &shard, &m->stream));
    *out += part;
  }
  return ST_OK;
}

/* AdamW over the part of each parameter that lies in the owned shard, then the updated master
 * copied back into the parameters. */
static st_status update_unit(gpt_model *m, unit *un, const train_hparams *h, int step, float lr,
                             float grad_scale) {
  const int64_t begin = unit_shard_begin(un), end = begin + un->layout.shard_numel;
  for (int k = 0; k < un->layout.count; k++) {
    const unit_param *p = &un->layout.params[k];
    int64_t lo = p->offset > begin ? p->offset : begin;
    int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    float decay = p->ndim >= 2 ? h->weight_decay : 0.0f;
    int64_t at = lo - begin;
    ST_CHECK(adamw_update(&h->adam, step + 1, lr, decay, grad_scale, un->master + at,
                          un->grads + lo, un->adam_m + at, un->adam_v + at, (size_t)(hi - lo)));
  }
  return stream_memcpy(&m->stream, un->params + begin, un->master,
                       (size_t)un->layout.shard_numel * sizeof(float));
}

st_status train_step(gpt_model *m, const train_hparams *h, int step,
                     const int32_t *const *inputs, const int32_t *const *targets,
                     step_stats *out) {
  ST_CHECK(gpt_zero_grads(m));
  const float dloss_scale = (float)(1.0 / (double)h->global_tokens);
  double loss_sum = 0;
  for (int i = 0; i < h->grad_accum; i++) {
    float loss = 0;
    ST_CHECK(gpt_forward(m, inputs[i], targets[i], &loss));
    ST_CHECK(gpt_backward(m, dloss_scale));
    loss_sum += loss;
  }
  double sumsq = 0;
  ST_CHECK(owned_grad_sumsq(m, &sumsq));
  out->loss = loss_sum / h->grad_accum;
  out->grad_norm = sqrt(sumsq);
  out->lr = lr_at(&h->schedule, step);
  const float scale = clip_scale(out->grad_norm, h->clip);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(update_unit(m, &m->units[u], h, step, (float)out->lr, scale));
  }
  return stream_sync(&m->stream);
}
