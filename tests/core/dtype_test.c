/* dtype_test.c - proves the fp32 <-> bf16 / fp16 conversions of core/dtype.h are IEEE round to
 * nearest, ties to even: every half and bf16 bit pattern decodes to the right value and
 * round-trips; every midpoint between neighbouring representable values (and its fp32
 * neighbours) and millions of random fp32 values round as an independent reference says,
 * including subnormals, overflow to infinity, NaN and -0. The reference below works on
 * doubles from the format's parameters alone and never calls the code under test. Also checks
 * dtype_size, dtype_name and dtype_parse. */
#include "core/dtype.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing.h"

/* ---- Independent reference ---------------------------------------------------------------- */

/* A binary floating-point format: `precision` significant bits counting the implicit one,
 * normal exponents emin..emax, 1 + exp_bits + (precision - 1) = 16 bits. */
typedef struct ref_format {
  const char *name;
  int precision;
  int emin;
  int emax;
  int exp_bits;
} ref_format;

static const ref_format FP16 = {"fp16", 11, -14, 15, 5};
static const ref_format BF16 = {"bf16", 8, -126, 127, 8};

static int mant_bits(ref_format f) { return f.precision - 1; }

static int ref_is_nan_bits(uint16_t bits, ref_format f) {
  unsigned exp = (bits >> mant_bits(f)) & ((1u << f.exp_bits) - 1);
  unsigned mant = bits & ((1u << mant_bits(f)) - 1);
  return exp == (1u << f.exp_bits) - 1 && mant != 0;
}

/* A NaN is quiet when the top bit of its significand is set. */
static int ref_is_quiet_nan_bits(uint16_t bits, ref_format f) {
  return ref_is_nan_bits(bits, f) && (bits & (1u << (mant_bits(f) - 1)));
}

static double ref_decode(uint16_t bits, ref_format f) {
  double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  unsigned exp = (bits >> mant_bits(f)) & ((1u << f.exp_bits) - 1);
  unsigned mant = bits & ((1u << mant_bits(f)) - 1);
  if (exp == (1u << f.exp_bits) - 1) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * ldexp((double)mant, f.emin - mant_bits(f));
  return sign * ldexp((double)(mant | (1u << mant_bits(f))), (int)exp - f.emax - mant_bits(f));
}

static double ref_max_finite(ref_format f) {
  return ldexp(2.0 - ldexp(1.0, 1 - f.precision), f.emax);
}

/* x rounded to the format: the two representable neighbours of |x| on the grid of its binade
 * (the subnormal grid below 2^emin), the nearer one, ties to the one with an even significand;
 * a result beyond the largest finite value is infinity (IEEE: round as if the exponent were
 * unbounded, then overflow). Every step is exact in double. */
static double ref_round(double x, ref_format f) {
  if (isnan(x)) return NAN;
  double a = fabs(x);
  if (a == 0.0 || isinf(a)) return x;
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): the leading bit has weight 2^(e-1) */
  int lead = e - 1 < f.emin ? f.emin : e - 1;
  double q = ldexp(1.0, lead - mant_bits(f));
  double lo = floor(a / q) * q;
  double hi = lo + q;
  double r;
  if (a - lo < hi - a) {
    r = lo;
  } else if (a - lo > hi - a) {
    r = hi;
  } else {
    r = fmod(lo / q, 2.0) == 0.0 ? lo : hi;
  }
  if (r > ref_max_finite(f)) r = INFINITY;
  return copysign(r, x);
}

/* ---- Comparison helpers --------------------------------------------------------------------- */

static float float_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t bits_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Equal as values, with the sign of zero; NaN equals NaN. */
static int same_value(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && signbit(got) == signbit(want);
}

/* Counts the failures of one sweep, printing the first few. */
typedef struct sweep {
  const char *name;
  long run;
  long failed;
} sweep;

static void sweep_record(sweep *s, int ok, uint32_t input, uint32_t got, double want) {
  s->run++;
  if (ok) return;
  if (++s->failed <= 8) {
    fprintf(stderr, "  %s: input 0x%08x (%.9g) gave 0x%04x, expected value %.9g\n", s->name,
            (unsigned)input, (double)float_from_bits(input), (unsigned)got, want);
  }
}

static void sweep_finish(const sweep *s) {
  CHECK_MSG(s->failed == 0, "%s: %ld of %ld values wrong", s->name, s->failed, s->run);
}

/* The code under test for format f. */
static uint16_t encode(float x, ref_format f) {
  return f.precision == FP16.precision ? fp16_from_f32(x) : bf16_from_f32(x);
}

static float decode(uint16_t h, ref_format f) {
  return f.precision == FP16.precision ? f32_from_fp16(h) : f32_from_bf16(h);
}

/* Converts x with the code under test and compares with the reference. */
static void check_encode(sweep *s, float x, ref_format f) {
  uint16_t got = encode(x, f);
  double want = ref_round((double)x, f);
  int ok = isnan(x) ? ref_is_quiet_nan_bits(got, f) : same_value(ref_decode(got, f), want);
  sweep_record(s, ok, bits_from_float(x), got, want);
}

