/* loss_scaler.h - the loss scale of fp16 training: a pure state machine over the outcome of
 * each step, with no device, collective or clock in it (the training step multiplies the loss
 * gradient by `scale`, finds whether any rank's gradients overflowed, and reports that here).
 *
 * Modes:
 *   - none: scale 1 forever, nothing is ever skipped by it (fp32 and bf16);
 *   - fixed: a constant scale in [LOSS_SCALER_MIN_SCALE, LOSS_SCALER_MAX_SCALE]; an overflowing
 *     step is skipped, the scale does not change;
 *   - dynamic (fp16's default): an overflowing step is skipped and halves the scale (never
 *     below LOSS_SCALER_MIN_SCALE); `window` clean steps in a row double it (never above
 *     LOSS_SCALER_MAX_SCALE).
 * The state that a checkpoint must carry for a resumed run to continue bit-identically is
 * loss_scaler_state: the scale, the clean steps since the last change, and the steps skipped
 * so far (AdamW's step count leaves them out). */
#ifndef ST_OPTIM_LOSS_SCALER_H
#define ST_OPTIM_LOSS_SCALER_H

#include <stdint.h>

#define LOSS_SCALER_INITIAL_SCALE 65536.0
#define LOSS_SCALER_DEFAULT_WINDOW 2000
/* Halving stops here: a scale below 1 would only push small gradients further into fp16's
 * underflow. A step that overflows at scale 1 has gradients beyond the reduce dtype's range
 * unscaled (fp16's 65504, or fp32's), which the training step reports as divergence. */
#define LOSS_SCALER_MIN_SCALE 1.0
/* Doubling stops here (2^24, as NVIDIA's apex caps it): with fp32 gradients nothing else bounds
 * the growth but fp32's range, where a step skipped for overflow is a step lost, and a loss
 * scaled by more already overflows fp16 for a gradient of 2^-8. */
#define LOSS_SCALER_MAX_SCALE 16777216.0

typedef enum loss_scaler_mode {
  LOSS_SCALER_NONE = 0,
  LOSS_SCALER_FIXED = 1,
  LOSS_SCALER_DYNAMIC = 2
} loss_scaler_mode;

typedef struct loss_scaler_state {
  double scale;        /* a power of two in dynamic mode, so scaling and unscaling are exact */
  int64_t clean_steps; /* steps without overflow since the scale last changed */
  int64_t skipped;     /* steps skipped so far */
} loss_scaler_state;

typedef struct loss_scaler {
  loss_scaler_mode mode;
  int window; /* dynamic: clean steps that double the scale */
  loss_scaler_state state;
} loss_scaler;

/* Mode none (scale 1). */
void loss_scaler_init_none(loss_scaler *s);
/* A constant scale, in [LOSS_SCALER_MIN_SCALE, LOSS_SCALER_MAX_SCALE]. */
void loss_scaler_init_fixed(loss_scaler *s, double scale);
/* Starts at `initial` (a power of two) and doubles after `window` (>= 1) clean steps. */
void loss_scaler_init_dynamic(loss_scaler *s, double initial, int window);

/* Records one step's outcome (`overflow`: some rank's gradients held an inf or a NaN) and
 * returns 1 when the step must be applied, 0 when it must be skipped. Mode none never skips:
 * without a scale there is nothing to lower, and the caller treats non-finite gradients as
 * divergence. */
int loss_scaler_update(loss_scaler *s, int overflow);

/* A resumed run's scaler from a checkpoint's state: the steps skipped always carry on; a dynamic
 * scaler continues from the saved scale and window count when the scale is one it can hold (a
 * power of two from LOSS_SCALER_MIN_SCALE to LOSS_SCALER_MAX_SCALE: any dynamic run's, or a
 * fixed run's such as 1024), else it starts anew at its initial scale; a fixed one keeps its
 * own scale. (A fixed run's clean-step count runs on since its last overflow, so a dynamic run
 * resumed from it may double its scale at its first clean step.) Returns 1 when a dynamic
 * scaler took the saved scale, 0 otherwise. */
int loss_scaler_adopt(loss_scaler *s, const loss_scaler_state *saved);

/* 1 when a dynamic scaler has reached LOSS_SCALER_MIN_SCALE and another overflow cannot lower
 * it any further. */
int loss_scaler_at_floor(const loss_scaler *s);

#endif /* ST_OPTIM_LOSS_SCALER_H */
