/* ops_vocab_buffers.c - ops_vocab_test's cases for the whole-buffer ops and the optimizer:
 * cast (fp32 <-> bf16 / fp16 bit for bit against core/dtype.h), scale and the finite check
 * (exact), the sums into a device scalar (float64, and the CPU where it has the dtype) and AdamW
 * (float64 loops, its param output exact). The CPU backend lacks most of these yet, so each is
 * checked against its own reference here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/gpu/ops_pair.h"
#include "tests/testing.h"

/* ---- whole buffers ------------------------------------------------------------------------- */

/* fp32 -> dt on edge cases and random values, and dt -> fp32 on all 65536 bit patterns, bit for
 * bit against core/dtype.h (the CPU backend's conversion); fp32 -> fp32 is a copy. */
void ops_case_cast(pair_env *e, st_dtype dt) {
  enum { RANDOM = 4093, ALL = 65536 };
  static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                   0x7fc00000u, 0xffc00001u, 0x3f808000u, 0x3f818000u,
                                   0x00000001u, 0x007fffffu, 0x7f7fffffu, 0x477ff000u,
                                   0x477fefffu, 0x33800000u, 0x33000001u, 0x38800000u};
  const int64_t n = RANDOM + (int64_t)(sizeof edges / sizeof *edges);
  uint32_t *src = malloc((size_t)n * 4);
  memcpy(src, edges, sizeof edges);
  for (int64_t i = (int64_t)(sizeof edges / sizeof *edges); i < n; i++) {
    float f = (float)(ldexp(pair_uniform(e, 1.0, 2.0), pair_below(e, 60) - 30) *
                      (pair_below(e, 2) ? 1.0 : -1.0));
    memcpy(&src[i], &f, 4);
  }
  const size_t low = dtype_size(dt);
  void *d_src = pair_dev_alloc(e, (size_t)n * 4), *d_dst = pair_dev_alloc(e, (size_t)n * low);
  pair_upload(e, d_src, src, (size_t)n * 4);
  st_tensor ts, td;
  CHECK_OK(tensor_make(&ts, d_src, ST_FP32, ST_DEVICE_CUDA, 1, &n));
  CHECK_OK(tensor_make(&td, d_dst, dt, ST_DEVICE_CUDA, 1, &n));
  CHECK_OK(kernel_cast(e->gpu, &td, &ts, &e->gpu_stream));
  void *got = malloc((size_t)n * low), *want = malloc((size_t)n * low);
  pair_download(e, got, d_dst, (size_t)n * low);
  dtype_convert(want, dt, src, ST_FP32, (size_t)n);
  CHECK_MSG(memcmp(got, want, (size_t)n * low) == 0, "cast: fp32 -> %s differs from core/dtype.h",
            dtype_name(dt));
  mem_free(d_dst);
  mem_free(d_src);
  free(got);
  free(want);
  free(src);
  if (dt == ST_FP32) return;
  /* every 16-bit pattern back to fp32 */
  const int64_t all = ALL;
  uint16_t *bits = malloc(ALL * 2);
  for (int i = 0; i < ALL; i++) bits[i] = (uint16_t)i;
  d_src = pair_dev_alloc(e, ALL * 2);
  d_dst = pair_dev_alloc(e, ALL * 4);
  pair_upload(e, d_src, bits, ALL * 2);
  CHECK_OK(tensor_make(&ts, d_src, dt, ST_DEVICE_CUDA, 1, &all));
  CHECK_OK(tensor_make(&td, d_dst, ST_FP32, ST_DEVICE_CUDA, 1, &all));
  CHECK_OK(kernel_cast(e->gpu, &td, &ts, &e->gpu_stream));
  float *up = malloc(ALL * 4), *up_want = malloc(ALL * 4);
  pair_download(e, up, d_dst, ALL * 4);
  dtype_convert(up_want, ST_FP32, bits, dt, ALL);
  CHECK_MSG(memcmp(up, up_want, ALL * 4) == 0,
            "cast: %s -> fp32 differs from core/dtype.h on some of the 65536 patterns",
            dtype_name(dt));
  mem_free(d_dst);
  mem_free(d_src);
  free(bits);
  free(up);
  free(up_want);
}

/* x *= 0.37 in place on an odd length, through a view one element into the buffer (not 16-byte
 * aligned: the scalar path) and through the aligned buffer; exact against fp32 arithmetic. */