/* Converts x, -x and their fp32 neighbours on both sides. */
static void check_encode_around(sweep *s, float x, ref_format f) {
  float values[3] = {nextafterf(x, 0.0f), x, nextafterf(x, INFINITY)};
  for (int i = 0; i < 3; i++) {
    check_encode(s, values[i], f);
    check_encode(s, -values[i], f);
  }
}

/* splitmix64: a fixed sequence, so a failure reproduces. */
static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- The reference checks itself on values worked out by hand --------------------------- */

static void test_reference_sanity(void) {
  CHECK(ref_decode(0x3c00, FP16) == 1.0);
  CHECK(ref_decode(0x7bff, FP16) == 65504.0);
  CHECK(ref_decode(0x0001, FP16) == ldexp(1.0, -24));
  CHECK(ref_decode(0x3f80, BF16) == 1.0);
  CHECK(ref_max_finite(FP16) == 65504.0);
  CHECK(ref_round(65519.0, FP16) == 65504.0);
  CHECK(isinf(ref_round(65520.0, FP16)));
  CHECK(ref_round(1.0 + ldexp(1.0, -11), FP16) == 1.0);                      /* tie, even down */
  CHECK(ref_round(1.0 + 3 * ldexp(1.0, -11), FP16) == 1.0 + ldexp(1.0, -9)); /* tie, even up */
  CHECK(ref_round(ldexp(1.0, -25), FP16) == 0.0);
  CHECK(ref_round(3 * ldexp(1.0, -25), FP16) == ldexp(1.0, -23));
  CHECK(ref_round(1.0 + ldexp(1.0, -8), BF16) == 1.0);
}

/* ---- Decoding and round trips over every 16-bit pattern --------------------------------- */

/* Decodes every 16-bit pattern of f with the code under test, against the reference, and
 * encodes it back: every non-NaN pattern must round-trip, every NaN stay a NaN. */
static void test_every_pattern(ref_format f) {
  char decode_name[64], trip_name[64];
  snprintf(decode_name, sizeof decode_name, "decoding every %s pattern", f.name);
  snprintf(trip_name, sizeof trip_name, "%s: encode(decode(h)) == h", f.name);
  sweep decoded = {decode_name, 0, 0}, trip = {trip_name, 0, 0};
  for (uint32_t h = 0; h <= 0xffffu; h++) {
    float x = decode((uint16_t)h, f);
    double want = ref_decode((uint16_t)h, f);
    sweep_record(&decoded, same_value(x, want), h, bits_from_float(x) >> 16, want);
    uint16_t back = encode(x, f);
    int ok = ref_is_nan_bits((uint16_t)h, f) ? ref_is_nan_bits(back, f) : back == h;
    sweep_record(&trip, ok, h, back, want);
  }
  sweep_finish(&decoded);
  sweep_finish(&trip);
  CHECK_EQ_INT(trip.run, 65536);
}

/* ---- Rounding ------------------------------------------------------------------------------ */

/* Every midpoint between two neighbouring finite values (the last one between the largest
 * finite value and the next power of two, where a tie overflows), with its fp32 neighbours.
 * A midpoint needs one bit more than the format, so it is exact in fp32. */
static void test_every_midpoint(ref_format f) {
  char name[64];
  snprintf(name, sizeof name, "%s midpoints and their neighbours", f.name);
  sweep s = {name, 0, 0};
  uint16_t largest_finite = (uint16_t)((((1u << f.exp_bits) - 1) << mant_bits(f)) - 1);
  for (uint32_t h = 0; h <= largest_finite; h++) {
    double lo = ref_decode((uint16_t)h, f);
    double hi = h == largest_finite ? ldexp(1.0, f.emax + 1) : ref_decode((uint16_t)(h + 1), f);
    float mid = (float)((lo + hi) / 2);
    if (!CHECK_MSG((double)mid == (lo + hi) / 2, "%s midpoint above 0x%04x is not exact", f.name,
                   (unsigned)h)) {
      return;
    }
    check_encode_around(&s, mid, f);
  }
  sweep_finish(&s);
}

static void test_random_values(ref_format f) {
  char name[64];
  snprintf(name, sizeof name, "%s of random fp32 bit patterns", f.name);
  sweep any = {name, 0, 0};
  char near_name[64];
  snprintf(near_name, sizeof near_name, "%s of random fp32 near its range", f.name);
  sweep near = {near_name, 0, 0};
  uint64_t state = 20240520u + (uint64_t)f.precision;
  /* Biased exponents within 16 binades of the format's range, where rounding is subtle. */
  int exp_lo = 127 + f.emin - mant_bits(f) - 16;
  int exp_hi = 127 + f.emax + 16;
  if (exp_lo < 0) exp_lo = 0;
  if (exp_hi > 255) exp_hi = 255;
  for (int i = 0; i < 1000000; i++) {
    uint64_t r = rng_next(&state);
    check_encode(&any, float_from_bits((uint32_t)r), f);
    uint32_t exp = (uint32_t)(exp_lo + (int)((r >> 32) % (uint64_t)(exp_hi - exp_lo + 1)));
    uint32_t u = ((uint32_t)(r >> 63) << 31) | (exp << 23) | ((uint32_t)(r >> 8) & 0x7fffffu);
    check_encode(&near, float_from_bits(u), f);
  }
  sweep_finish(&any);
  sweep_finish(&near);
}

