/* buffers_test.c - the whole-buffer ops. Casts: fp32 -> bf16 against a float64 model of
 * round-to-nearest-even (ties, subnormals, overflow to infinity, signed zero, NaN) and within
 * half a bf16 ulp on random values; bf16 -> fp32 against a float64 decoding of the bits. Sum of
 * squares into a device scalar: fp32 and bf16 against float64 sums, added to what the scalar
 * holds, and the same bits with 1 and 2 threads. Sum: against a float64 sum. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* The bf16 value nearest x, ties to even: 8 significant bits, exponents as fp32, spacing 2^-133
 * below the normal range, and infinity past the largest finite bf16. */
static double ref_bf16_round(double x) {
  if (x == 0.0 || isinf(x)) return x;
  int exponent;
  frexp(fabs(x), &exponent); /* |x| = m 2^exponent, m in [0.5, 1) */
  int quantum = exponent - 8 < -133 ? -133 : exponent - 8;
  double y = ldexp(nearbyint(ldexp(fabs(x), -quantum)), quantum); /* the FPU rounds to even */
  if (y > ldexp(255.0 / 128.0, 127)) y = INFINITY;
  return copysign(y, x);
}

/* The value of bf16 bits: sign, 8 exponent bits (bias 127), 7 fraction bits. */
static double ref_bf16_value(uint16_t bits) {
  int exponent = (bits >> 7) & 0xff, fraction = bits & 0x7f;
  double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0xff) return fraction ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * ldexp(fraction, -133);
  return sign * ldexp(128 + fraction, exponent - 134);
}

static void check_cast_to_bf16(test_backend *tb) {
  enum { RANDOM = 1000 };
  static const float special[] = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -2.5f,
                                  0x1.01p+0f /* tie: down to even */,
                                  0x1.03p+0f /* tie: up to even */,
                                  0x1.010002p+0f /* just past a tie: up */,
                                  0x1.fep+127f /* the largest finite bf16 */,
                                  FLT_MAX /* rounds past it: infinity */,
                                  1e-40f /* subnormal */,
                                  FLT_MIN,
                                  -INFINITY,
                                  INFINITY,
                                  NAN};
  enum { SPECIAL = sizeof special / sizeof *special, COUNT = SPECIAL + RANDOM };
  test_rng rng = {81};
  test_buf src = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){COUNT});
  test_buf dst = tbuf_tensor(tb, ST_BF16, 1, (int64_t[]){COUNT});
  float *x = src.host;
  memcpy(x, special, sizeof special);
  /* magnitudes over 2^-30 .. 2^30, both signs */
  for (int i = SPECIAL; i < COUNT; i++) {
    x[i] = (float)(ldexp(rng_uniform(&rng, 1.0, 2.0), rng_below(&rng, 61) - 30) *
                   (rng_below(&rng, 2) ? 1.0 : -1.0));
  }
  tbuf_upload(&src);
  CHECK_OK(kernel_cast(tb->kb, &dst.t, &src.t, &tb->stream));
  tbuf_download(&dst);

  const uint16_t *bits = dst.host;
  float got[COUNT];
  double rounded[COUNT], exact[COUNT];
  int specials_ok = 1;
  for (int i = 0; i < COUNT; i++) {
    got[i] = (float)ref_bf16_value(bits[i]);
    rounded[i] = isnan(x[i]) ? NAN : ref_bf16_round(x[i]);
    exact[i] = x[i];
    /* NaN and infinities are compared here and left out of check_close's differences */
    if (!isfinite(rounded[i])) {
      specials_ok &= isnan(rounded[i]) ? isnan(got[i]) : got[i] == rounded[i];
      got[i] = 0.0f;
      rounded[i] = exact[i] = 0.0;
    }
  }
  CHECK_MSG(specials_ok, "fp32 -> bf16 keeps NaN and infinities, and overflows to infinity");
  const test_tol exact_tol = {0.0, 0.0};
  check_close("fp32 -> bf16 rounds to nearest even", got, rounded, COUNT, exact_tol);
  check_close("fp32 -> bf16 within half an ulp", got + SPECIAL, exact + SPECIAL, RANDOM, TOL_BF16);
  CHECK_MSG(signbit(got[1]) && got[1] == 0.0f, "fp32 -> bf16 keeps -0");
  tbuf_free(&dst);
  tbuf_free(&src);
}

