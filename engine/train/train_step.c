/* train_step.c - gradients, norm, clipping and AdamW for one step, on any mesh and ZeRO stage:
 * the optimizer only ever touches each unit's owned range (unit.h). The loss and the squared
 * gradient norm are summed and reduced in device scalars (gpt_scalar), and the host reads the
 * two once per step. */
#include "engine/train/train_step.h"

#include <math.h>

#include "core/error.h"
#include "optim/clip.h"
#include "optim/unit_optim.h"

st_status train_state_reset(gpt_model *m) {
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_optimizer_reset(&m->units[u]));
  return ST_OK;
}

/* The global gradient norm's square into its device scalar: each rank sums its shard of every
 * unit, then the sums are added over the shard group and the tp group. Every stage sums exactly
 * this way (stage 0 too, though it holds the full gradients), so equal meshes give
 * bit-identical norms at every stage. The replicate group holds copies of the same shards and
 * takes no part. fp32 is enough for the collective: the norm only scales the step (relative
 * error ~1e-7). */
static st_status grad_sumsq(gpt_model *m, const st_tensor *sumsq) {
  for (int u = 0; u < m->n_units; u++) {
    ST_CHECK(unit_optim_grad_sumsq(&m->units[u], m->kb, &m->stream, sumsq));
  }
  comm *groups[2] = {m->units[0].groups.shard, m->tp};
  for (int g = 0; g < 2; g++) {
    if (groups[g] && comm_size(groups[g]) > 1) {
      /* Ordered on C, after the sums of squares that produce it. */
      ST_CHECK(comm_all_reduce_on(groups[g], &m->stream, sumsq->data, sumsq->data, 1, ST_FP32,
                                  COMM_SUM, NULL));
    }
  }
  return ST_OK;
}

/* The step's loss sum, added over the data-parallel group (each rank's is over its own slice;
 * the tp ranks of a group hold the same one). */
static st_status loss_over_dp(const gpt_model *m, const st_tensor *loss_sum) {
  if (!m->dp || comm_size(m->dp) == 1) return ST_OK;
  /* Ordered on C, after the forwards' sums that produce it. */
  return comm_all_reduce_on(m->dp, &m->stream, loss_sum->data, loss_sum->data, 1, ST_FP32, COMM_SUM,
                            NULL);
}

st_status train_step(gpt_model *m, const train_hparams *h, int step, const int32_t *const *inputs,
                     const int32_t *const *targets, step_stats *out) {
  ST_CHECK(gpt_zero_grads(m));
  const float dloss_scale = (float)(1.0 / (double)h->global_tokens);
  const st_tensor loss_sum = gpt_scalar(m, GPT_LOSS_SUM), sumsq = gpt_scalar(m, GPT_GRAD_SUMSQ);
  ST_CHECK(stream_memset(&m->stream, m->acts.scalars, 0, GPT_SCALARS * sizeof(float)));
  for (int i = 0; i < h->grad_accum; i++) {
    ST_CHECK(gpt_forward(m, inputs[i], targets[i], dloss_scale));
    ST_CHECK(gpt_loss_sum(m, &loss_sum));
    ST_CHECK(gpt_backward(m, i == h->grad_accum - 1));
  }
  ST_CHECK(unit_reduce_wait(&m->units[0])); /* the backward finished all the others */
  ST_CHECK(grad_sumsq(m, &sumsq));
  ST_CHECK(loss_over_dp(m, &loss_sum));
  /* The host reads the two scalars together, once per step. */
  float host[GPT_SCALARS];
  ST_CHECK(stream_memcpy(&m->stream, host, m->acts.scalars, sizeof host));
  ST_CHECK(stream_sync(&m->stream));
  out->loss = (double)host[GPT_LOSS_SUM] / (double)h->global_tokens;
  out->grad_norm = sqrt((double)host[GPT_GRAD_SUMSQ]);
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
