/* matmul_test.c - matmul with and without bias, on odd sizes ([2, 5, 12] @ [12, 7]) and on a
 * shape wider than two of the CPU's column blocks ([2, 1, 130] @ [130, 150]): forward against
 * float64 loops, backward against central differences of those loops, and the backward's
 * accumulation into dinp, dweight and dbias. The tied-head variant (weight stored [out, in],
 * no bias) is checked the same way. */
#include <stdlib.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* The float64 reference and the loss sum(dout * out) whose gradients the backward computes. */
typedef struct matmul_ref {
  int64_t rows, in, outs;
  int out_in; /* weight stored [outs, in] (the tied head) instead of [in, outs] */
  double *inp, *weight, *bias, *dout; /* bias NULL: no bias */
} matmul_ref;

static void ref_forward(const matmul_ref *r, double *out) {
  for (int64_t n = 0; n < r->rows; n++) {
    for (int64_t o = 0; o < r->outs; o++) {
      double sum = r->bias ? r->bias[o] : 0.0;
      for (int64_t c = 0; c < r->in; c++) {
        double w = r->out_in ? r->weight[o * r->in + c] : r->weight[c * r->outs + o];
        sum += r->inp[n * r->in + c] * w;
      }
      out[n * r->outs + o] = sum;
    }
  }
}

static double ref_loss(void *ctx) {
  const matmul_ref *r = ctx;
  double *out = malloc((size_t)(r->rows * r->outs) * sizeof *out), loss = 0.0;
  ref_forward(r, out);
  for (int64_t i = 0; i < r->rows * r->outs; i++) loss += r->dout[i] * out[i];
  free(out);
  return loss;
}

typedef struct matmul_call {
  test_backend *tb;
  int out_in;
  test_buf *dinp, *dweight, *dbias, *dout, *inp, *weight; /* dbias NULL: no bias */
} matmul_call;

static st_status backward(void *ctx) {
  const matmul_call *m = ctx;
  if (m->out_in) {
    return kernel_matmul_wt_backward(m->tb->kb, &m->dinp->t, &m->dweight->t, &m->dout->t,
                                     &m->inp->t, &m->weight->t, &m->tb->stream);
  }
  return kernel_matmul_backward(m->tb->kb, &m->dinp->t, &m->dweight->t,
                                m->dbias ? &m->dbias->t : NULL, &m->dout->t, &m->inp->t,
                                &m->weight->t, &m->tb->stream);
}

/* out_in: the tied-head variant (weight [outs, in], never a bias). */
static void check_matmul(test_backend *tb, test_linear_dims d, int with_bias, int out_in) {
  test_rng rng = {(uint64_t)(d.in * 2 + with_bias + 4 * out_in)};
  int64_t rows = d.batch * d.seq;
  test_linear l = tlinear_alloc(tb, d, out_in);
  rng_fill(&rng, l.inp.host, rows * d.in, -1.0, 1.0);
  rng_fill(&rng, l.weight.host, d.in * d.outs, -1.0, 1.0);
  rng_fill(&rng, l.bias.host, d.outs, -1.0, 1.0);
  rng_fill(&rng, l.dout.host, rows * d.outs, -1.0, 1.0);
  rng_fill(&rng, l.out.host, rows * d.outs, 5.0, 9.0); /* garbage the forward must overwrite */
  test_buf *inputs[] = {&l.inp, &l.weight, &l.bias, &l.dout, &l.out};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);

  matmul_ref ref = {rows,
                    d.in,
                    d.outs,
                    out_in,
                    to_f64(l.inp.host, rows * d.in),
                    to_f64(l.weight.host, d.in * d.outs),
                    with_bias ? to_f64(l.bias.host, d.outs) : NULL,
                    to_f64(l.dout.host, rows * d.outs)};
  double *want = malloc((size_t)(rows * d.outs) * sizeof *want);
  ref_forward(&ref, want);
  if (out_in) {
    CHECK_OK(kernel_matmul_wt_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t, &tb->stream));
  } else {
    CHECK_OK(kernel_matmul_forward(tb->kb, &l.out.t, &l.inp.t, &l.weight.t,
                                   with_bias ? &l.bias.t : NULL, &tb->stream));
  }
  tbuf_download(&l.out);
  check_close(out_in      ? "matmul forward, tied head"
              : with_bias ? "matmul forward"
                          : "matmul forward, no bias",
              l.out.host, want, rows * d.outs, TOL_FP32);

  matmul_call call = {tb,      out_in, &l.dinp,  &l.dweight, with_bias ? &l.dbias : NULL,
                      &l.dout, &l.inp, &l.weight};
  test_buf *grads[] = {&l.dinp, &l.dweight, &l.dbias};
  check_accumulates("matmul backward", grads, with_bias ? 3 : 2, backward, &call);
  check_gradient("matmul dinp", ref.inp, rows * d.in, l.dinp.host, ref_loss, &ref);
  check_gradient("matmul dweight", ref.weight, d.in * d.outs, l.dweight.host, ref_loss, &ref);
  if (with_bias) check_gradient("matmul dbias", ref.bias, d.outs, l.dbias.host, ref_loss, &ref);

  free(want);
  free(ref.inp);
  free(ref.weight);
  free(ref.bias);
  free(ref.dout);
  tlinear_free(&l);
}

static void body(test_backend *tb) {
  const test_linear_dims odd = {2, 5, 12, 7}, wide = {2, 1, 130, 150};
  check_matmul(tb, odd, 1, 0);
  check_matmul(tb, odd, 0, 0);
  check_matmul(tb, wide, 1, 0);
  check_matmul(tb, odd, 0, 1);
  check_matmul(tb, wide, 0, 1);
}

int main(void) { return test_on_backends("matmul_test", body); }
