/* buffers_test.c - the whole-buffer ops. Casts: fp32 -> bf16 and fp16 against a float64 model
 * of round-to-nearest-even (ties, subnormals, overflow to infinity, signed zero, NaN) and
 * within half an ulp on random values; bf16 and fp16 -> fp32 against a float64 decoding of
 * the bits, for all 65536 of them. Sum of squares into a device scalar: fp32, bf16 and fp16
 * against float64 sums, added to what the scalar holds, and the same bits with 1 and 2
 * threads. Sum: against a float64 sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

/* fp32 -> the format: specials (signed zeros, ties both ways, the largest finite value and the
 * first value that rounds past it, subnormals, infinities, NaN) exactly, and random values of
 * magnitudes 2^-30 .. 2^30 both exactly and within half an ulp. */
static void check_cast_down(test_backend *tb, st_dtype f) {
  enum { RANDOM = 1000, SPECIAL = 16, COUNT = SPECIAL + RANDOM };
  const int fraction_bits = f == ST_BF16 ? 7 : 10;
  const double max = ref_max_finite(f), ulp = ldexp(1.0, -fraction_bits);
  const double top_ulp = max * ulp / (2.0 - ulp); /* the spacing just below max */
  const double lowest = ref_half_value(f, 1);     /* the smallest subnormal */
  const float special[SPECIAL] = {0.0f,
                                  -0.0f,
                                  1.0f,
                                  -2.5f,
                                  (float)(1.0 + ulp / 2) /* tie: down to even */,
                                  (float)(1.0 + 3 * ulp / 2) /* tie: up to even */,
                                  (float)(1.0 + ulp / 2 + ulp / 64) /* past a tie: up */,
                                  (float)max,
                                  (float)(max + top_ulp / 4) /* rounds down to max */,
                                  (float)(max + top_ulp / 2) /* halfway past: infinity */,
                                  (float)(3 * lowest) /* subnormal */,
                                  (float)(lowest / 2) /* tie with zero: 0 */,
                                  (float)(lowest * 0.75) /* up to the smallest subnormal */,
                                  -INFINITY,
                                  INFINITY,
                                  NAN};
  test_rng rng = {81};
  test_buf src = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){COUNT});
  test_buf dst = tbuf_tensor(tb, f, 1, (int64_t[]){COUNT});
  float *x = src.host;
  memcpy(x, special, sizeof special);
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
  int specials_ok = 1, in_range = 0;
  for (int i = 0; i < COUNT; i++) {
    got[i] = (float)ref_half_value(f, bits[i]);
    rounded[i] = isnan(x[i]) ? NAN : ref_round(f, x[i]);
    /* within half an ulp: values in the format's normal range only */
    const int normal = fabs(x[i]) >= ldexp(lowest, fraction_bits) && fabs(x[i]) <= max;
    exact[i] = normal ? x[i] : rounded[i];
    in_range += i >= SPECIAL && normal;
    /* NaN and infinities are compared here and left out of check_close's differences */
    if (!isfinite(rounded[i])) {
      specials_ok &= isnan(rounded[i]) ? isnan(got[i]) : got[i] == rounded[i];
      got[i] = 0.0f;
      rounded[i] = exact[i] = 0.0;
    }
  }
  const char *name = dtype_name(f);
  CHECK_MSG(specials_ok, "fp32 -> %s keeps NaN and infinities, and overflows to infinity", name);
  const test_tol exact_tol = {0.0, 0.0}, half_ulp = {0.0, ulp / 2};
  CHECK_MSG(check_close("fp32 -> half rounds to nearest even", got, rounded, COUNT, exact_tol),
            "%s", name);
  CHECK_MSG(check_close("fp32 -> half within half an ulp", got, exact, COUNT, half_ulp), "%s",
            name);
  CHECK_MSG(in_range > RANDOM / 4, "%d random values in %s's normal range", in_range, name);
  CHECK_MSG(got[8] == (float)max && bits[9] == bits[14], "%s: max + ulp/4 -> max, + ulp/2 -> inf",
            name);
  CHECK_MSG(signbit(got[1]) && got[1] == 0.0f, "fp32 -> %s keeps -0", name);
  tbuf_free(&dst);
  tbuf_free(&src);
}

