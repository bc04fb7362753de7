/* sim_curve_fit_test.c - an op class's curve fitted from timed calls, against points worked out
 * by hand (groups of equal counts in key order, each at its geometric-mean key with its pooled
 * efficiency), its fit error, the fit's refusals, and its printed line read back by the
 * hardware-file reader. The calls below are keyed by their roofline time except where said. */
#include "engine/plan/sim_curve_fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tests/testing.h"

/* Six calls, given out of order. By roofline time (measured after the colon):
 *   1e-6 : 2e-6,  4e-6 : 6e-6,  1e-5 : 1.25e-5,  4e-5 : 4.75e-5,  1e-4 : 1.1e-4,  9e-4 : 1e-3. */
static const sim_call_timing six[] = {{1e-4, 1e-4, 1.1e-4},  {4e-6, 4e-6, 6e-6},
                                      {9e-4, 9e-4, 1e-3},    {1e-5, 1e-5, 1.25e-5},
                                      {4e-5, 4e-5, 4.75e-5}, {1e-6, 1e-6, 2e-6}};

static void fit_six(int max_points, sim_curve *out) {
  sim_call_timing calls[6];
  memcpy(calls, six, sizeof calls);
  CHECK_OK(sim_curve_fit(calls, 6, max_points, out));
}

static void check_groups(void) {
  sim_curve c;
  /* Three groups of two: sqrt(1e-6 x 4e-6) = 2e-6 at (1 + 4) / (2 + 6) = 0.625; sqrt(1e-5 x
   * 4e-5) = 2e-5 at 5 / 6; sqrt(1e-4 x 9e-4) = 3e-4 at 1e-3 / 1.11e-3. */
  fit_six(3, &c);
  CHECK_EQ_INT(c.points, 3);
  CHECK_NEAR(c.size[0], 2e-6, 1e-18);
  CHECK_NEAR(c.efficiency[0], 0.625, 1e-12);
  CHECK_NEAR(c.size[1], 2e-5, 1e-17);
  CHECK_NEAR(c.efficiency[1], 5.0 / 6.0, 1e-12);
  CHECK_NEAR(c.size[2], 3e-4, 1e-16);
  CHECK_NEAR(c.efficiency[2], 1.0 / 1.11, 1e-12);
  /* One group: the sixth root of 1 x 4 x 10 x 40 x 100 x 900 x 1e-36 = 144e-30 is
   * 12^(1/3) x 1e-5, at (1 + 4 + 10 + 40 + 100 + 900) / (2 + 6 + 12.5 + 47.5 + 110 + 1000). */
  fit_six(1, &c);
  CHECK_EQ_INT(c.points, 1);
  CHECK_NEAR(c.size[0], cbrt(12.0) * 1e-5, 1e-17);
  CHECK_NEAR(c.efficiency[0], 1055.0 / 1178.0, 1e-12);
  /* As many points as calls or more: one per call, its own ratio. */
  fit_six(6, &c);
  CHECK_EQ_INT(c.points, 6);
  CHECK_NEAR(c.size[3], 4e-5, 1e-17);
  CHECK_NEAR(c.efficiency[3], 40.0 / 47.5, 1e-12);
  fit_six(SIM_CURVE_POINTS, &c);
  CHECK_EQ_INT(c.points, 6);
  /* Four groups of 6 calls end after 1.5, 3, 4.5 and 6 calls, as whole calls after 1, 3, 4
   * and 6: {1e-6}, {4e-6, 1e-5} (sqrt(4e-6 x 1e-5) = 2 sqrt(10) x 1e-6), {4e-5}, {1e-4, 9e-4}. */
  fit_six(4, &c);
  CHECK_EQ_INT(c.points, 4);
  CHECK_NEAR(c.size[1], 2e-6 * sqrt(10.0), 1e-18);
  CHECK_NEAR(c.efficiency[1], 14.0 / 18.5, 1e-12);
  CHECK_NEAR(c.size[3], 3e-4, 1e-16);
}

/* Calls of one roofline time share a group, so the points' sizes increase: five calls, three of
 * 2e-6 s, in five groups give {2e-6 x 3} at 6 / (3 + 4 + 5), {5e-6}, {8e-6}. All of one time:
 * one point, whatever max_points. */
static void check_ties(void) {
  sim_call_timing calls[5] = {{8e-6, 8e-6, 1e-5},
                              {2e-6, 2e-6, 3e-6},
                              {5e-6, 5e-6, 6e-6},
                              {2e-6, 2e-6, 4e-6},
                              {2e-6, 2e-6, 5e-6}};
  sim_curve c;
  CHECK_OK(sim_curve_fit(calls, 5, 5, &c));
  CHECK_EQ_INT(c.points, 3);
  CHECK_NEAR(c.size[0], 2e-6, 1e-20);
  CHECK_NEAR(c.efficiency[0], 0.5, 1e-12);
  CHECK_NEAR(c.size[1], 5e-6, 1e-20);
  CHECK_NEAR(c.efficiency[2], 0.8, 1e-12);
  sim_call_timing same[3] = {{7e-6, 7e-6, 1e-5}, {7e-6, 7e-6, 2e-5}, {7e-6, 7e-6, 4e-5}};
  CHECK_OK(sim_curve_fit(same, 3, 6, &c));
  CHECK_EQ_INT(c.points, 1);
  CHECK_NEAR(c.size[0], 7e-6, 1e-20);
  CHECK_NEAR(c.efficiency[0], 21.0 / 70.0, 1e-12);
  sim_call_timing one = {3e-3, 3e-3, 4e-3};
  CHECK_OK(sim_curve_fit(&one, 1, 6, &c));
  CHECK_EQ_INT(c.points, 1);
  CHECK_NEAR(c.efficiency[0], 0.75, 1e-15);
}

