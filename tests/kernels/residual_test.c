/* residual_test.c - the residual add: out = a + b against float64 sums (exact: the sum of two
 * floats rounded once), both into a separate buffer and in place (out aliasing a). */
#include <stdlib.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 5, C = 12, COUNT = B * T * C };

static void body(test_backend *tb) {
  test_rng rng = {41};
  int64_t shape[] = {B, T, C};
  test_buf a = tbuf_tensor(tb, ST_FP32, 3, shape), b = tbuf_tensor(tb, ST_FP32, 3, shape);
  test_buf out = tbuf_tensor(tb, ST_FP32, 3, shape);
  rng_fill(&rng, a.host, COUNT, -1.0, 1.0);
  rng_fill(&rng, b.host, COUNT, -1.0, 1.0);
  tbuf_upload(&a);
  tbuf_upload(&b);
  double want[COUNT];
  const float *x = a.host, *y = b.host;
  for (int i = 0; i < COUNT; i++) want[i] = (float)((double)x[i] + y[i]);
  const test_tol exact = {0.0, 0.0};

  CHECK_OK(kernel_residual_forward(tb->kb, &out.t, &a.t, &b.t, &tb->stream));
  tbuf_download(&out);
  check_close("residual forward", out.host, want, COUNT, exact);

  CHECK_OK(kernel_residual_forward(tb->kb, &a.t, &a.t, &b.t, &tb->stream));
  tbuf_download(&a);
  check_close("residual forward in place", a.host, want, COUNT, exact);

  tbuf_free(&out);
  tbuf_free(&b);
  tbuf_free(&a);
}

int main(void) { return test_on_backends("residual_test", body); }
