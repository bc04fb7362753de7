/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). */
#include "engine/train/train_step.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "optim/clip.h"
#include "optim/unit_optim.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* The global gradient norm's square: each rank sums its shard of every unit, then the sums are
 * added over the shard group and the tp group. Every stage sums exactly this way (stage 0 too,
 * though it holds the full gradients), so equal meshes give bit-identical norms at every stage.
 * The replicate group holds copies of the same shards and takes no part. fp32 is enough for
 * the collective: the norm only scales the step (relative error ~1e-7). */
static st_status sum_units_and_groups(gpt_model *m, float *sum) {
  st_tensor scalar;
  ST_CHECK(tensor_make(&scalar, sum, ST_FP32, m->dev->backend->kind, 1, (int64_t[]){1}));
  ST_CHECK(stream_memset(&m->stream, sum, 0, sizeof *sum));
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(unit_optim_grad_sumsq(&m->units[u], m->kb, &m->stream, &scalar));
  }
  comm *groups[2] = {m->units[0].groups.shard, m->tp};
  for (int g = 0; g < 2; g++) {
    if (groups[g] && comm_size(groups[g]) > 1) {
      /* Ordered on C, after the sums of squares that produce it. */
      ST_CHECK(comm_all_reduce_on(groups[g], &m->stream, sum, sum, 1, ST_FP32, COMM_SUM, NULL));
    }
  }
  return ST_OK;
}

/* The squared global gradient norm, summed in a device scalar and reduced from device memory;
 * the host reads it once. */
static st_status global_grad_sumsq(gpt_model *m, double *out) {
  float *sum = NULL, host_sum = 0;
  ST_CHECK(mem_alloc((void **)&sum, sizeof *sum, MEM_DEVICE, MEM_WORKSPACE, m->dev));
  st_status status = sum_units_and_groups(m, sum);
  if (status == ST_OK) status = stream_memcpy(&m->stream, &host_sum, sum, sizeof *sum);
  if (status == ST_OK) status = stream_sync(&m->stream);
  mem_free(sum);
  *out = host_sum;
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

st_status train_step(gpt_model *m, const train_hparams *h, int step, const int32_t *const *inputs,
                     const int32_t *const *targets, step_stats *out) {
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
    return st_error(ST_ERR_INTERNAL, "step %d: loss %g, gradient norm %g: training diverged", step,
                    out->loss, out->grad_norm);
  }
  out->lr = lr_at(&h->schedule, step);
  const float scale = clip_scale(out->grad_norm, h->clip);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(
        unit_optim_adamw(&m->units[u], &h->adam, h->weight_decay, step + 1, (float)out->lr, scale));
  }
  return gpt_step_end(m);
}
