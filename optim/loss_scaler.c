/* loss_scaler.c - the loss scale's state machine (loss_scaler.h). */
#include "optim/loss_scaler.h"

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
    st->scale *= 2;
    st->clean_steps = 0;
  }
  return 1;
}