void ops_case_scale(pair_env *e, st_dtype dt) {
  int64_t n = 1003, view_n = n - 1;
  pair x = pair_make(e, dt, 1, &n, -3, 3);
  const float factor = 0.37f;
  st_tensor view;
  CHECK_OK(tensor_make(&view, (char *)x.dev + dtype_size(dt), dt, ST_DEVICE_CUDA, 1, &view_n));
  CHECK_OK(kernel_scale(e->gpu, &x.gpu, factor, &e->gpu_stream));
  CHECK_OK(kernel_scale(e->gpu, &view, factor, &e->gpu_stream));
  float *got = pair_fetch_new(e, &x);
  int exact = 1;
  for (int64_t i = 0; i < n; i++) {
    uint32_t w = 0;
    dtype_store_f32(&w, dt, 0, x.init[i] * factor);
    float once = dtype_load_f32(&w, dt, 0);
    if (i > 0) {
      dtype_store_f32(&w, dt, 0, once * factor);
      once = dtype_load_f32(&w, dt, 0);
    }
    exact &= got[i] == once;
  }
  CHECK_MSG(exact, "scale: x *= %g is fp32 arithmetic rounded to %s", (double)factor,
            dtype_name(dt));
  free(got);
  pair_free(&x);
}

void ops_case_finite_check(pair_env *e, st_dtype dt) {
  int64_t n = 5001, one = 1;
  pair x = pair_make(e, dt, 1, &n, -1000, 1000), flag = pair_make(e, ST_FP32, 1, &one, 0, 0);
  float f = -1;
  CHECK_OK(kernel_finite_check(e->gpu, &flag.gpu, &x.gpu, &e->gpu_stream));
  pair_fetch(e, &flag, &f);
  CHECK_MSG(f == 0.0f, "finite_check: finite values leave the flag at 0, got %g [%s]", (double)f,
            dtype_name(dt));
  const float bad[] = {INFINITY, -INFINITY, NAN};
  for (int k = 0; k < 3; k++) {
    x.init[4999] = bad[k];
    pair_reset(e, &x);
    pair_reset(e, &flag);
    CHECK_OK(kernel_finite_check(e->gpu, &flag.gpu, &x.gpu, &e->gpu_stream));
    pair_fetch(e, &flag, &f);
    CHECK_MSG(f == 1.0f, "finite_check: %g at element 4999 sets the flag, got %g [%s]",
              (double)bad[k], (double)f, dtype_name(dt));
  }
  /* a set flag stays set over finite values */
  x.init[4999] = 1.0f;
  pair_reset(e, &x);
  CHECK_OK(kernel_finite_check(e->gpu, &flag.gpu, &x.gpu, &e->gpu_stream));
  pair_fetch(e, &flag, &f);
  CHECK_MSG(f == 1.0f, "finite_check: a set flag stays set [%s]", dtype_name(dt));
  pair_free(&x);
  pair_free(&flag);
}

/* The step's factors on both backends from the same scalars: the same bits (the CPU's double
 * arithmetic, step_factors_test's hand values being the reference for both), over squared norms
 * from 1e-6 to 1e12, clipped or not, at loss scales 1 and 2^16, and the skips. */
void ops_case_step_factors(pair_env *e, st_dtype dt) {
  (void)dt;
  int64_t one = 1, two = KERNEL_STEP_FACTORS;
  pair sumsq = pair_make(e, ST_FP32, 1, &one, 0, 0), flag = pair_make(e, ST_FP32, 1, &one, 0, 0);
  pair factors = pair_make(e, ST_FP32, 1, &two, 0, 0);
  const double scales[2] = {1.0, 65536.0}, max_norms[3] = {0.0, 1.0, 0.37};
  for (int trial = 0; trial < 64; trial++) {
    const double scale = scales[trial % 2], max_norm = max_norms[trial % 3];
    sumsq.init[0] = trial == 62 ? NAN : (float)(pow(10.0, pair_uniform(e, -6, 12)) * scale * scale);
    flag.init[0] = trial == 63 ? 1.0f : 0.0f;
    pair_reset(e, &sumsq);
    pair_reset(e, &flag);
    CHECK_OK(kernel_step_factors(e->cpu, &factors.cpu, &sumsq.cpu, &flag.cpu, max_norm, scale,
                                 &e->cpu_stream));
    CHECK_OK(kernel_step_factors(e->gpu, &factors.gpu, &sumsq.gpu, &flag.gpu, max_norm, scale,
                                 &e->gpu_stream));
    float got[KERNEL_STEP_FACTORS];
    pair_fetch(e, &factors, got);
    CHECK_MSG(memcmp(got, factors.host, sizeof got) == 0,
              "step_factors: sumsq %g, max %g, scale %g: CUDA {%a, %g}, CPU {%a, %g}",
              (double)sumsq.init[0], max_norm, scale, (double)got[0], (double)got[1],
              (double)factors.host[0], (double)factors.host[1]);
  }
  pair_free(&factors);
  pair_free(&flag);
  pair_free(&sumsq);
}

