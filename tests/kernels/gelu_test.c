/* gelu_test.c - tanh-GELU on [2, 5, 12] values in [-4, 4] (both tails and the bend): forward
 * against float64 loops, backward against central differences, and its accumulation; then a
 * sweep of [-12, 12] in steps of 1/1024 and +-100 (far tails, where the CPU caps |u|) against
 * float64 forward and derivative, to 2e-6 relative: every backend computes 1 + tanh u without
 * cancellation (kernels/cpu/gelu.c), where 0.5 x (1 + tanhf(u)) is 7.7e-5 off in the negative
 * tail and rounds the far tail to 0. */
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

/* d/dx of ref_gelu, worked out by hand: 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx. */
static double ref_gelu_grad(double x) {
  const double k = sqrt(2.0 / M_PI), th = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
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
  check_accumulates("gelu backward", grads, 1, 0, backward, &call);
  check_gradient("gelu dinp", ref.inp, COUNT, dinp.host, ref_loss, &ref);

  free(ref.inp);
  free(ref.dout);
  tbuf_free(&dinp);
  tbuf_free(&dout);
  tbuf_free(&out);
  tbuf_free(&inp);
}

enum { SWEEP = 24 * 1024 + 1 + 2 };

static void sweep(test_backend *tb) {
  int64_t shape[] = {SWEEP};
  test_buf inp = tbuf_tensor(tb, ST_FP32, 1, shape), out = tbuf_tensor(tb, ST_FP32, 1, shape);
  test_buf ones = tbuf_tensor(tb, ST_FP32, 1, shape), dinp = tbuf_tensor(tb, ST_FP32, 1, shape);
  static double want[SWEEP], want_grad[SWEEP];
  float *x = inp.host, *dy = ones.host, *dx = dinp.host;
  for (int i = 0; i < SWEEP; i++) {
    x[i] = i < SWEEP - 2 ? -12.0f + (float)i / 1024.0f : (i == SWEEP - 2 ? -100.0f : 100.0f);
    dy[i] = 1.0f;
    dx[i] = 0.0f;
    want[i] = ref_gelu(x[i]);
    want_grad[i] = ref_gelu_grad(x[i]);
  }
  tbuf_upload(&inp);
  tbuf_upload(&ones);
  tbuf_upload(&dinp);
  CHECK_OK(kernel_gelu_forward(tb->kb, &out.t, &inp.t, &tb->stream));
  CHECK_OK(kernel_gelu_backward(tb->kb, &dinp.t, &ones.t, &inp.t, &tb->stream));
  tbuf_download(&out);
  tbuf_download(&dinp);
  /* The derivative's two terms cancel where it crosses 0 (x near -0.75): float's rounding of
   * each, about 3e-8, is its absolute floor. */
  const test_tol tight = {1e-12, 2e-6}, tight_grad = {2e-7, 2e-6};
  check_close("gelu sweep forward", out.host, want, SWEEP, tight);
  check_close("gelu sweep derivative", dinp.host, want_grad, SWEEP, tight_grad);
  tbuf_free(&dinp);
  tbuf_free(&ones);
  tbuf_free(&out);
  tbuf_free(&inp);
}

static void all_cases(test_backend *tb) {
  body(tb);
  sweep(tb);
}

int main(void) { return test_on_backends("gelu_test", all_cases); }