static void check_refusals(void) {
  sim_call_timing calls[2] = {{1e-6, 1e-6, 2e-6}, {1e-5, 1e-5, 2e-5}};
  sim_curve c;
  CHECK_STATUS(sim_curve_fit(calls, 0, 6, &c), ST_ERR_INVALID_ARG);
  CHECK_STATUS(sim_curve_fit(calls, 2, 0, &c), ST_ERR_INVALID_ARG);
  CHECK_STATUS(sim_curve_fit(calls, 2, SIM_CURVE_POINTS + 1, &c), ST_ERR_INVALID_ARG);
  calls[1].measured_s = 0;
  CHECK_STATUS(sim_curve_fit(calls, 2, 6, &c), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "call 1 has key 1e-05, roofline 1e-05 s and measured 0 s") != NULL);
  calls[1] = (sim_call_timing){NAN, 1e-5, 1e-5};
  CHECK_STATUS(sim_curve_fit(calls, 2, 6, &c), ST_ERR_INVALID_ARG);
}

/* The printed line, in a hardware file, reads back as the curve: sizes within the 3 significant
 * digits printed, efficiencies within the 3 decimals (3 significant digits below 0.1); two sizes
 * that agree to 3 digits get the digits that keep them apart. */
static void check_round_trip(void) {
  const sim_curve c = {.points = 4,
                       .size = {2.34567e-6, 1.00012e-4, 1.00049e-4, 0.0123},
                       .efficiency = {0.0123456, 0.51234, 0.98765, 1.5}};
  const sim_curve dims = {.points = 3, .size = {64, 128, 1024}, .efficiency = {0.89, 0.93, 0.97}};
  char path[512];
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(path, sizeof path, "%s/fit.hw", dir ? dir : "/tmp");
  FILE *f = fopen(path, "w");
  fputs(
      "peak_flops = 1e11\nmem_bw = 4e10\nintra_bw = 1e10\nintra_latency = 1e-6\n"
      "inter_bw = 1e10\ninter_latency = 1e-6\n",
      f);
  CHECK_OK(sim_class_curve_print(f, SIM_ATTENTION_BWD, SIM_KEY_ROOFLINE, &c));
  CHECK_OK(sim_class_curve_print(f, SIM_MATMUL, SIM_KEY_GEMM_DIM, &dims));
  fclose(f);
  f = fopen(path, "r");
  char text[2048] = "";
  CHECK(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  CHECK_MSG(strstr(text,
                   "eff_attention_bwd = 2.35e-06:0.0123 0.0001:0.512 0.00010005:0.988 "
                   "0.0123:1.500\n") != NULL,
            "printed: %s", text);
  CHECK_MSG(strstr(text, "eff_matmul@dim = 64:0.890 128:0.930 1.02e+03:0.970\n") != NULL,
            "printed: %s", text);
  sim_hardware hw;
  CHECK_OK(sim_hw_load(path, &hw));
  const sim_curve *back = &hw.efficiency_curve[SIM_ATTENTION_BWD];
  CHECK_EQ_INT(back->points, 4);
  for (int p = 0; p < 4; p++) {
    CHECK_NEAR(back->size[p] / c.size[p], 1.0, 5e-3);
    CHECK_NEAR(back->efficiency[p], c.efficiency[p], p == 0 ? 5e-5 : 5e-4);
  }
  CHECK_EQ_INT(hw.efficiency_key[SIM_MATMUL], SIM_KEY_GEMM_DIM);
  CHECK_EQ_INT(hw.efficiency_curve[SIM_MATMUL].points, 3);
  CHECK_NEAR(hw.efficiency_curve[SIM_MATMUL].size[2], 1020, 0);
  /* A curve the reader would refuse is not printed. */
  const sim_curve bad = {.points = 2, .size = {1e-5, 1e-6}, .efficiency = {1, 1}};
  CHECK_STATUS(sim_class_curve_print(stdout, SIM_MATMUL, SIM_KEY_ROOFLINE, &bad),
               ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "eff_matmul: size 1e-06 of point 2") != NULL);
}

/* The fit error, by hand: a curve of 0.5 up to 64 and 1.0 from 256 (0.75 at 128, halfway in
 * log) over three calls keyed by dimension. Predicted: 1 / 0.5 = 2 (measured 2.5), 3 / 0.75 = 4
 * (measured 4), 2 / 1.0 = 2 (measured 1.5): off by 0.5 + 0 + 0.5 over 8 measured, 1/8. */
static void check_error(void) {
  const sim_curve c = {.points = 2, .size = {64, 256}, .efficiency = {0.5, 1.0}};
  const sim_call_timing calls[3] = {{64, 1, 2.5}, {128, 3, 4}, {1024, 2, 1.5}};
  CHECK_NEAR(sim_curve_fit_error(calls, 3, &c), 0.125, 1e-15);
  /* A fit of one point per call reproduces each call: no error. */
  sim_call_timing copy[3];
  memcpy(copy, calls, sizeof copy);
  sim_curve fitted;
  CHECK_OK(sim_curve_fit(copy, 3, 3, &fitted));
  CHECK_NEAR(sim_curve_fit_error(calls, 3, &fitted), 0, 1e-15);
}

int main(void) {
  check_groups();
  check_ties();
  check_refusals();
  check_error();
  check_round_trip();
  return test_finish("sim_curve_fit_test");
}