/* out = 1.5, then out += sum (of squares) twice from the same start: float64 reference (the CPU
 * has no fp16 sum), the same bits both times. */
static void check_sum(pair_env *e, st_dtype dt, int square) {
  const char *op = square ? "sum_squares" : "sum";
  int64_t n = 100003, one = 1;
  pair x = pair_make(e, dt, 1, &n, -1, square ? 1 : 3),
       out = pair_make(e, ST_FP32, 1, &one, 1.5, 1.5);
  double want = 1.5;
  for (int64_t i = 0; i < n; i++) want += square ? (double)x.init[i] * x.init[i] : x.init[i];
  float got[2];
  for (int run = 0; run < 2; run++) {
    pair_reset(e, &out);
    if (square) {
      CHECK_OK(kernel_sum_squares(e->gpu, &out.gpu, &x.gpu, &e->gpu_stream));
    } else {
      CHECK_OK(kernel_sum(e->gpu, &out.gpu, &x.gpu, &e->gpu_stream));
    }
    pair_fetch(e, &out, &got[run]);
  }
  CHECK_MSG(fabs(got[0] - want) <= 2e-6 * fabs(want), "%s: %.9g, expected %.9g [%s]", op,
            (double)got[0], want, dtype_name(dt));
  CHECK_MSG(memcmp(&got[0], &got[1], sizeof got[0]) == 0, "%s: not bit-identical on a second run",
            op);
  /* the CPU backend agrees where it has the dtype */
  if (kernel_supports(e->cpu, square ? KERNEL_OP_SUM_SQUARES : KERNEL_OP_SUM, dt)) {
    pair_reset(e, &out);
    if (square) {
      CHECK_OK(kernel_sum_squares(e->cpu, &out.cpu, &x.cpu, &e->cpu_stream));
    } else {
      CHECK_OK(kernel_sum(e->cpu, &out.cpu, &x.cpu, &e->cpu_stream));
    }
    CHECK_MSG(fabs(got[0] - out.host[0]) <= 4e-6 * fabs(want), "%s: CUDA %.9g, CPU %.9g [%s]", op,
              (double)got[0], (double)out.host[0], dtype_name(dt));
  }
  pair_free(&x);
  pair_free(&out);
}

void ops_case_sum_squares(pair_env *e, st_dtype dt) { check_sum(e, dt, 1); }
void ops_case_sum(pair_env *e, st_dtype dt) { check_sum(e, dt, 0); }

/* ---- AdamW (float64 reference) --------------------------------------------------------------- */

/* Where a step's gradient factor comes from: the step's grad_scale, or the device factors
 * kernel_step_factors writes (train_step's path), applied or saying "skip". */
typedef enum adamw_factors { FACTOR_HOST, FACTOR_DEVICE, FACTOR_DEVICE_SKIP } adamw_factors;

/* One step over n elements covered by `count` segments of shortest length `len` with gaps;
 * grads in dt, params in param_dt (or none). Untouched elements must keep their values; a
 * skipped step touches none. */
