/* optim_test.c - AdamW, clipping and learning-rate schedules against independent float64
 * formulas written here (PyTorch's AdamW algorithm as documented), over several steps so that
 * bias correction and moment accumulation are exercised, with and without weight decay and
 * with a clipping scale, on an odd length, with fp32 and bf16 gradients. */
#include <math.h>
#include <stdlib.h>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/lr_schedule.h"
#include "tests/testing.h"

enum { N = 37, STEPS = 4 };

static void reference_adamw(int step, double lr, double wd, double scale, double *p,
                            const double *g, double *m, double *v) {
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
  for (int i = 0; i < N; i++) {
    double gi = g[i] * scale;
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    double mhat = m[i] / (1 - pow(b1, step)), vhat = v[i] / (1 - pow(b2, step));
    p[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

/* Runs STEPS AdamW steps on N elements against the float64 reference. With bf16 gradients the
 * reference sees the same bf16-rounded gradients (the dtype is storage only: the update is
 * computed in fp32), and the bf16 parameters written alongside must be the master rounded. */
static void test_adamw(double wd, double scale, st_dtype grad_dtype) {
  float p[N], g[N], m[N] = {0}, v[N] = {0};
  uint16_t g16[N], p16[N];
  double pr[N], gr[N], mr[N] = {0}, vr[N] = {0};
  srand(7);
  for (int i = 0; i < N; i++) pr[i] = p[i] = (float)(rand() / (double)RAND_MAX - 0.5);
  adamw_hparams h = ADAMW_HPARAMS_DEFAULT;
  const int low = grad_dtype == ST_BF16;
  adamw_range r = {.master = p, .m = m, .v = v, .grad_dtype = grad_dtype, .n = N};
  r.grad = low ? (const void *)g16 : (const void *)g;
  r.param = low ? p16 : NULL;
  r.param_dtype = ST_BF16;
  for (int step = 1; step <= STEPS; step++) {
    for (int i = 0; i < N; i++) {
      g[i] = (float)((rand() / (double)RAND_MAX - 0.5) * 1e-2);
      g16[i] = bf16_from_f32(g[i]);
      gr[i] = low ? f32_from_bf16(g16[i]) : g[i];
    }
    double lr = 1e-3 * step;
    CHECK_OK(adamw_update(&h, step, (float)lr, (float)wd, (float)scale, &r));
    reference_adamw(step, lr, wd, scale, pr, gr, mr, vr);
  }
  double worst = 0;
  for (int i = 0; i < N; i++) {
    worst = fmax(worst, fabs(p[i] - pr[i]) / fmax(fabs(pr[i]), 1e-3));
    if (low)
      CHECK_MSG(p16[i] == bf16_from_f32(p[i]), "bf16 parameter %d is not the master rounded", i);
  }
  CHECK_MSG(worst < 1e-5, "AdamW wd=%g scale=%g %s gradients: worst relative error %g", wd, scale,
            dtype_name(grad_dtype), worst);
  CHECK_STATUS(adamw_update(&h, 0, 1e-3f, 0, 1, &r), ST_ERR_INVALID_ARG);
}

static void test_clip(void) {
  CHECK_NEAR(clip_scale(0.5, 1.0), 1.0, 0);
  CHECK_NEAR(clip_scale(4.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-7);
  CHECK_NEAR(clip_scale(100.0, 0.0), 1.0, 0);
}

static void test_schedule(void) {
  lr_schedule s = {LR_COSINE, 1e-3, 1e-4, 10, 111}; /* 100 decay steps after warmup */
  CHECK_OK(lr_schedule_check(&s));
  CHECK_NEAR(lr_at(&s, 0), 1e-4, 1e-12);    /* (0 + 1) / 10 of the peak */
  CHECK_NEAR(lr_at(&s, 9), 1e-3, 1e-12);    /* end of warmup */
  CHECK_NEAR(lr_at(&s, 10), 1e-3, 1e-12);   /* cosine starts at the peak */
  CHECK_NEAR(lr_at(&s, 60), 5.5e-4, 1e-12); /* half way: the mean of peak and floor */
  CHECK_NEAR(lr_at(&s, 110), 1e-4, 1e-12);  /* the last step reaches the floor */
  CHECK_NEAR(lr_at(&s, 35), 1e-4 + 0.5 * (1 + cos(M_PI * 0.25)) * 9e-4, 1e-12);
  s.shape = LR_CONSTANT;
  CHECK_NEAR(lr_at(&s, 80), 1e-3, 1e-12);
  CHECK_EQ_INT(lr_shape_parse("cosine"), LR_COSINE);
  CHECK_EQ_INT(lr_shape_parse("linear"), -1);
  lr_schedule bad = {LR_COSINE, 1e-3, 2e-3, 0, 10};
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
  bad.min_lr = 0;
  bad.total_steps = 0;
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
}

int main(void) {
  test_adamw(0.0, 1.0, ST_FP32);
  test_adamw(0.1, 0.25, ST_FP32);
  test_adamw(0.1, 0.25, ST_BF16);
  test_clip();
  test_schedule();
  return test_finish("optim_test");
}
