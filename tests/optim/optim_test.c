/* optim_test.c - learning-rate schedules (constant, cosine, linear, wsd) against formulas
 * written here. (AdamW's arithmetic and the clipping coefficient are the kernel backend's:
 * tests/kernels/adamw_test.c and step_factors_test.c; their use on a unit's owned range:
 * tests/sharding and tests/train.) */
#include <math.h>
#include <string.h>

#include "optim/lr_schedule.h"
#include "tests/testing.h"

static void test_schedule(void) {
  lr_schedule s = {LR_COSINE, 1e-3, 1e-4, 10, 111, 0}; /* 100 decay steps after warmup */
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
  CHECK_EQ_INT(lr_shape_parse("exponential"), -1);
  lr_schedule bad = {LR_COSINE, 1e-3, 2e-3, 0, 10, 0};
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
  bad.min_lr = 0;
  bad.total_steps = 0;
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
}

/* Linear: the straight line from the peak after the warmup to the floor at the last step. */
static void test_linear(void) {
  lr_schedule s = {LR_LINEAR, 1e-3, 1e-4, 10, 111, 0};
  CHECK_OK(lr_schedule_check(&s));
  CHECK_NEAR(lr_at(&s, 9), 1e-3, 1e-12);
  CHECK_NEAR(lr_at(&s, 10), 1e-3, 1e-12);
  CHECK_NEAR(lr_at(&s, 35), 1e-4 + 0.75 * 9e-4, 1e-12); /* a quarter of the way */
  CHECK_NEAR(lr_at(&s, 110), 1e-4, 1e-12);
  CHECK_EQ_INT(lr_shape_parse("linear"), LR_LINEAR);
}

/* Warmup-stable-decay: 111 steps, warmup 10, the last 20 decaying after step 90 along
 * 1 - sqrt(progress). */
static void test_wsd(void) {
  lr_schedule s = {LR_WSD, 1e-3, 1e-4, 10, 111, 20};
  CHECK_OK(lr_schedule_check(&s));
  CHECK_NEAR(lr_at(&s, 4), 5e-4, 1e-12);                 /* warmup as before */
  CHECK(lr_at(&s, 10) == 1e-3 && lr_at(&s, 90) == 1e-3); /* stable: the peak exactly */
  CHECK_NEAR(lr_at(&s, 95), 1e-4 + 0.5 * 9e-4, 1e-12);   /* progress 1/4: sqrt = 1/2 */
  CHECK_NEAR(lr_at(&s, 91), 1e-4 + (1 - sqrt(0.05)) * 9e-4, 1e-12);
  CHECK_NEAR(lr_at(&s, 110), 1e-4, 1e-12); /* the floor at the last step */
  /* A longer run from the same stable phase: the same rates until its own decay. */
  lr_schedule longer = {LR_WSD, 1e-3, 1e-4, 10, 211, 20};
  for (int step = 0; step <= 90; step++) CHECK(lr_at(&longer, step) == lr_at(&s, step));
  CHECK_NEAR(lr_at(&longer, 195), 1e-4 + 0.5 * 9e-4, 1e-12);
  /* Every step after the warmup decaying (decay_steps = total - warmup): the first of them is
   * already below the peak, which the warmup's last step reached. */
  lr_schedule all = {LR_WSD, 1e-3, 0, 2, 10, 8};
  CHECK_NEAR(lr_at(&all, 1), 1e-3, 1e-12);
  CHECK_NEAR(lr_at(&all, 2), (1 - sqrt(1.0 / 8)) * 1e-3, 1e-12);
  CHECK_NEAR(lr_at(&all, 9), 0, 1e-12);
  all.decay_steps = 7; /* one fewer: step 2 keeps the peak */
  CHECK(lr_at(&all, 2) == 1e-3);
  CHECK_NEAR(lr_at(&all, 3), (1 - sqrt(1.0 / 7)) * 1e-3, 1e-12);
  /* A warmup overlapping the decay: the decay takes the 4 steps after it. */
  lr_schedule overlap = {LR_WSD, 1e-3, 0, 8, 12, 6};
  CHECK_OK(lr_schedule_check(&overlap));
  CHECK_NEAR(lr_at(&overlap, 7), 1e-3, 1e-12);
  CHECK_NEAR(lr_at(&overlap, 8), 0.5e-3, 1e-12); /* progress 1/4 */
  CHECK_NEAR(lr_at(&overlap, 11), 0, 1e-12);
  CHECK_EQ_INT(lr_shape_parse("wsd"), LR_WSD);
  lr_schedule bad = s;
  bad.decay_steps = 0;
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
  bad.decay_steps = 112;
  CHECK_STATUS(lr_schedule_check(&bad), ST_ERR_INVALID_ARG);
}

/* Names and words, as the summaries and inspect print them. */
static void test_names(void) {
  for (int shape = LR_CONSTANT; shape <= LR_WSD; shape++) {
    CHECK_EQ_INT(lr_shape_parse(lr_shape_name((lr_shape)shape)), shape);
  }
  char text[128];
  lr_schedule s = {LR_COSINE, 1e-3, 1e-4, 10, 111, 0};
  lr_schedule_describe(&s, text, sizeof text);
  CHECK_MSG(strcmp(text, "warmup 10 steps, then cosine to 0.0001") == 0, "'%s'", text);
  s = (lr_schedule){LR_WSD, 1e-3, 0, 1, 111, 20};
  lr_schedule_describe(&s, text, sizeof text);
  CHECK_MSG(
      strcmp(text, "warmup 1 step, then constant, then 1-sqrt to 0 over the last 20 steps") == 0,
      "'%s'", text);
  s = (lr_schedule){LR_CONSTANT, 1e-3, 0, 0, 5, 0};
  lr_schedule_describe(&s, text, sizeof text);
  CHECK_MSG(strcmp(text, "constant") == 0, "'%s'", text);
  char small[12];
  s.warmup = 1000;
  lr_schedule_describe(&s, small, sizeof small); /* cut, terminated */
  CHECK_MSG(strcmp(small, "warmup 1000") == 0, "'%s'", small);
}

int main(void) {
  test_schedule();
  test_linear();
  test_wsd();
  test_names();
  return test_finish("optim_test");
}
