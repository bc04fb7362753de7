/* clip.c - the clipping coefficient. */
#include "optim/clip.h"

float clip_scale(double global_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  double scale = max_norm / (global_norm + 1e-6);
  return scale < 1.0 ? (float)scale : 1.0f;
}
