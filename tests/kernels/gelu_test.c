/* gelu_test.c - tanh-GELU on [2, 5, 12] values in [-4, 4] (both tails and the bend): forward
 * against float64 loops, backward against central differences, and its accumulation. */
#include <math.h>
#include <stdlib.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 5, C = 12, COUNT = B * T * C };

typedef struct gelu_ref {
  double *inp, *dout;
} gelu_ref;

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_loss(void *ctx) {
  const gelu_ref *r = ctx;
  double loss = 0.0;
  for (int i = 0; i < COUNT; i++) loss += r->dout[i] * ref_gelu(r->inp[i]);
  return loss;
}

typedef struct gelu_call {
  test_backend *tb;
  test_buf *dinp, *dout, *inp;
} gelu_call;

static st_status backward(void *ctx) {
  const gelu_call *g = ctx;
  return kernel_gelu_backward(g->tb->kb, &g->dinp->t, &g->dout->t, &g->inp->t, &g->tb->stream);
}

static void body(test_backend *tb) {
  test_rng rng = {31};
  int64_t shape[] = {B, T, C};
  test_buf inp = tbuf_tensor(tb, ST_FP32, 3, shape), out = tbuf_tensor(tb, ST_FP32, 3, shape);
  test_buf dout = tbuf_tensor(tb, ST_FP32, 3, shape), dinp = tbuf_tensor(tb, ST_FP32, 3, shape);
  rng_fill(&rng, inp.host, COUNT, -4.0, 4.0);
  rng_fill(&rng, dout.host, COUNT, -1.0, 1.0);
  tbuf_upload(&inp);
  tbuf_upload(&dout);

  gelu_ref ref = {to_f64(inp.host, COUNT), to_f64(dout.host, COUNT)};
  double want[COUNT];
  for (int i = 0; i < COUNT; i++) want[i] = ref_gelu(ref.inp[i]);
  CHECK_OK(kernel_gelu_forward(tb->kb, &out.t, &inp.t, &tb->stream));
  tbuf_download(&out);
  check_close("gelu forward", out.host, want, COUNT, TOL_FP32);

  gelu_call call = {tb, &dinp, &dout, &inp};
  test_buf *grads[] = {&dinp};
  check_accumulates("gelu backward", grads, 1, backward, &call);
  check_gradient("gelu dinp", ref.inp, COUNT, dinp.host, ref_loss, &ref);

  free(ref.inp);
  free(ref.dout);
  tbuf_free(&dinp);
  tbuf_free(&dout);
  tbuf_free(&out);
  tbuf_free(&inp);
}

int main(void) { return test_on_backends("gelu_test", body); }
