/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). With loss scaling (fp16)
 * the loss gradient is multiplied by the scale, every rank's owned gradients are checked for
 * inf/NaN, and a step that overflowed anywhere is skipped everywhere; the scale is divided out
 * of the norm and of AdamW's gradient factor, never out of the gradients themselves. */
#include "engine/train/train_step.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/train/overflow_inject.h"
#include "optim/clip.h"
#include "optim/unit_optim.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* The step's scalars, in one device buffer: [0] the squared gradient norm, [1] (with loss
 * scaling only) the overflow flag. */
enum { SCALAR_SUMSQ = 0, SCALAR_OVERFLOW = 1, SCALAR_COUNT = 2 };

/* Raises *flag (a device scalar) when any owned gradient of any unit is inf or NaN: every
 * gradient AdamW would read, replicated tp parameters included. */
static st_status check_units(gpt_model *m, float *flag) {
  st_tensor scalar;
  ST_CHECK(tensor_make(&scalar, flag, ST_FP32, m->dev->backend->kind, 1, (int64_t[]){1}));
  for (int i = 0; i < m->n_units; i++) {
    const unit *u = &m->units[i];
    if (u->owned_numel == 0) continue;
    st_tensor grads;
    ST_CHECK(tensor_make(&grads, unit_owned_grads(u), u->precision.reduce, m->dev->backend->kind, 1,
                         &u->owned_numel));
    ST_CHECK(kernel_finite_check(m->kb, &scalar, &grads, &m->stream));
  }
  return ST_OK;
}

/* The scalars summed into device memory and reduced from there. The norm's square: each rank
 * sums its shard of every unit, then the sums are added over the shard group and the tp group.
 * Every stage sums exactly this way (stage 0 too, though it holds the full gradients), so equal
 * meshes give bit-identical norms at every stage. The replicate group holds copies of the same
 * shards and takes no part in the norm. fp32 is enough for the collective: the norm only scales
 * the step (relative error ~1e-7). The overflow flag travels with the norm (its sum over the
 * shard and tp groups is non-zero when any rank raised it) and then takes the maximum over the
 * replicate group, so every rank that holds gradients reaches the same verdict. */
static st_status sum_and_reduce(gpt_model *m, float *scalars, int count) {
  st_tensor sumsq;
  ST_CHECK(tensor_make(&sumsq, scalars, ST_FP32, m->dev->backend->kind, 1, (int64_t[]){1}));
  ST_CHECK(stream_memset(&m->stream, scalars, 0, (size_t)count * sizeof *scalars));
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(unit_optim_grad_sumsq(&m->units[u], m->kb, &m->stream, &sumsq));
  }
  if (count > SCALAR_OVERFLOW) ST_CHECK(check_units(m, scalars + SCALAR_OVERFLOW));
  comm *groups[2] = {m->units[0].groups.shard, m->tp};
  for (int g = 0; g < 2; g++) {
    if (groups[g] && comm_size(groups[g]) > 1) {
      /* Ordered on C, after the sums and the check that produce them. */
      ST_CHECK(comm_all_reduce_on(groups[g], &m->stream, scalars, scalars, (size_t)count, ST_FP32,
                                  COMM_SUM, NULL));
    }
  }
  comm *replicate = m->units[0].groups.replicate;
  if (count > SCALAR_OVERFLOW && replicate && comm_size(replicate) > 1) {
    float *flag = scalars + SCALAR_OVERFLOW;
    ST_CHECK(comm_all_reduce_on(replicate, &m->stream, flag, flag, 1, ST_FP32, COMM_MAX, NULL));
  }
  return ST_OK;
}

/* The step's `count` scalars, reduced in device memory; the host reads them once. */
static st_status step_scalars(gpt_model *m, int count, float host[SCALAR_COUNT]) {
  float *scalars = NULL;
  const size_t bytes = (size_t)count * sizeof *scalars;
  ST_CHECK(mem_alloc((void **)&scalars, bytes, MEM_DEVICE, MEM_WORKSPACE, m->dev));
  st_status status = sum_and_reduce(m, scalars, count);
  if (status == ST_OK) status = stream_memcpy(&m->stream, host, scalars, bytes);
  if (status == ST_OK) status = stream_sync(&m->stream);
  mem_free(scalars);
  return status;
}

/* Mean of the ranks' losses over the data-parallel group (each rank's is over its own slice). */
static st_status mean_over_dp(const gpt_model *m, double *loss) {
  if (!m->dp || comm_size(m->dp) == 1) return ST_OK;
  float total = (float)*loss;
  ST_CHECK(comm_all_reduce(m->dp, &total, &total, 1, ST_FP32, COMM_SUM, NULL));
  *loss = (double)total / comm_size(m->dp);
  return ST_OK;
}

st_status train_step(gpt_model *m, const train_hparams *h, loss_scaler *scaler, int step,
                     const int32_t *const *inputs, const int32_t *const *targets, step_stats *out) {
  ST_CHECK(gpt_zero_grads(m));
  const double scale = scaler->state.scale;
  const float dloss_scale = (float)(scale / (double)h->global_tokens);
  double loss_sum = 0;
  for (int i = 0; i < h->grad_accum; i++) {
    float loss = 0;
    ST_CHECK(gpt_forward(m, inputs[i], targets[i], &loss));
    ST_CHECK(gpt_backward(m, dloss_scale, i == h->grad_accum - 1));
    loss_sum += loss;
  }
  ST_CHECK(unit_reduce_wait(&m->units[0])); /* the backward finished all the others */
  ST_CHECK(overflow_inject(m, step));
  const int scaling = scaler->mode != LOSS_SCALER_NONE;
  float scalars[SCALAR_COUNT] = {0};
  ST_CHECK(step_scalars(m, scaling ? SCALAR_COUNT : 1, scalars));
  /* A sum of squares past fp32's range is an overflow too, however finite each gradient. */
  const int overflow =
      scaling && (scalars[SCALAR_OVERFLOW] != 0.0f || !isfinite(scalars[SCALAR_SUMSQ]));
  out->loss = loss_sum / h->grad_accum;
  ST_CHECK(mean_over_dp(m, &out->loss));
  out->grad_norm = sqrt((double)scalars[SCALAR_SUMSQ]) / scale;
  out->loss_scale = scale;
  /* Every rank sees the same reduced values, so every rank stops here together. */
  if (!isfinite(out->loss) || (!overflow && !isfinite(out->grad_norm))) {
    return st_error(ST_ERR_INTERNAL, "step %d: loss %g, gradient norm %g: training diverged", step,
                    out->loss, out->grad_norm);
  }
  if (overflow && loss_scaler_at_floor(scaler)) {
    return st_error(ST_ERR_INTERNAL,
                    "step %d: the gradients overflow at loss scale %g: training diverged", step,
                    scale);
  }
  out->skipped = !loss_scaler_update(scaler, overflow);
  out->lr = lr_at(&h->schedule, step);
  if (out->skipped) {
    /* Nothing changed: the published parameters stand. The norm of gradients that overflowed
     * somewhere means nothing (a rank may even have summed finite ones). */
    out->grad_norm = NAN;
    return gpt_step_end(m);
  }
  /* Skipped steps are not optimizer steps: AdamW's bias correction counts the applied ones. */
  const int adam_step = step + 1 - (int)scaler->state.skipped;
  const float grad_scale = (float)(clip_scale(out->grad_norm, h->clip) / scale);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(unit_optim_adamw(&m->units[u], &h->adam, h->weight_decay, adam_step, (float)out->lr,
                              grad_scale));
  }
  return gpt_step_end(m);
}
