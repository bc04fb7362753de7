/* loss_scaler.c - the loss scale's state machine (loss_scaler.h). */
#include "optim/loss_scaler.h"

#include <math.h>

void loss_scaler_init_none(loss_scaler *s) {
  *s = (loss_scaler){.mode = LOSS_SCALER_NONE, .window = 0, .state = {1.0, 0, 0}};
}

void loss_scaler_init_fixed(loss_scaler *s, double scale) {
  *s = (loss_scaler){.mode = LOSS_SCALER_FIXED, .window = 0, .state = {scale, 0, 0}};
}

void loss_scaler_init_dynamic(loss_scaler *s, double initial, int window) {
  *s = (loss_scaler){.mode = LOSS_SCALER_DYNAMIC, .window = window, .state = {initial, 0, 0}};
}

int loss_scaler_at_floor(const loss_scaler *s) {
  return s->mode == LOSS_SCALER_DYNAMIC && s->state.scale <= LOSS_SCALER_MIN_SCALE;
}

int loss_scaler_update(loss_scaler *s, int overflow) {
  loss_scaler_state *st = &s->state;
  if (s->mode == LOSS_SCALER_NONE) return 1;
  if (overflow) {
    st->skipped++;
    st->clean_steps = 0;
    if (s->mode == LOSS_SCALER_DYNAMIC && st->scale > LOSS_SCALER_MIN_SCALE) st->scale /= 2;
    return 0;
  }
  st->clean_steps++;
  if (s->mode == LOSS_SCALER_DYNAMIC && st->clean_steps >= s->window) {
    if (st->scale < LOSS_SCALER_MAX_SCALE) st->scale *= 2;
    st->clean_steps = 0;
  }
  return 1;
}

/* A power of two a dynamic scaler reaches from LOSS_SCALER_INITIAL_SCALE. */
static int dynamic_scale(double scale) {
  int exponent = 0;
  return scale >= LOSS_SCALER_MIN_SCALE && scale <= LOSS_SCALER_MAX_SCALE &&
         frexp(scale, &exponent) == 0.5;
}

int loss_scaler_adopt(loss_scaler *s, const loss_scaler_state *saved) {
  s->state.skipped = saved->skipped;
  if (s->mode != LOSS_SCALER_DYNAMIC || !dynamic_scale(saved->scale)) return 0;
  s->state.scale = saved->scale;
  s->state.clean_steps = saved->clean_steps;
  return 1;
}
