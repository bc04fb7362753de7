/* lr_schedule.c - warmup, constant and cosine learning-rate schedules. */
#include "optim/lr_schedule.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

st_status lr_schedule_check(const lr_schedule *s) {
  if (!(s->lr > 0)) return st_error(ST_ERR_INVALID_ARG, "learning rate %g must be > 0", s->lr);
  if (s->min_lr < 0 || s->min_lr > s->lr) {
    return st_error(ST_ERR_INVALID_ARG, "minimum learning rate %g must lie in [0, %g]", s->min_lr,
                    s->lr);
  }
  if (s->warmup < 0) return st_error(ST_ERR_INVALID_ARG, "warmup %d must be >= 0", s->warmup);
  if (s->total_steps < 1) {
    return st_error(ST_ERR_INVALID_ARG, "total steps %d must be >= 1", s->total_steps);
  }
  return ST_OK;
}

int lr_shape_parse(const char *name) {
  if (strcmp(name, "constant") == 0) return LR_CONSTANT;
  if (strcmp(name, "cosine") == 0) return LR_COSINE;
  return -1;
}

double lr_at(const lr_schedule *s, int step) {
  if (step < s->warmup) return s->lr * (step + 1) / s->warmup;
  if (s->shape == LR_CONSTANT) return s->lr;
  int decay_steps = s->total_steps - 1 - s->warmup;
  if (decay_steps <= 0) return s->lr;
  double progress = (double)(step - s->warmup) / decay_steps;
  if (progress > 1) progress = 1;
  double cosine = 0.5 * (1.0 + cos(M_PI * progress));
  return s->min_lr + cosine * (s->lr - s->min_lr);
}