static void test_edge_values(ref_format f) {
  char name[64];
  snprintf(name, sizeof name, "%s of edge values", f.name);
  sweep s = {name, 0, 0};
  const float edges[] = {0.0f,
                         1.0f,
                         0.1f,
                         1.0f / 3.0f,
                         65504.0f,
                         65519.99609375f,
                         65520.0f,
                         65536.0f,
                         6.103515625e-05f,         /* 2^-14, the smallest normal half */
                         5.9604644775390625e-08f,  /* 2^-24, the smallest subnormal half */
                         2.98023223876953125e-08f, /* 2^-25, a tie between 0 and 2^-24 */
                         FLT_MIN,
                         FLT_TRUE_MIN,
                         FLT_MAX,
                         3.3895314e38f, /* the largest finite bf16 */
                         INFINITY};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check_encode_around(&s, edges[i], f);
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u,
                           0xff800001u, 0x7fbfffffu, 0x7fffffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    check_encode(&s, float_from_bits(nans[i]), f);
  }
  sweep_finish(&s);
}

/* A few results written out as bits, readable without the reference. */
static void test_known_bits(void) {
  CHECK_EQ_INT(fp16_from_f32(1.0f), 0x3c00);
  CHECK_EQ_INT(fp16_from_f32(-0.0f), 0x8000);
  CHECK_EQ_INT(fp16_from_f32(65504.0f), 0x7bff);
  CHECK_EQ_INT(fp16_from_f32(65519.99609375f), 0x7bff);
  CHECK_EQ_INT(fp16_from_f32(65520.0f), 0x7c00);
  CHECK_EQ_INT(fp16_from_f32(-1e10f), 0xfc00);
  CHECK_EQ_INT(fp16_from_f32(2.98023223876953125e-08f), 0x0000); /* 2^-25: tie to even 0 */
  CHECK_EQ_INT(fp16_from_f32(8.94069671630859375e-08f), 0x0002); /* 3 * 2^-25: tie to 2 */
  CHECK_EQ_INT(fp16_from_f32(1.00048828125f), 0x3c00);           /* 1 + 2^-11: tie, down */
  CHECK_EQ_INT(fp16_from_f32(1.00146484375f), 0x3c02);           /* 1 + 3 * 2^-11: tie, up */
  CHECK_EQ_INT(bf16_from_f32(1.0f), 0x3f80);
  CHECK_EQ_INT(bf16_from_f32(-0.0f), 0x8000);
  CHECK_EQ_INT(bf16_from_f32(1.00390625f), 0x3f80); /* 1 + 2^-8: tie, down */
  CHECK_EQ_INT(bf16_from_f32(1.01171875f), 0x3f82); /* 1 + 3 * 2^-8: tie, up */
  CHECK_EQ_INT(bf16_from_f32(FLT_MAX), 0x7f80);     /* rounds past the largest bf16 */
  CHECK_EQ_INT(bf16_from_f32(float_from_bits(0x7f800001u)) & 0x7fc0, 0x7fc0); /* stays NaN */
  CHECK(isnan(f32_from_fp16(0x7e00)));
  CHECK(f32_from_fp16(0xfc00) == -INFINITY);
}

static void test_dtype_table(void) {
  CHECK_EQ_INT(dtype_size(ST_FP32), 4);
  CHECK_EQ_INT(dtype_size(ST_BF16), 2);
  CHECK_EQ_INT(dtype_size(ST_FP16), 2);
  CHECK(strcmp(dtype_name(ST_FP32), "fp32") == 0);
  CHECK(strcmp(dtype_name(ST_BF16), "bf16") == 0);
  CHECK(strcmp(dtype_name(ST_FP16), "fp16") == 0);
  CHECK(strcmp(dtype_name(ST_DTYPE_COUNT), "invalid") == 0);
  CHECK(strcmp(dtype_name((st_dtype)-1), "invalid") == 0);

  for (int d = 0; d < ST_DTYPE_COUNT; d++) CHECK_EQ_INT(dtype_parse(dtype_name((st_dtype)d)), d);
  CHECK_EQ_INT(dtype_parse("float32"), ST_FP32);
  CHECK_EQ_INT(dtype_parse("bfloat16"), ST_BF16);
  CHECK_EQ_INT(dtype_parse("float16"), ST_FP16);
  const char *unknown[] = {"", "fp64", "FP32", "bf16 ", "half", "float", "fp"};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    CHECK_MSG(dtype_parse(unknown[i]) == -1, "dtype_parse(\"%s\") accepted", unknown[i]);
  }
}

int main(void) {
  test_reference_sanity();
  test_every_pattern(FP16);
  test_every_pattern(BF16);
  test_every_midpoint(FP16);
  test_every_midpoint(BF16);
  test_random_values(FP16);
  test_random_values(BF16);
  test_edge_values(FP16);
  test_edge_values(BF16);
  test_known_bits();
  test_dtype_table();
  return test_finish("dtype_test");
}
