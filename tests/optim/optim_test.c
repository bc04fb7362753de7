/* optim_test.c - learning-rate schedules against formulas written here. (AdamW's arithmetic and
 * the clipping coefficient are the kernel backend's: tests/kernels/adamw_test.c and
 * step_factors_test.c; their use on a unit's owned range: tests/sharding and tests/train.) */
#include <math.h>

#include "optim/lr_schedule.h"
#include "tests/testing.h"

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
  test_schedule();
  return test_finish("optim_test");
}
