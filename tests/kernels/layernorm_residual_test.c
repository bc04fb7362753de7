/* layernorm_residual_test.c - the residual add fused with the LayerNorm after it, on odd sizes
 * ([2, 5, 12]) and wider than two of the CPU's column blocks ([2, 3, 130]): residual = a + b is
 * written exactly (the fp32 sum, rounded once), and out, mean and rstd are the float64
 * LayerNorm of that residual; into a separate buffer, in place over a, and in place over b. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* out, mean and rstd of the LayerNorm of x's rows (float64, biased variance, eps 1e-5). */
static void ref_layernorm(const double *x, const double *w, const double *b, int64_t rows,
                          int64_t C, double *out, double *mean, double *rstd) {
  for (int64_t n = 0; n < rows; n++) {
    const double *row = x + n * C;
    double m = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; c++) m += row[c] / C;
    for (int64_t c = 0; c < C; c++) var += (row[c] - m) * (row[c] - m) / C;
    const double s = 1.0 / sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; c++) out[n * C + c] = (row[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

typedef enum { INTO_SEPARATE, INTO_A, INTO_B } residual_target;

static void check_fused(test_backend *tb, int64_t batch, int64_t seq, int64_t C,
                        residual_target target) {
  static const char *const names[] = {"separate", "in place over a", "in place over b"};
  test_rng rng = {(uint64_t)(C * 4 + target)};
  const int64_t rows = batch * seq, count = rows * C;
  int64_t act[] = {batch, seq, C}, stat[] = {batch, seq};
  test_buf a = tbuf_tensor(tb, ST_FP32, 3, act), b = tbuf_tensor(tb, ST_FP32, 3, act);
  test_buf res = tbuf_tensor(tb, ST_FP32, 3, act), out = tbuf_tensor(tb, ST_FP32, 3, act);
  test_buf weight = tbuf_tensor(tb, ST_FP32, 1, &C), bias = tbuf_tensor(tb, ST_FP32, 1, &C);
  test_buf mean = tbuf_tensor(tb, ST_FP32, 2, stat), rstd = tbuf_tensor(tb, ST_FP32, 2, stat);
  /* The stream (mean ~3) and a branch (mean 0): the sum keeps a large mean against its spread. */
  rng_fill(&rng, a.host, count, 2.0, 4.0);
  rng_fill(&rng, b.host, count, -1.0, 1.0);
  rng_fill(&rng, weight.host, C, 0.5, 1.5);
  rng_fill(&rng, bias.host, C, -0.5, 0.5);
  rng_fill(&rng, res.host, count, 5.0, 9.0); /* garbage the op must overwrite */
  test_buf *inputs[] = {&a, &b, &weight, &bias, &res};
  for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) tbuf_upload(inputs[i]);

  /* The residual as fp32 rounds it, then the float64 LayerNorm of exactly those values. */
  double *sum = malloc((size_t)(3 * count + 2 * rows) * sizeof *sum);
  double *want = sum + count, *want_mean = want + count, *want_rstd = want_mean + rows;
  double *w = to_f64(weight.host, C), *bb = to_f64(bias.host, C);
  const float *x = a.host, *y = b.host;
  for (int64_t i = 0; i < count; i++) sum[i] = (float)((double)x[i] + y[i]);
  ref_layernorm(sum, w, bb, rows, C, want, want_mean, want_rstd);

  test_buf *residual = target == INTO_A ? &a : target == INTO_B ? &b : &res;
  CHECK_OK(kernel_layernorm_residual_forward(tb->kb, &residual->t, &out.t, &mean.t, &rstd.t, &a.t,
                                             &b.t, &weight.t, &bias.t, &tb->stream));
  test_buf *results[] = {residual, &out, &mean, &rstd};
  for (size_t i = 0; i < sizeof results / sizeof *results; i++) tbuf_download(results[i]);
  const test_tol exact = {0.0, 0.0};
  char label[96];
  snprintf(label, sizeof label, "layernorm_residual residual (%s)", names[target]);
  check_close(label, residual->host, sum, count, exact);
  snprintf(label, sizeof label, "layernorm_residual out (%s)", names[target]);
  check_close(label, out.host, want, count, TOL_FP32);
  snprintf(label, sizeof label, "layernorm_residual mean (%s)", names[target]);
  check_close(label, mean.host, want_mean, rows, TOL_FP32);
  snprintf(label, sizeof label, "layernorm_residual rstd (%s)", names[target]);
  check_close(label, rstd.host, want_rstd, rows, TOL_FP32);

  free(bb);
  free(w);
  free(sum);
  test_buf *all[] = {&rstd, &mean, &bias, &weight, &out, &res, &b, &a};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tbuf_free(all[i]);
}

static void body(test_backend *tb) {
  for (int target = INTO_SEPARATE; target <= INTO_B; target++) {
    check_fused(tb, 2, 5, 12, (residual_target)target);
    check_fused(tb, 2, 3, 130, (residual_target)target);
  }
}

int main(void) { return test_on_backends("layernorm_residual_test", body); }
