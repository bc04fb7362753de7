/* layernorm_test.c - LayerNorm with inputs far from zero mean, on odd sizes ([2, 5, 12]) and
 * wider than two of the CPU's column blocks ([2, 3, 130]): forward (out, mean, rstd) against
 * float64 loops, backward (dinp, dweight, dbias) against central differences of those loops,
 * and the backward's accumulation. */
#include <math.h>
#include <stdlib.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

typedef struct layernorm_ref {
  int64_t rows, channels;
  double *inp, *weight, *bias, *dout;
} layernorm_ref;

static void ref_forward(const layernorm_ref *r, double *out, double *mean, double *rstd) {
  int64_t C = r->channels;
  for (int64_t n = 0; n < r->rows; n++) {
    const double *x = r->inp + n * C;
    double m = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; c++) m += x[c] / C;
    for (int64_t c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m) / C;
    double s = 1.0 / sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; c++) out[n * C + c] = (x[c] - m) * s * r->weight[c] + r->bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

static double ref_loss(void *ctx) {
  const layernorm_ref *r = ctx;
  int64_t count = r->rows * r->channels;
  double *out = malloc((size_t)(count + 2 * r->rows) * sizeof *out), loss = 0.0;
  ref_forward(r, out, out + count, out + count + r->rows);
  for (int64_t i = 0; i < count; i++) loss += r->dout[i] * out[i];
  free(out);
  return loss;
}

typedef struct layernorm_call {
  test_backend *tb;
  test_buf *dinp, *dweight, *dbias, *dout, *inp, *weight, *mean, *rstd;
} layernorm_call;

static st_status backward(void *ctx) {
  const layernorm_call *l = ctx;
  return kernel_layernorm_backward(l->tb->kb, &l->dinp->t, &l->dweight->t, &l->dbias->t,
                                   &l->dout->t, &l->inp->t, &l->weight->t, &l->mean->t, &l->rstd->t,
                                   &l->tb->stream);
}

static void check_layernorm(test_backend *tb, int64_t batch, int64_t seq, int64_t channels) {
  test_rng rng = {(uint64_t)channels};
  int64_t rows = batch * seq, count = rows * channels;
  int64_t act[] = {batch, seq, channels}, stat[] = {batch, seq};
  test_buf inp = tbuf_tensor(tb, ST_FP32, 3, act), out = tbuf_tensor(tb, ST_FP32, 3, act);
  test_buf dout = tbuf_tensor(tb, ST_FP32, 3, act), dinp = tbuf_tensor(tb, ST_FP32, 3, act);
  test_buf weight = tbuf_tensor(tb, ST_FP32, 1, &channels);
  test_buf bias = tbuf_tensor(tb, ST_FP32, 1, &channels);
  test_buf dweight = tbuf_tensor(tb, ST_FP32, 1, &channels);
  test_buf dbias = tbuf_tensor(tb, ST_FP32, 1, &channels);
  test_buf mean = tbuf_tensor(tb, ST_FP32, 2, stat), rstd = tbuf_tensor(tb, ST_FP32, 2, stat);
  /* A mean of ~3 against a spread of ~1 catches a one-pass variance losing precision. */
  rng_fill(&rng, inp.host, count, 2.0, 4.0);
  rng_fill(&rng, weight.host, channels, 0.5, 1.5);
  rng_fill(&rng, bias.host, channels, -0.5, 0.5);
  rng_fill(&rng, dout.host, count, -1.0, 1.0);
  test_buf *inputs[] = {&inp, &weight, &bias, &dout};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);

  layernorm_ref ref = {rows,
                       channels,
                       to_f64(inp.host, count),
                       to_f64(weight.host, channels),
                       to_f64(bias.host, channels),
                       to_f64(dout.host, count)};
  double *want = malloc((size_t)(count + 2 * rows) * sizeof *want);
  double *want_mean = want + count, *want_rstd = want_mean + rows;
  ref_forward(&ref, want, want_mean, want_rstd);
  CHECK_OK(kernel_layernorm_forward(tb->kb, &out.t, &mean.t, &rstd.t, &inp.t, &weight.t, &bias.t,
                                    &tb->stream));
  tbuf_download(&out);
  tbuf_download(&mean);
  tbuf_download(&rstd);
  check_close("layernorm out", out.host, want, count, TOL_FP32);
  check_close("layernorm mean", mean.host, want_mean, rows, TOL_FP32);
  check_close("layernorm rstd", rstd.host, want_rstd, rows, TOL_FP32);

  layernorm_call call = {tb, &dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd};
  test_buf *grads[] = {&dinp, &dweight, &dbias};
  check_accumulates("layernorm backward", grads, 3, 0, backward, &call);
  check_gradient("layernorm dinp", ref.inp, count, dinp.host, ref_loss, &ref);
  check_gradient("layernorm dweight", ref.weight, channels, dweight.host, ref_loss, &ref);
  check_gradient("layernorm dbias", ref.bias, channels, dbias.host, ref_loss, &ref);

  free(want);
  free(ref.inp);
  free(ref.weight);
  free(ref.bias);
  free(ref.dout);
  test_buf *all[] = {&rstd, &mean, &dbias, &dweight, &bias, &weight, &dinp, &dout, &out, &inp};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

static void body(test_backend *tb) {
  check_layernorm(tb, 2, 5, 12);
  check_layernorm(tb, 2, 3, 130);
}

int main(void) { return test_on_backends("layernorm_test", body); }
