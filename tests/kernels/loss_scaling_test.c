/* loss_scaling_test.c - the ops of fp16 loss scaling on every backend. Scale: fp32, bf16 and
 * fp16 buffers times a power of two (exact unless the result leaves the format, then the
 * format's rounding: subnormal steps, infinity) and times 1/3 (one fp32 rounding of the exact
 * product, then one to the format), against a float64 model of the rounding; NaN stays NaN.
 * Finite check: each dtype, a single inf, -inf or NaN at the first, a middle or the last
 * element raises the flag; finite buffers (largest finite values, subnormals, -0) leave it
 * as it was, 0 stays 0 and 1 stays 1. */
#include <math.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

enum { N = 1001 }; /* odd: the CPU splits the loop between threads unevenly */

/* x (random values of magnitudes 2^-20 .. 2^20 rounded to the dtype, and a NaN) times
 * `factor`, in place. */
static void check_scale(test_backend *tb, st_dtype dtype, float factor) {
  test_rng rng = {7};
  test_buf x = tbuf_tensor(tb, dtype, 1, (int64_t[]){N});
  double before[N], want[N];
  for (int i = 0; i < N; i++) {
    double v = ldexp(rng_uniform(&rng, 1.0, 2.0), rng_below(&rng, 41) - 20);
    before[i] = i == N / 2 ? NAN : ref_round(dtype, rng_below(&rng, 2) ? v : -v);
    dtype_store_f32(x.host, dtype, (size_t)i, (float)before[i]); /* exact: already rounded */
    /* the exact product rounded to fp32 (the op's arithmetic), then to the dtype */
    want[i] = ref_round(dtype, (double)(float)(before[i] * factor));
  }
  tbuf_upload(&x);
  CHECK_OK(kernel_scale(tb->kb, &x.t, factor, &tb->stream));
  tbuf_download(&x);
  int same = 1, worst = -1;
  for (int i = 0; i < N; i++) {
    const double got = dtype_load_f32(x.host, dtype, (size_t)i);
    const int ok = isnan(want[i]) ? isnan(got) : got == want[i];
    if (!ok && worst < 0) worst = i;
    same &= ok;
  }
  CHECK_MSG(same, "scale %s by %g: element %d is %g, expected %g", dtype_name(dtype),
            (double)factor, worst, worst < 0 ? 0.0 : dtype_load_f32(x.host, dtype, (size_t)worst),
            worst < 0 ? 0.0 : want[worst]);
  tbuf_free(&x);
}

/* The flag after a finite check of x from flag value `start`. */
static float flag_after(test_backend *tb, test_buf *x, test_buf *flag, float start) {
  *(float *)flag->host = start;
  tbuf_upload(flag);
  tbuf_upload(x);
  CHECK_OK(kernel_finite_check(tb->kb, &flag->t, &x->t, &tb->stream));
  tbuf_download(flag);
  return *(const float *)flag->host;
}

static void check_finite(test_backend *tb, st_dtype dtype) {
  const char *name = dtype_name(dtype);
  const double max = ref_max_finite(dtype);
  const double tiny = dtype == ST_FP32 ? 0x1p-149 : ref_half_value(dtype, 1);
  test_rng rng = {11};
  test_buf x = tbuf_tensor(tb, dtype, 1, (int64_t[]){N});
  test_buf flag = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){1});
  for (int i = 0; i < N; i++) {
    dtype_store_f32(x.host, dtype, (size_t)i, (float)ref_round(dtype, rng_uniform(&rng, -4, 4)));
  }
  dtype_store_f32(x.host, dtype, 1, (float)max);
  dtype_store_f32(x.host, dtype, 2, (float)-max);
  dtype_store_f32(x.host, dtype, 3, (float)tiny);
  dtype_store_f32(x.host, dtype, 4, -0.0f);
  CHECK_MSG(flag_after(tb, &x, &flag, 0.0f) == 0.0f, "%s: a finite buffer leaves the flag 0", name);
  CHECK_MSG(flag_after(tb, &x, &flag, 1.0f) == 1.0f, "%s: a finite buffer leaves the flag 1", name);
  const float bad[3] = {INFINITY, -INFINITY, NAN};
  const int where[3] = {0, N / 2, N - 1};
  for (int b = 0; b < 3; b++) {
    for (int w = 0; w < 3; w++) {
      const float keep = dtype_load_f32(x.host, dtype, (size_t)where[w]);
      dtype_store_f32(x.host, dtype, (size_t)where[w], bad[b]);
      CHECK_MSG(flag_after(tb, &x, &flag, 0.0f) == 1.0f, "%s: %g at element %d raises the flag",
                name, (double)bad[b], where[w]);
      dtype_store_f32(x.host, dtype, (size_t)where[w], keep);
    }
  }
  tbuf_free(&flag);
  tbuf_free(&x);
}

static void body(test_backend *tb) {
  const st_dtype dtypes[3] = {ST_FP32, ST_BF16, ST_FP16};
  for (int d = 0; d < 3; d++) {
    /* the loss scaler's factors: unscaling by the initial scale, and a scale that overflows
     * fp16 (values up to 2^20 times 2^16) but not bf16 or fp32 */
    check_scale(tb, dtypes[d], 0x1p-16f);
    check_scale(tb, dtypes[d], 0x1p16f);
    check_scale(tb, dtypes[d], 1.0f / 3.0f);
    check_finite(tb, dtypes[d]);
  }
}

int main(void) { return test_on_backends("loss_scaling_test", body); }
