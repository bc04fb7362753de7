/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). The loss, the squared
 * gradient norm and (with loss scaling) the overflow flag are summed and reduced in device
 * scalars (gpt_scalar); the clipping factor and the decision to skip are computed from them on
 * the device (kernel_step_factors), and AdamW reads both there. So the whole step is enqueued
 * without a host wait, and the host reads the scalars once, after the step's one wait
 * (gpt_step_end), to report them and to update the loss scale for the next step. With loss
 * scaling (fp16) the loss gradient is multiplied by the scale, every rank's owned gradients are
 * checked for inf/NaN, and a step that overflowed anywhere is skipped everywhere; the scale is
 * divided out of the norm and of AdamW's gradient factor, never out of the gradients
 * themselves. */
#include "engine/train/train_step.h"

#include <math.h>

#include "core/error.h"
#include "engine/model/gpt_tp.h"
#include "engine/train/overflow_inject.h"
#include "optim/unit_optim.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* An all-reduce of fp32 scalars in stream order on C: C waits for it (exposed communication),
 * the host does not (with MPI it completes the collective itself); gpt_step_end's watchdog
 * drains it. */
static st_status scalars_all_reduce(gpt_model *m, comm *group, void *data, size_t count,
                                    comm_reduce_op op) {
  comm_work work;
  ST_CHECK(comm_all_reduce_on(group, &m->stream, data, data, count, ST_FP32, op, &work));
  return comm_exposure_order_after(&m->streams.exposure, &work);
}

/* Raises the flag (a device scalar) when any owned gradient of any unit is inf or NaN: every
 * gradient AdamW would read, replicated tp parameters included. */
static st_status check_units(gpt_model *m, const st_tensor *flag) {
  for (int i = 0; i < m->n_units; i++) {
    const unit *u = &m->units[i];
    if (u->owned_numel == 0) continue;
    st_tensor grads;
    ST_CHECK(tensor_make(&grads, unit_owned_grads(u), u->precision.reduce, m->dev->backend->kind, 1,
                         &u->owned_numel));
    ST_CHECK(kernel_finite_check(m->kb, flag, &grads, &m->stream));
  }
  return ST_OK;
}

/* The global gradient norm's square into its device scalar: each rank sums its shard of every
 * unit, then the sums are added over the shard group and the tp group. Every stage sums exactly
 * this way (stage 0 too, though it holds the full gradients), so equal meshes give
 * bit-identical norms at every stage. The replicate group holds copies of the same shards and
 * takes no part. fp32 is enough for the collective: the norm only scales the step (relative
 * error ~1e-7). With loss scaling the overflow flag, the scalar beside it, travels with the
 * norm (its sum over the shard and tp groups is non-zero when any rank raised it) and then
 * takes the maximum over the replicate group, so every rank that holds gradients reaches the
 * same verdict. */
static st_status grad_sumsq(gpt_model *m, int scaling) {
  const st_tensor sumsq = gpt_scalar(m, GPT_GRAD_SUMSQ), flag = gpt_scalar(m, GPT_OVERFLOW);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(unit_optim_grad_sumsq(&m->units[u], m->kb, &m->stream, &sumsq));
  }
  if (scaling) ST_CHECK(check_units(m, &flag));
  const size_t count = scaling ? 2 : 1;
  comm *shard = m->units[0].groups.shard;
  if (shard && comm_size(shard) > 1) {
    /* Ordered on C, after the sums of squares and the check that produce them. */
    ST_CHECK(scalars_all_reduce(m, shard, sumsq.data, count, COMM_SUM));
  }
  ST_CHECK(gpt_tp_sum_scalars(m, sumsq.data, count)); /* on the tp stream, after C's work */
  comm *replicate = m->units[0].groups.replicate;
  if (scaling && replicate && comm_size(replicate) > 1) {
    ST_CHECK(scalars_all_reduce(m, replicate, flag.data, 1, COMM_MAX));
  }
  return ST_OK;
}

/* The step's loss sum, added over the data-parallel group (each rank's is over its own slice;
 * the tp ranks of a group hold the same one). */
static st_status loss_over_dp(gpt_model *m, const st_tensor *loss_sum) {
  if (!m->dp || comm_size(m->dp) == 1) return ST_OK;
  /* Ordered on C, after the forwards' sums that produce it. */
  return scalars_all_reduce(m, m->dp, loss_sum->data, 1, COMM_SUM);
}

/* The step's decision on the device: AdamW's gradient factor and the skip flag. A non-finite
 * loss (after its reduction, the same on every rank) raises the flag too, so a step the host
 * will report as diverged leaves every parameter as it was. */