/* Every one of the format's 65536 values -> fp32, against a float64 decoding of the bits. */
static void check_cast_up(test_backend *tb, st_dtype f) {
  enum { COUNT = 1 << 16 };
  test_buf src = tbuf_tensor(tb, f, 2, (int64_t[]){256, 256});
  test_buf dst = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){COUNT});
  uint16_t *bits = src.host;
  for (int i = 0; i < COUNT; i++) bits[i] = (uint16_t)i;
  tbuf_upload(&src);
  CHECK_OK(kernel_cast(tb->kb, &dst.t, &src.t, &tb->stream));
  tbuf_download(&dst);
  float *got = dst.host;
  double *want = malloc(COUNT * sizeof *want);
  int specials_ok = 1;
  for (int i = 0; i < COUNT; i++) {
    want[i] = ref_half_value(f, bits[i]);
    if (!isfinite(want[i])) {
      specials_ok &= isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
      got[i] = 0.0f;
      want[i] = 0.0;
    }
  }
  CHECK_MSG(specials_ok, "%s -> fp32 keeps NaN and infinities", dtype_name(f));
  const test_tol exact_tol = {0.0, 0.0};
  CHECK_MSG(check_close("half -> fp32 is exact for all 65536 values", got, want, COUNT, exact_tol),
            "%s", dtype_name(f));
  free(want);
  tbuf_free(&dst);
  tbuf_free(&src);
}

/* Sum of squares of `count` values (odd, so the 64 slices are uneven), as fp32, bf16 and fp16
 * (each rounded from the same fp32 values, the reference summing the rounded values). */
static void check_sum_squares(test_backend *tb, int64_t count) {
  enum { KINDS = 3 };
  const st_dtype dtypes[KINDS] = {ST_FP32, ST_BF16, ST_FP16};
  test_rng rng = {91};
  test_buf x[KINDS];
  double want[KINDS + 1] = {0};
  for (int k = 0; k < KINDS; k++) {
    x[k] = tbuf_tensor(tb, dtypes[k], 1, &count);
  }
  float *v = x[0].host;
  rng_fill(&rng, v, count, -3.0, 3.0);
  for (int64_t i = 0; i < count; i++) {
    want[0] += (double)v[i] * v[i];
    for (int k = 1; k < KINDS; k++) {
      const double r = ref_round(dtypes[k], v[i]);
      dtype_store_f32(x[k].host, dtypes[k], (size_t)i, (float)r);
      want[k] += r * r;
    }
  }
  want[KINDS] = want[0] + want[1] + want[2];
  for (int k = 0; k < KINDS; k++) tbuf_upload(&x[k]);
  /* got[threads - 1] = {each kind's sum, all of them added into one scalar} */
  int64_t one = 1;
  test_buf sum = tbuf_tensor(tb, ST_FP32, 1, &one);
  float got[2][KINDS + 1];
  for (int threads = 1; threads <= 2; threads++) {
    test_set_threads(threads);
    for (int k = 0; k <= KINDS; k++) {
      tbuf_zero(&sum);
      for (int j = 0; j < KINDS; j++) {
        if (k == j || k == KINDS)
          CHECK_OK(kernel_sum_squares(tb->kb, &sum.t, &x[j].t, &tb->stream));
      }
      tbuf_download(&sum);
      got[threads - 1][k] = *(const float *)sum.host;
    }
  }
  test_set_threads(1);
  for (int k = 0; k <= KINDS; k++) CHECK_NEAR(got[0][k], want[k], TOL_SCALAR.rel * want[k]);
  CHECK_MSG(memcmp(got[0], got[1], sizeof got[0]) == 0,
            "sum of squares is bit-identical with 1 and 2 threads (%lld values)", (long long)count);
  tbuf_free(&sum);
  for (int k = KINDS - 1; k >= 0; k--) tbuf_free(&x[k]);
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
  check_cast_down(tb, ST_BF16);
  check_cast_down(tb, ST_FP16);
  check_cast_up(tb, ST_BF16);
  check_cast_up(tb, ST_FP16);
  check_sum_squares(tb, 5);
  check_sum_squares(tb, 100003);
  check_sum(tb, 7);
  check_sum(tb, 100003);
}

int main(void) { return test_on_backends("buffers_test", body); }
