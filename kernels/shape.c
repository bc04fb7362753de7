/* shape.c - the rows convention of kernels.h, shared by the argument checks and the backends. */
#include "kernels/kernels.h"

int64_t kernel_cols(const st_tensor *t) { return t->shape[t->ndim - 1]; }

int64_t kernel_rows(const st_tensor *t) {
  int64_t rows = 1;
  for (int d = 0; d < t->ndim - 1; d++) rows *= t->shape[d];
  return rows;
}
