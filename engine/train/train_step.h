/* train_step.h - one optimizer step of the GPT: gradients over the micro-batches of a global
 * batch, the global gradient norm and clipping, AdamW on the owned shard of each unit, and the
 * updated master weights written back into the parameters; with loss scaling (fp16), the step
 * is skipped on every rank when any rank's gradients overflowed.
 *
 * The optimizer walks each unit's owned shard parameter by parameter, so weight decay applies
 * exactly to the tensors of rank >= 2, however a shard cuts through them. */
#ifndef ST_ENGINE_TRAIN_TRAIN_STEP_H
#define ST_ENGINE_TRAIN_TRAIN_STEP_H

#include <stdint.h>

#include "engine/model/gpt.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

/* The largest optimizer settings a run takes and a checkpoint records (so that every run's
 * checkpoint can be read back): far beyond any useful value, and inside fp32, in which the
 * update runs. */
#define TRAIN_MAX_LR 1e9
#define TRAIN_MAX_WEIGHT_DECAY 1e9
#define TRAIN_MAX_CLIP 1e38
#define TRAIN_MAX_EPS 1.0

typedef struct train_hparams {
  lr_schedule schedule;
  adamw_hparams adam;
  float weight_decay;    /* for tensors of rank >= 2 */
  float clip;            /* max global grad norm; <= 0: no clipping */
  int grad_accum;        /* micro-batches per step */
  int64_t global_tokens; /* tokens of the global batch: the loss is their mean */
} train_hparams;

typedef struct step_stats {
  double loss;      /* mean over the global batch */
  double grad_norm; /* before clipping, unscaled (not finite on a skipped step) */
  double lr;
  double loss_scale;      /* the scale this step's loss gradient was multiplied by (1: none) */
  int skipped;            /* 1: the gradients overflowed and the step changed no parameter */
  double comm_exposed_ms; /* this rank's compute stream waiting on communication during the
                             step (sharding/comm_exposure.h); 0 when it never waited */
} step_stats;

/* Copies the current parameters into the fp32 master weights and zeroes the Adam moments:
 * call after initialisation or import, before the first step. */
st_status train_state_reset(gpt_model *model);

/* Step `step` (from 0). inputs[i] and targets[i] are micro-batch i's host tokens, B x T each.
 * `scaler` (loss_scaler_init_none for fp32 and bf16) gives the loss scale and records the
 * step's outcome; every rank holds the same scaler and updates it the same way. Non-finite
 * gradients without loss scaling, or at a dynamic scale that cannot go lower, and a non-finite
 * loss are divergence: ST_ERR_INTERNAL on every rank. */
st_status train_step(gpt_model *model, const train_hparams *h, loss_scaler *scaler, int step,
                     const int32_t *const *inputs, const int32_t *const *targets, step_stats *out);

#endif /* ST_ENGINE_TRAIN_TRAIN_STEP_H */
