/* step_factors_test.c - the step's factors on every backend (kernels.h's kernel_step_factors),
 * against numbers worked out by hand, and AdamW reading them from device memory:
 *   - clipping inactive (norm 0.5 under max 1) gives 1; active (norm 4 under max 1) gives
 *     1 / 4.000001 = 0.2499999375..., whose nearest fp32 is 0.25 - 4 * 2^-26 = 0x1.fffff8p-3;
 *     with loss scale 2^16 (sumsq 2^36, the same unscaled norm) that factor times 2^-16 exactly;
 *     no clipping (max 0) at scale 2 gives 1/2;
 *   - the overflow flag, a NaN and an infinite sum of squares each set skip, factor 0;
 *   - a loss scale that is not positive, or a factors tensor of one element, is refused;
 *   - kernel_adamw with factors {f, 0} gives the bits of the host's grad_scale f, and with
 *     skip set leaves the parameters, master weights and moments untouched. */
#include <math.h>
#include <string.h>

#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

typedef struct factors_io {
  test_buf factors, sumsq, flag;
} factors_io;

/* Runs the op from (sumsq, flag) and returns the factors it wrote in out[2]. */
static st_status run_factors(test_backend *tb, factors_io *io, float sumsq, float flag,
                             double max_norm, double loss_scale, float out[2]) {
  *(float *)io->sumsq.host = sumsq;
  *(float *)io->flag.host = flag;
  const float stale[2] = {-7.0f, -7.0f}; /* the op must overwrite both */
  memcpy(io->factors.host, stale, sizeof stale);
  tbuf_upload(&io->sumsq);
  tbuf_upload(&io->flag);
  tbuf_upload(&io->factors);
  st_status status = kernel_step_factors(tb->kb, &io->factors.t, &io->sumsq.t, &io->flag.t,
                                         max_norm, loss_scale, &tb->stream);
  tbuf_download(&io->factors);
  memcpy(out, io->factors.host, 2 * sizeof *out);
  return status;
}

static void expect(test_backend *tb, factors_io *io, float sumsq, float flag, double max_norm,
                   double loss_scale, float grad_scale, float skip) {
  float got[2];
  CHECK_OK(run_factors(tb, io, sumsq, flag, max_norm, loss_scale, got));
  CHECK_MSG(got[KERNEL_STEP_GRAD_SCALE] == grad_scale && got[KERNEL_STEP_SKIP] == skip,
            "sumsq %g flag %g max %g scale %g: factors {%a, %g}, expected {%a, %g}", (double)sumsq,
            (double)flag, max_norm, loss_scale, (double)got[0], (double)got[1], (double)grad_scale,
            (double)skip);
}

static void check_factors(test_backend *tb) {
  factors_io io = {tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){2}),
                   tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){1}),
                   tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){1})};
  expect(tb, &io, 0.25f, 0.0f, 1.0, 1.0, 1.0f, 0.0f);                  /* norm 0.5: no clip */
  expect(tb, &io, 16.0f, 0.0f, 1.0, 1.0, 0x1.fffff8p-3f, 0.0f);        /* norm 4: clipped */
  expect(tb, &io, 0x1p36f, 0.0f, 1.0, 65536.0, 0x1.fffff8p-19f, 0.0f); /* the same, scaled */
  expect(tb, &io, 64.0f, 0.0f, 0.0, 2.0, 0.5f, 0.0f);                  /* no clipping */
  expect(tb, &io, 16.0f, 1.0f, 1.0, 65536.0, 0.0f, 1.0f);              /* overflow flag */
  expect(tb, &io, NAN, 0.0f, 1.0, 1.0, 0.0f, 1.0f);                    /* a NaN gradient */
  expect(tb, &io, INFINITY, 0.0f, 0.0, 65536.0, 0.0f, 1.0f);           /* past fp32's range */
  float got[2];
  CHECK_STATUS(run_factors(tb, &io, 1.0f, 0.0f, 1.0, 0.0, got), ST_ERR_INVALID_ARG);
  test_buf one = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){1});
  CHECK_STATUS(kernel_step_factors(tb->kb, &one.t, &io.sumsq.t, &io.flag.t, 1.0, 1.0, &tb->stream),
               ST_ERR_INVALID_ARG);
  tbuf_free(&one);
  tbuf_free(&io.flag);
  tbuf_free(&io.sumsq);
  tbuf_free(&io.factors);
}

enum { N = 37, STATES = 4 }; /* param, master, m, v */

/* AdamW step 3 over N elements (two segments, one with decay) from fixed states, grad_scale
 * from the host (factors NULL) or from `factors` in device memory; the states after it in
 * out[STATES][N]. */
static void adamw_once(test_backend *tb, const float *factors, float grad_scale,
                       float out[STATES][N]) {
  test_rng rng = {5};
  test_buf states[STATES], grad = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){N});
  for (int k = 0; k < STATES; k++) {
    states[k] = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){N});
    rng_fill(&rng, states[k].host, N, k == 3 ? 0.0 : -1.0, 1.0); /* v >= 0 */
    tbuf_upload(&states[k]);
  }
  rng_fill(&rng, grad.host, N, -2.0, 2.0);
  tbuf_upload(&grad);
  const kernel_adamw_segment segments[2] = {{0, 20, 0.1f}, {24, 13, 0.0f}};
  const kernel_adamw_step step = {1e-2f, 0.9f, 0.95f, 1e-8f, grad_scale, 3, factors};
  CHECK_OK(kernel_adamw(tb->kb, &states[0].t, &states[1].t, &states[2].t, &states[3].t, &grad.t,
                        &step, segments, 2, &tb->stream));
  for (int k = 0; k < STATES; k++) {
    tbuf_download(&states[k]);
    memcpy(out[k], states[k].host, sizeof out[k]);
    tbuf_free(&states[k]);
  }
  tbuf_free(&grad);
}

static void check_adamw_reads_factors(test_backend *tb) {
  test_buf factors = tbuf_tensor(tb, ST_FP32, 1, (int64_t[]){2});
  float host_scale[STATES][N], device_scale[STATES][N], skipped[STATES][N], before[STATES][N];
  adamw_once(tb, NULL, 0.375f, host_scale);
  ((float *)factors.host)[KERNEL_STEP_GRAD_SCALE] = 0.375f;
  tbuf_upload(&factors);
  adamw_once(tb, factors.device, 123.0f, device_scale); /* the host's factor is ignored */
  CHECK_MSG(memcmp(host_scale, device_scale, sizeof host_scale) == 0,
            "AdamW with the device's factor differs from the host's");
  ((float *)factors.host)[KERNEL_STEP_SKIP] = 1.0f;
  tbuf_upload(&factors);
  adamw_once(tb, factors.device, 0.375f, skipped);
  /* the states before the call, regenerated from adamw_once's seed */
  test_rng rng = {5};
  for (int k = 0; k < STATES; k++) rng_fill(&rng, before[k], N, k == 3 ? 0.0 : -1.0, 1.0);
  CHECK_MSG(memcmp(skipped, before, sizeof before) == 0, "a skipped AdamW changed its states");
  tbuf_free(&factors);
}

static void body(test_backend *tb) {
  check_factors(tb);
  check_adamw_reads_factors(tb);
}

int main(void) { return test_on_backends("step_factors_test", body); }
