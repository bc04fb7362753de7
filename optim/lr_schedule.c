/* lr_schedule.c - warmup, then constant, cosine, linear or warmup-stable-decay learning rates. */
#include "optim/lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

static const char *const shape_names[] = {"constant", "cosine", "linear", "wsd"};
#define SHAPE_COUNT ((int)(sizeof shape_names / sizeof shape_names[0]))

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
  if (s->shape == LR_WSD && (s->decay_steps < 1 || s->decay_steps > s->total_steps)) {
    return st_error(ST_ERR_INVALID_ARG, "decay steps %d must lie in [1, total steps %d]",
                    s->decay_steps, s->total_steps);
  }
  return ST_OK;
}

int lr_shape_parse(const char *name) {
  for (int i = 0; i < SHAPE_COUNT; i++) {
    if (strcmp(name, shape_names[i]) == 0) return i;
  }
  return -1;
}

const char *lr_shape_name(lr_shape shape) {
  return (int)shape >= 0 && (int)shape < SHAPE_COUNT ? shape_names[shape] : "unknown";
}

void lr_schedule_describe(const lr_schedule *s, char *buf, size_t size) {
  int used = s->warmup ? snprintf(buf, size, "warmup %d step%s, then ", s->warmup,
                                  s->warmup == 1 ? "" : "s")
                       : 0;
  if (used < 0 || (size_t)used >= size) return;
  buf += used;
  size -= (size_t)used;
  switch (s->shape) {
    case LR_CONSTANT: snprintf(buf, size, "constant"); break;
    case LR_WSD:
      snprintf(buf, size, "constant, then 1-sqrt to %g over the last %d step%s", s->min_lr,
               s->decay_steps, s->decay_steps == 1 ? "" : "s");
      break;
    default: snprintf(buf, size, "%s to %g", lr_shape_name(s->shape), s->min_lr); break;
  }
}

double lr_at(const lr_schedule *s, int step) {
  if (step < s->warmup) return s->lr * (step + 1) / s->warmup;
  if (s->shape == LR_CONSTANT) return s->lr;
  /* The decay runs over the steps after `from` up to the last one: cosine's and linear's from
   * the first after the warmup (which keeps lr), wsd's last decay_steps, at most every step
   * after the warmup (whose last step reached lr). */
  const int last = s->total_steps - 1;
  int from = s->warmup;
  if (s->shape == LR_WSD) {
    from = last - s->decay_steps;
    if (from < s->warmup - 1) from = s->warmup - 1;
  }
  if (last <= from || (s->shape == LR_WSD && step <= from)) return s->lr;
  double progress = (double)(step - from) / (last - from);
  if (progress > 1) progress = 1;
  double fraction; /* of lr - min_lr, above min_lr */
  switch (s->shape) {
    case LR_COSINE: fraction = 0.5 * (1.0 + cos(M_PI * progress)); break;
    case LR_LINEAR: fraction = 1.0 - progress; break;
    default: fraction = 1.0 - sqrt(progress); break;
  }
  return s->min_lr + fraction * (s->lr - s->min_lr);
}
