/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). */
#include "engine/train_step.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "optim/clip.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* Sum of squares of this rank's shard of one unit's gradients, parameter by parameter: a
 * parameter replicated across tensor parallelism is counted on tp rank 0 only. */
static st_status shard_sumsq(gpt_model *m, const unit *un, double *out) {
  const int64_t begin = (int64_t)un->shard_rank * un->layout.shard_numel;
  const int64_t end = begin + un->layout.shard_numel;
  for (int k = 0; k < un->layout.count; k++) {
    const unit_param *p = &un->layout.params[k];
    if (p->split == TP_REPLICATED && m->tp_rank != 0) continue;
    int64_t lo = p->offset > begin ? p->offset : begin;
    int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    const int64_t n = hi - lo;
    st_tensor range;
    ST_CHECK(tensor_make(&range, un->grad_shard + (lo - begin), ST_FP32, m->dev->backend->kind, 1,
                         &n));
    double part = 0;
    ST_CHECK(kernel_sum_squares(m->kb, &part, &range, &m->stream));
    *out += part;
  }
  return ST_OK;
}

/* The global gradient norm's square: each rank sums its shard of every unit, then the sums are
 * added over the shard group and the tp group. Every stage sums exactly this way (stage 0 too,
 * though it holds the full gradients), so equal meshes give bit-identical norms at every stage.
 * The replicate group holds copies of the same shards and takes no part. fp32 is enough for
 * the collective: the norm only scales the step (relative error ~1e-7). */
static st_status global_grad_sumsq(gpt_model *m, double *out) {
  double local = 0;
  for (int u = 0; u < m->n_units; u++) ST_CHECK(shard_sumsq(m, &m->units[u], &local));
  float total = (float)local;
  comm *groups[2] = {m->units[0].groups.shard, m->tp};
  for (int g = 0; g < 2; g++) {
    if (groups[g] && comm_size(groups[g]) > 1) {
      ST_CHECK(comm_all_reduce(groups[g], &total, &total, 1, ST_FP32, COMM_SUM, NULL));
    }
  }
  *out = m->units[0].groups.shard || m->tp ? (double)total : local;
  return ST_OK;
}

/* AdamW over the part of each parameter inside the owned range. */
static st_status update_unit(unit *un, const train_hparams *h, int step, float lr,
                             float grad_scale) {
  const int64_t begin = un->owned_begin, end = begin + un->owned_numel;
  for (int k = 0; k < un->layout.count; k++) {
    const unit_param *p = &un->layout.params[k];
    int64_t lo = p->offset > begin ? p->offset : begin;
    int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    float decay = p->ndim >= 2 ? h->weight_decay : 0.0f;
    int64_t at = lo - begin;
    ST_CHECK(adamw_update(&h->adam, step + 1, lr, decay, grad_scale, un->master + at,
                          unit_owned_grads(un) + at, un->adam_m + at, un->adam_v + at,
                          (size_t)(hi - lo)));
  }
  return unit_publish(un);
}

/* Mean of the ranks' losses over the data-parallel group (each rank's is over its own slice). */
static st_status mean_over_dp(const gpt_model *m, double *loss) {
  if (!m->dp || comm_size(m->dp) == 1) return ST_OK;
  float total = (float)*loss;
  ST_CHECK(comm_all_reduce(m->dp, &total, &total, 1, ST_FP32, COMM_SUM, NULL));
  *loss = (double)total / comm_size(m->dp);
  return ST_OK;
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
    ST_CHECK(gpt_backward(m, dloss_scale, i == h->grad_accum - 1));
    loss_sum += loss;
  }
  ST_CHECK(unit_reduce_wait(&m->units[0])); /* the backward finished all the others */
  double sumsq = 0;
  ST_CHECK(global_grad_sumsq(m, &sumsq));
  out->loss = loss_sum / h->grad_accum;
  ST_CHECK(mean_over_dp(m, &out->loss));
  out->grad_norm = sqrt(sumsq);
  if (!isfinite(out->loss) || !isfinite(out->grad_norm)) {
    /* Every rank sees the same reduced values, so every rank stops here together. */
    return st_error(ST_ERR_INTERNAL, "step %d: loss %g, gradient norm %g: training diverged",
                    step, out->loss, out->grad_norm);
  }
  out->lr = lr_at(&h->schedule, step);
  const float scale = clip_scale(out->grad_norm, h->clip);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(update_unit(&m->units[u], h, step, (float)out->lr, scale));
  }
  return stream_sync(&m->stream);
}
