/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). */
#include "engine/train_step.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "optim/clip.h"
#include "optim/unit_optim.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* Sum of squares of the whole model's gradients: this rank's shard of every unit, summed over
 * the shard group. Every stage sums exactly this way (stage 0 too, though it holds the full
 * gradients), so equal meshes give bit-identical norms at every stage. The replicate group
 * holds copies of the same shards and takes no part; padding is zero and adds nothing. */
static st_status global_grad_sumsq(gpt_model *m, double *out) {
  double local = 0;
  for (int u = 0; u < m->n_units; u++) {
    double part = 0;
    ST_CHECK(unit_optim_grad_sumsq(&m->units[u], m->kb, &m->stream, &part));
    local += part;
  }
  *out = local;
  comm *shard_group = m->units[0].groups.shard;
  if (!shard_group || comm_size(shard_group) == 1) return ST_OK;
  /* fp32 is enough here: the norm only scales the step (relative error ~1e-7). */
  float total = (float)local;
  ST_CHECK(comm_all_reduce(shard_group, &total, &total, 1, ST_FP32, COMM_SUM, NULL));
  *out = total;
  return ST_OK;
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
  out->lr = lr_at(&h->schedule, step);
  const float scale = clip_scale(out->grad_norm, h->clip);
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(
        unit_optim_adamw(&m->units[u], &h->adam, h->weight_decay, step + 1, (float)out->lr, scale));
  }
  return stream_sync(&m->stream);
}
