/* lr_schedule.h - learning rate per step: linear warmup over `warmup` steps
 * (lr * (step + 1) / warmup, steps counted from 0), then either constant or a cosine decay
 * from lr to min_lr reached at the last step (total_steps - 1). */
#ifndef ST_OPTIM_LR_SCHEDULE_H
#define ST_OPTIM_LR_SCHEDULE_H

#include "shardtrain.h"

typedef enum lr_shape { LR_CONSTANT = 0, LR_COSINE = 1 } lr_shape;

typedef struct lr_schedule {
  lr_shape shape;
  double lr;
  double min_lr;
  int warmup;
  int total_steps;
} lr_schedule;

/* Checks the schedule's numbers (lr > 0, 0 <= min_lr <= lr, 0 <= warmup, total_steps >= 1). */
st_status lr_schedule_check(const lr_schedule *s);

/* Parses "constant" or "cosine"; -1 if neither. */
int lr_shape_parse(const char *name);

double lr_at(const lr_schedule *s, int step);

#endif /* ST_OPTIM_LR_SCHEDULE_H */