static void check_cast_to_fp32(test_backend *tb) {
  enum { COUNT = 1 << 16 };
  test_buf src = tbuf_tensor(tb, ST_BF16, 2, (int64_t[]){256, 256});
  test_buf dst = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){COUNT});
  uint16_t *bits = src.host;
  for (int i = 0; i < COUNT; i++) bits[i] = (uint16_t)i; /* every bf16 */
  tbuf_upload(&src);
  CHECK_OK(kernel_cast(tb->kb, &dst.t, &src.t, &tb->stream));
  tbuf_download(&dst);
  float *got = dst.host;
  double *want = malloc(COUNT * sizeof *want);
  int specials_ok = 1;
  for (int i = 0; i < COUNT; i++) {
    want[i] = ref_bf16_value(bits[i]);
    if (!isfinite(want[i])) {
      specials_ok &= isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
      got[i] = 0.0f;
      want[i] = 0.0;
    }
  }
  CHECK_MSG(specials_ok, "bf16 -> fp32 keeps NaN and infinities");
  const test_tol exact_tol = {0.0, 0.0};
  check_close("bf16 -> fp32 is exact for all 65536 values", got, want, COUNT, exact_tol);
  free(want);
  tbuf_free(&dst);
  tbuf_free(&src);
}

/* Sum of squares of `count` values (odd, so the 64 slices are uneven), as fp32 and as bf16. */
static void check_sum_squares(test_backend *tb, int64_t count) {
  test_rng rng = {91};
  test_buf x32 = tbuf_tensor(tb, ST_FP32, 1, &count);
  test_buf x16 = tbuf_tensor(tb, ST_BF16, 1, &count);
  float *v = x32.host;
  uint16_t *h = x16.host;
  double want32 = 0.0, want16 = 0.0;
  rng_fill(&rng, v, count, -3.0, 3.0);
  for (int64_t i = 0; i < count; i++) {
    h[i] = bf16_from_f32(v[i]);
    double w = ref_bf16_value(h[i]);
    want32 += (double)v[i] * v[i];
    want16 += w * w;
  }
  tbuf_upload(&x32);
  tbuf_upload(&x16);
  /* got[threads - 1] = {x32's sum, x16's sum, both added into one scalar} */
  int64_t one = 1;
  test_buf sum = tbuf_tensor(tb, ST_FP32, 1, &one);
  float got[2][3];
  for (int threads = 1; threads <= 2; threads++) {
    test_set_threads(threads);
    for (int k = 0; k < 3; k++) {
      tbuf_zero(&sum);
      if (k != 1) CHECK_OK(kernel_sum_squares(tb->kb, &sum.t, &x32.t, &tb->stream));
      if (k != 0) CHECK_OK(kernel_sum_squares(tb->kb, &sum.t, &x16.t, &tb->stream));
      tbuf_download(&sum);
      got[threads - 1][k] = *(const float *)sum.host;
    }
  }
  test_set_threads(1);
  CHECK_NEAR(got[0][0], want32, TOL_SCALAR.rel * want32);
  CHECK_NEAR(got[0][1], want16, TOL_SCALAR.rel * want16);
  CHECK_NEAR(got[0][2], want32 + want16, TOL_SCALAR.rel * (want32 + want16));
  CHECK_MSG(memcmp(got[0], got[1], sizeof got[0]) == 0,
            "sum of squares is bit-identical with 1 and 2 threads (%lld values)", (long long)count);
  tbuf_free(&sum);
  tbuf_free(&x16);
  tbuf_free(&x32);
}

/* kernel_sum of `count` fp32 values of both signs into a scalar that already holds 1.5. */
static void check_sum(test_backend *tb, int64_t count) {
  test_rng rng = {93};
  test_buf x = tbuf_tensor(tb, ST_FP32, 1, &count);
  int64_t one = 1;
  test_buf sum = tbuf_tensor(tb, ST_FP32, 1, &one);
  rng_fill(&rng, x.host, count, -1.0, 3.0);
  double want = 1.5;
  for (int64_t i = 0; i < count; i++) want += ((const float *)x.host)[i];
  *(float *)sum.host = 1.5f;
  tbuf_upload(&x);
  tbuf_upload(&sum);
  CHECK_OK(kernel_sum(tb->kb, &sum.t, &x.t, &tb->stream));
  tbuf_download(&sum);
  CHECK_NEAR(*(const float *)sum.host, want, TOL_SCALAR.rel * fabs(want));
  tbuf_free(&sum);
  tbuf_free(&x);
}

static void body(test_backend *tb) {
  check_cast_to_bf16(tb);
  check_cast_to_fp32(tb);
  check_sum_squares(tb, 5);
  check_sum_squares(tb, 100003);
  check_sum(tb, 7);
  check_sum(tb, 100003);
}

int main(void) { return test_on_backends("buffers_test", body); }