static void adamw_run(pair_env *e, st_dtype dt, st_dtype param_dt, int with_param, int count,
                      int64_t len, adamw_factors source) {
  const int64_t n = (len + 4) * (int64_t)count + 5;
  kernel_adamw_segment *segs = malloc((size_t)count * sizeof *segs);
  int64_t at = 1;
  for (int s = 0; s < count; s++) {
    /* segments of len..len+3 elements, gaps of 4..1 */
    segs[s] = (kernel_adamw_segment){at, len + s % 4, s % 3 ? 0.1f : 0.0f};
    at += len + 4;
  }
  pair master = pair_make(e, ST_FP32, 1, &n, -1, 1), m = pair_make(e, ST_FP32, 1, &n, -0.1, 0.1);
  pair v = pair_make(e, ST_FP32, 1, &n, 0, 0.01), grad = pair_make(e, dt, 1, &n, -2, 2);
  pair param = pair_make(e, param_dt, 1, &n, 9, 9);
  /* The device factors carry the 0.5 the reference applies; the step's own grad_scale, which
   * they replace, would give other values. */
  const int64_t two = KERNEL_STEP_FACTORS;
  pair factors = pair_make(e, ST_FP32, 1, &two, 0, 0);
  factors.init[KERNEL_STEP_GRAD_SCALE] = 0.5f;
  factors.init[KERNEL_STEP_SKIP] = source == FACTOR_DEVICE_SKIP ? 1.0f : 0.0f;
  pair_reset(e, &factors);
  const kernel_adamw_step step = {.lr = 1e-2f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .grad_scale = source == FACTOR_HOST ? 0.5f : 3.0f,
                                  .step = 3,
                                  .factors = source == FACTOR_HOST ? NULL : factors.gpu.data};
  CHECK_OK(kernel_adamw(e->gpu, with_param ? &param.gpu : NULL, &master.gpu, &m.gpu, &v.gpu,
                        &grad.gpu, &step, segs, count, &e->gpu_stream));
  double *wp = malloc((size_t)n * sizeof *wp), *wm = malloc((size_t)n * sizeof *wm);
  double *wv = malloc((size_t)n * sizeof *wv), *wparam = malloc((size_t)n * sizeof *wparam);
  for (int64_t i = 0; i < n; i++) {
    wp[i] = master.init[i];
    wm[i] = m.init[i];
    wv[i] = v.init[i];
    wparam[i] = param.init[i];
  }
  const double bc1 = 1.0 - pow(0.9, 3), bc2 = 1.0 - pow(0.95, 3);
  for (int s = 0; s < count && source != FACTOR_DEVICE_SKIP; s++) {
    for (int64_t i = segs[s].begin; i < segs[s].begin + segs[s].count; i++) {
      const double g = (double)grad.init[i] * 0.5;
      double p = wp[i];
      p -= 1e-2 * segs[s].weight_decay * p;
      wm[i] = 0.9 * wm[i] + 0.1 * g;
      wv[i] = 0.95 * wv[i] + 0.05 * g * g;
      p -= 1e-2 * (wm[i] / bc1) / (sqrt(wv[i] / bc2) + 1e-8);
      wp[i] = p;
      wparam[i] = NAN; /* inside a segment: the updated master, rounded (below) */
    }
  }
  static const char *const sources[3] = {"", ", device factors", ", device factors: skipped"};
  char what[128];
  snprintf(what, sizeof what, "%d segments of %lld+, grad %s, param %s%s", count, (long long)len,
           dtype_name(dt), with_param ? dtype_name(param_dt) : "none", sources[source]);
  float *got = pair_fetch_new(e, &master);
  pair_compare(ops_label("adamw", what, ST_FP32), ST_FP32, got, wp, n);
  pair_fetch(e, &m, got);
  pair_compare(ops_label("adamw m", what, ST_FP32), ST_FP32, got, wm, n);
  pair_fetch(e, &v, got);
  pair_compare(ops_label("adamw v", what, ST_FP32), ST_FP32, got, wv, n);
  /* param is exactly CUDA's updated master rounded to the param dtype inside the segments, and
   * untouched (9) outside them or when no param is given */
  float *master_got = pair_fetch_new(e, &master);
  pair_fetch(e, &param, got);
  int param_ok = 1;
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = 0;
    dtype_store_f32(&r, param_dt, 0, master_got[i]);
    const float want = with_param && isnan(wparam[i]) ? dtype_load_f32(&r, param_dt, 0) : 9.0f;
    param_ok &= got[i] == want;
  }
  CHECK_MSG(param_ok, "adamw: param is the updated master rounded to %s, untouched elsewhere (%s)",
            dtype_name(param_dt), what);
  free(master_got);
  free(got);
  free(wp);
  free(wm);
  free(wv);
  free(wparam);
  free(segs);
  pair *all[] = {&master, &m, &v, &grad, &param, &factors};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

/* The kernel's blocks each take 4096 elements of the segments laid end to end and find their
 * first segment by a binary search: the long cases span several blocks, with segment boundaries
 * inside a block and a block starting inside a segment. */
void ops_case_adamw(pair_env *e, st_dtype dt) {
  adamw_run(e, dt, dt, 1, 5, 3, FACTOR_HOST);         /* the table in the launch's parameters */
  adamw_run(e, dt, ST_FP32, 0, 5, 3, FACTOR_HOST);    /* no param written */
  adamw_run(e, dt, ST_BF16, 1, 300, 3, FACTOR_HOST);  /* the table through device memory */
  adamw_run(e, dt, dt, 1, 12, 1000, FACTOR_HOST);     /* ~12k elements: 3 blocks, inline table */
  adamw_run(e, dt, ST_BF16, 1, 100, 97, FACTOR_HOST); /* ~10k elements: 3 blocks, long table */
  /* train_step's path: the factor read from device memory, and a skipped step on both tables */
  adamw_run(e, dt, dt, 1, 12, 1000, FACTOR_DEVICE);
  adamw_run(e, dt, ST_BF16, 1, 100, 97, FACTOR_DEVICE);
  adamw_run(e, dt, dt, 1, 12, 1000, FACTOR_DEVICE_SKIP);
  adamw_run(e, dt, ST_BF16, 1, 100, 97, FACTOR_DEVICE_SKIP);
}
