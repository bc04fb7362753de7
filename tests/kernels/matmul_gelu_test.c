/* matmul_gelu_test.c - the matmul with the bias + GELU epilogue, on odd sizes ([2, 5, 12] @
 * [12, 7]) and wider than two of the CPU's column blocks ([2, 1, 130] @ [130, 150]): the forward's
 * pre_gelu and out against float64 loops; the backward's in-place overwrite of dout with
 * dout * gelu'(pre_gelu) against central differences of the float64 GELU; dinp, dweight and dbias
 * against central differences of the whole float64 layer; and dinp's overwrite and the others'
 * accumulation (dout is uploaded afresh before every call, since the op consumes it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* The float64 layer and the loss sum(dout * gelu(inp @ weight + bias)). */
typedef struct gelu_ref {
  int64_t rows, in, outs;
  double *inp, *weight, *bias, *dout;
} gelu_ref;

static void ref_forward(const gelu_ref *r, double *pre, double *out) {
  for (int64_t n = 0; n < r->rows; n++) {
    for (int64_t o = 0; o < r->outs; o++) {
      double sum = r->bias[o];
      for (int64_t c = 0; c < r->in; c++) sum += r->inp[n * r->in + c] * r->weight[c * r->outs + o];
      pre[n * r->outs + o] = sum;
      out[n * r->outs + o] = ref_gelu(sum);
    }
  }
}

static double ref_loss(void *ctx) {
  const gelu_ref *r = ctx;
  const int64_t count = r->rows * r->outs;
  double *pre = malloc((size_t)(2 * count) * sizeof *pre), loss = 0.0;
  ref_forward(r, pre, pre + count);
  for (int64_t i = 0; i < count; i++) loss += r->dout[i] * pre[count + i];
  free(pre);
  return loss;
}

typedef struct gelu_call {
  test_backend *tb;
  test_buf *dinp, *dweight, *dbias, *dout, *pre, *inp, *weight;
  const float *dout_values; /* the gradient of out, restored before every call */
} gelu_call;

static st_status backward(void *ctx) {
  const gelu_call *g = ctx;
  memcpy(g->dout->host, g->dout_values, g->dout->bytes);
  tbuf_upload(g->dout);
  return kernel_matmul_gelu_backward(g->tb->kb, &g->dinp->t, &g->dweight->t, &g->dbias->t,
                                     &g->dout->t, &g->pre->t, &g->inp->t, &g->weight->t,
                                     &g->tb->stream);
}

static void check_matmul_gelu(test_backend *tb, test_linear_dims d) {
  test_rng rng = {(uint64_t)(d.in * 3 + 1)};
  const int64_t rows = d.batch * d.seq, count = rows * d.outs;
  test_linear l = tlinear_alloc(tb, d, 0);
  int64_t out_shape[] = {d.batch, d.seq, d.outs};
  test_buf pre = tbuf_tensor(tb, ST_FP32, 3, out_shape);
  /* Pre-activations of a few units either side of 0: both tails of GELU and its bend. */
  rng_fill(&rng, l.inp.host, rows * d.in, -1.0, 1.0);
  rng_fill(&rng, l.weight.host, d.in * d.outs, -3.0 / sqrt((double)d.in), 3.0 / sqrt((double)d.in));
  rng_fill(&rng, l.bias.host, d.outs, -1.0, 1.0);
  rng_fill(&rng, l.dout.host, count, -1.0, 1.0);
  rng_fill(&rng, l.out.host, count, 5.0, 9.0); /* garbage the forward must overwrite */
  rng_fill(&rng, pre.host, count, 5.0, 9.0);
  test_buf *inputs[] = {&l.inp, &l.weight, &l.bias, &l.out, &pre};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);

  gelu_ref ref = {rows,
                  d.in,
                  d.outs,
                  to_f64(l.inp.host, rows * d.in),
                  to_f64(l.weight.host, d.in * d.outs),
                  to_f64(l.bias.host, d.outs),
                  to_f64(l.dout.host, count)};
  double *want = malloc((size_t)(2 * count) * sizeof *want);
  ref_forward(&ref, want, want + count);
  CHECK_OK(kernel_matmul_gelu_forward(tb->kb, &l.out.t, &pre.t, &l.inp.t, &l.weight.t, &l.bias.t,
                                      &tb->stream));
  tbuf_download(&pre);
  tbuf_download(&l.out);
  check_close("matmul_gelu pre_gelu", pre.host, want, count, TOL_FP32);
  check_close("matmul_gelu out", l.out.host, want + count, count, TOL_FP32);

  float *dout_values = malloc((size_t)l.dout.bytes);
  memcpy(dout_values, l.dout.host, l.dout.bytes);
  gelu_call call = {tb,   &l.dinp, &l.dweight, &l.dbias,   &l.dout,
                    &pre, &l.inp,  &l.weight,  dout_values};
  test_buf *grads[] = {&l.dinp, &l.dweight, &l.dbias};
  check_accumulates("matmul_gelu backward", grads, 3, 1, backward, &call); /* dinp written */

  /* dout now holds dout * gelu'(pre_gelu), at the pre-activations the forward saved. */
  tbuf_download(&l.dout);
  const float *saved = pre.host;
  for (int64_t i = 0; i < count; i++) {
    const double h = 1e-5, x = saved[i];
    want[i] = dout_values[i] * (ref_gelu(x + h) - ref_gelu(x - h)) / (2.0 * h);
  }
  check_close("matmul_gelu overwrites dout with dpre", l.dout.host, want, count, TOL_FP32_GRAD);
  check_gradient("matmul_gelu dinp", ref.inp, rows * d.in, l.dinp.host, ref_loss, &ref);
  check_gradient("matmul_gelu dweight", ref.weight, d.in * d.outs, l.dweight.host, ref_loss, &ref);
  check_gradient("matmul_gelu dbias", ref.bias, d.outs, l.dbias.host, ref_loss, &ref);

  free(dout_values);
  free(want);
  free(ref.inp);
  free(ref.weight);
  free(ref.bias);
  free(ref.dout);
  tbuf_free(&pre);
  tlinear_free(&l);
}

static void body(test_backend *tb) {
  CHECK(kernel_supports(tb->kb, KERNEL_OP_MATMUL_GELU, ST_FP32));
  check_matmul_gelu(tb, (test_linear_dims){2, 5, 12, 7});
  check_matmul_gelu(tb, (test_linear_dims){2, 1, 130, 150});
}

int main(void) { return test_on_backends("matmul_gelu_test", body); }
