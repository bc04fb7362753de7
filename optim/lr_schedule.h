/* lr_schedule.h - learning rate per step (steps counted from 0): a linear warmup over `warmup`
 * steps (lr * (step + 1) / warmup), then one of
 *   constant  lr to the end;
 *   cosine    from lr down to min_lr, reached at the last step (total_steps - 1);
 *   linear    the same along a straight line;
 *   wsd       warmup-stable-decay: lr until the last `decay_steps` steps, over which it falls to
 *             min_lr at the last step along 1 - sqrt(progress), the cooldown Hagele et al.
 *             (2024) found to match cosine at any length (where the warmup overlaps those
 *             steps, the decay takes the steps after it). A run resumed from a step of the
 *             stable phase with another total_steps branches a cooldown of its own, as scaling
 *             studies do.
 * A decay's progress is 0 at the step before it, which has lr (cosine's and linear's first
 * after the warmup; wsd's last stable step, total_steps - 1 - decay_steps, or the warmup's last),
 * and 1 at the last step; where that step before it is the last step or later (a warmup of
 * total_steps - 1 steps or more), there is no decay and lr stays to the end. min_lr at the last
 * step is nanoGPT's convention (PyTorch's CosineAnnealingLR and llm.c reach it one step later):
 * a min_lr of 0 makes the last step change nothing. */
#ifndef ST_OPTIM_LR_SCHEDULE_H
#define ST_OPTIM_LR_SCHEDULE_H

#include "shardtrain.h"

typedef enum lr_shape { LR_CONSTANT = 0, LR_COSINE = 1, LR_LINEAR = 2, LR_WSD = 3 } lr_shape;

typedef struct lr_schedule {
  lr_shape shape;
  double lr;
  double min_lr;
  int warmup;
  int total_steps;
  int decay_steps; /* wsd: the steps of the final decay (>= 1); 0 for the other shapes */
} lr_schedule;

/* Checks the schedule's numbers: lr > 0, 0 <= min_lr <= lr, 0 <= warmup, total_steps >= 1, and
 * for wsd 1 <= decay_steps <= total_steps. */
st_status lr_schedule_check(const lr_schedule *s);

/* Parses a shape's name ("constant", "cosine", "linear", "wsd"); -1 if none. */
int lr_shape_parse(const char *name);

/* The shape's name, as lr_shape_parse reads it. */
const char *lr_shape_name(lr_shape shape);

/* The schedule in words, for run summaries: "warmup 10 steps, then cosine to 0.0001",
 * "constant", "constant, then 1-sqrt to 0 over the last 200 steps" (wsd). */
void lr_schedule_describe(const lr_schedule *s, char *buf, size_t size);

double lr_at(const lr_schedule *s, int step);

#endif /* ST_OPTIM_LR_SCHEDULE_H */