static st_status step_factors(gpt_model *m, const train_hparams *h, double scale) {
  const st_tensor flag = gpt_scalar(m, GPT_OVERFLOW), loss_sum = gpt_scalar(m, GPT_LOSS_SUM);
  ST_CHECK(kernel_finite_check(m->kb, &flag, &loss_sum, &m->stream));
  st_tensor factors;
  const int64_t n = KERNEL_STEP_FACTORS;
  ST_CHECK(tensor_make(&factors, m->acts.scalars + GPT_STEP_FACTORS, ST_FP32, m->dev->backend->kind,
                       1, &n));
  const st_tensor sumsq = gpt_scalar(m, GPT_GRAD_SUMSQ);
  return kernel_step_factors(m->kb, &factors, &sumsq, &flag, (double)h->clip, scale, &m->stream);
}

/* The host's one wait of the step, after which it reads the scalars copied into pinned memory,
 * and the time C waited on communication during the step. */
static st_status end_step(gpt_model *m, step_stats *out) {
  ST_CHECK(stream_memcpy(&m->stream, m->acts.scalars_host, m->acts.scalars,
                         GPT_SCALARS * sizeof(float)));
  ST_CHECK(gpt_step_end(m));
  out->comm_exposed_ms = m->streams.comm_exposed_ms;
  return ST_OK;
}

st_status train_step(gpt_model *m, const train_hparams *h, loss_scaler *scaler, int step,
                     const int32_t *const *inputs, const int32_t *const *targets, step_stats *out) {
  /* Waits recorded outside a step (an evaluation's forward) are not this step's. */
  comm_exposure_discard(&m->streams.exposure);
  ST_CHECK(gpt_zero_grads(m));
  const double scale = scaler->state.scale;
  const float dloss_scale = (float)(scale / (double)h->global_tokens);
  const st_tensor loss_sum = gpt_scalar(m, GPT_LOSS_SUM);
  ST_CHECK(stream_memset(&m->stream, m->acts.scalars, 0, GPT_SCALARS * sizeof(float)));
  for (int i = 0; i < h->grad_accum; i++) {
    ST_CHECK(gpt_forward(m, inputs[i], targets[i], dloss_scale));
    ST_CHECK(gpt_loss_sum(m, &loss_sum));
    ST_CHECK(gpt_backward(m, i == h->grad_accum - 1));
  }
  ST_CHECK(unit_reduce_wait(&m->units[0])); /* the backward finished all the others */
  ST_CHECK(overflow_inject(m, step));
  const int scaling = scaler->mode != LOSS_SCALER_NONE;
  ST_CHECK(grad_sumsq(m, scaling));
  ST_CHECK(loss_over_dp(m, &loss_sum));
  ST_CHECK(step_factors(m, h, scale));
  /* Enqueued before the outcome is known. Skipped steps are not optimizer steps: AdamW's bias
   * correction counts the applied ones, of which the host knows all before this one (a skip of
   * this one only means "no update"). */
  const int adam_step = step + 1 - (int)scaler->state.skipped;
  const float *factors = m->acts.scalars + GPT_STEP_FACTORS;
  out->lr = lr_at(&h->schedule, step);
  ST_CHECK(unit_optim_adamw(m->units, m->n_units, &h->adam, h->weight_decay, adam_step,
                            (float)out->lr, 1.0f, factors));
  ST_CHECK(end_step(m, out));
  const float *host = m->acts.scalars_host;
  /* A sum of squares past fp32's range is an overflow too, however finite each gradient. */
  const int overflow = scaling && (host[GPT_OVERFLOW] != 0.0f || !isfinite(host[GPT_GRAD_SUMSQ]));
  out->loss = (double)host[GPT_LOSS_SUM] / (double)h->global_tokens;
  out->grad_norm = sqrt((double)host[GPT_GRAD_SUMSQ]) / scale;
  out->loss_scale = scale;
  /* Every rank sees the same reduced values, so every rank stops here together; the device
   * skipped the update (the loss's check raised the flag, or the norm is not finite). */
  if (!isfinite(out->loss) || (!overflow && !isfinite(out->grad_norm))) {
    return st_error(ST_ERR_INTERNAL, "step %d: loss %g, gradient norm %g: training diverged",
                    step + 1, out->loss, out->grad_norm);
  }
  if (overflow && loss_scaler_at_floor(scaler)) {
    return st_error(ST_ERR_INTERNAL,
                    "step %d: the gradients overflow at loss scale %g, beyond the reduce "
                    "dtype's range unscaled: training diverged",
                    step + 1, scale);
  }
  out->skipped = !loss_scaler_update(scaler, overflow);
  if (out->skipped != (host[GPT_STEP_FACTORS + KERNEL_STEP_SKIP] != 0.0f)) {
    return st_error(ST_ERR_INTERNAL, "step %d: the device and the loss scaler disagree on a skip",
                    step + 1);
  }
  /* The norm of gradients that overflowed somewhere means nothing (a rank may even have summed
   * finite ones). */
  if (out->skipped) out->grad_norm = NAN;
  return ST_OK;
}
