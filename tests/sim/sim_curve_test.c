/* sim_curve_test.c - size-dependent efficiencies: a curve's parsing and its refusals, its value
 * between and beyond its points (linear in log(size), worked out by hand below), the choice of
 * a collective's curve by group size, the hardware file's `eff_<collective>@<ranks>` and
 * `eff_<class> = SECONDS:EFF ...` lines and --efficiency-scale's scaling of them, and the
 * schedule's reduce-scatter of a d12 block at the efficiency its size gives. */
#include "engine/plan/sim_curve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/model/gpt.h"
#include "engine/plan/sim_collective.h"
#include "engine/plan/sim_hw.h"
#include "engine/plan/sim_schedule.h"
#include "tests/testing.h"

static const double MiB = 1048576.0;

/* 0.4 at 1 MiB, 0.2 at 4 MiB, 0.1 at 16 MiB: 2 MiB lies halfway between the first two in
 * log(bytes), so 0.3; 8 MiB halfway between the last two, so 0.15. */
static void check_interpolation(void) {
  sim_curve c = {0};
  CHECK_OK(sim_curve_parse("1048576:0.4 4194304:0.2\t16777216:0.1", "t", &c));
  CHECK_EQ_INT(c.points, 3);
  CHECK_NEAR(sim_curve_at(&c, 1 * MiB), 0.4, 1e-15);
  CHECK_NEAR(sim_curve_at(&c, 2 * MiB), 0.3, 1e-12);
  CHECK_NEAR(sim_curve_at(&c, 4 * MiB), 0.2, 1e-15);
  CHECK_NEAR(sim_curve_at(&c, 8 * MiB), 0.15, 1e-12);
  /* Outside the points: the nearest one's; a zero-byte buffer too. */
  CHECK_NEAR(sim_curve_at(&c, 0.25 * MiB), 0.4, 1e-15);
  CHECK_NEAR(sim_curve_at(&c, 0), 0.4, 1e-15);
  CHECK_NEAR(sim_curve_at(&c, 64 * MiB), 0.1, 1e-15);
  /* One point: that efficiency everywhere. */
  CHECK_OK(sim_curve_parse("4096:0.5", "t", &c));
  CHECK_NEAR(sim_curve_at(&c, 1), 0.5, 1e-15);
  CHECK_NEAR(sim_curve_at(&c, 1e9), 0.5, 1e-15);
}

static void check_refusals(void) {
  const char *bad[] = {"",
                       "1048576:0",
                       "1048576:-0.5",
                       "4096:0.5 2048:0.5",
                       "4096:0.5 4096:0.4",
                       "abc",
                       "1048576-0.4",
                       "1048576:0.4x",
                       "0:0.5",
                       "1048576:inf",
                       "1048576:0.4 :0.3"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sim_curve c = {0};
    CHECK_STATUS(sim_curve_parse(bad[i], "curve", &c), ST_ERR_INVALID_ARG);
    CHECK_MSG(strstr(st_last_error(), "curve") != NULL, "'%s': %s", bad[i], st_last_error());
  }
  char many[1024] = "";
  for (int p = 1; p <= SIM_CURVE_POINTS + 1; p++) {
    snprintf(many + strlen(many), sizeof many - strlen(many), "%d:0.5 ", p * 1024);
  }
  sim_curve c = {0};
  CHECK_STATUS(sim_curve_parse(many, "curve", &c), ST_ERR_INVALID_ARG);
}

/* Curves measured on 2, 4 and 8 ranks: a group uses its own size's, else the largest below,
 * else the smallest above. */
static void check_choice(void) {
  sim_group_curve curves[SIM_CURVE_GROUPS] = {{.ranks = 8, .curve = {.points = 1, .size = {1}}},
                                              {.ranks = 2, .curve = {.points = 1, .size = {1}}},
                                              {.ranks = 4, .curve = {.points = 1, .size = {1}}}};
  CHECK(sim_group_curve_for(curves, 4) == &curves[2].curve);
  CHECK(sim_group_curve_for(curves, 3) == &curves[1].curve);
  CHECK(sim_group_curve_for(curves, 7) == &curves[2].curve);
  CHECK(sim_group_curve_for(curves, 64) == &curves[0].curve);
  CHECK(sim_group_curve_for(curves, 1) == &curves[1].curve);
  sim_group_curve none[SIM_CURVE_GROUPS] = {{0}};
  CHECK(sim_group_curve_for(none, 4) == NULL);
}

static const char *write_file(const char *name, const char *text) {
  static char path[512];
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(path, sizeof path, "%s/%s", dir ? dir : "/tmp", name);
  FILE *f = fopen(path, "w");
  fputs(
      "peak_flops = 1e11\nmem_bw = 4e10\nintra_bw = 1e10\nintra_latency = 1e-6\n"
      "inter_bw = 1e10\ninter_latency = 1e-6\nkernels = cpu\n",
      f);
  fputs(text, f);
  fclose(f);
  return path;
}

/* A hardware file whose last line is `line` is refused with an error naming `message`. */
static void expect_refused(const char *line, const char *message) {
  sim_hardware hw;
  CHECK_STATUS(sim_hw_load(write_file("bad.hw", line), &hw), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), message) != NULL, "want '%s', got '%s'", message,
            st_last_error());
}

/* A hardware file's curves: the collective with one follows it per group size, the others
 * keep their single efficiency; malformed lines are refused naming the file, line and key. */
static void check_hardware_file(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_load(write_file("curves.hw",
                                  "eff_all_gather = 0.7\n"
                                  "eff_reduce_scatter@2 = 1048576:0.4 4194304:0.2\n"
                                  "eff_reduce_scatter@8 = 1048576:0.1\n"),
                       &hw));
  CHECK_NEAR(sim_hw_comm_efficiency(&hw, SIM_REDUCE_SCATTER, 2, 2 * MiB), 0.3, 1e-12);
  CHECK_NEAR(sim_hw_comm_efficiency(&hw, SIM_REDUCE_SCATTER, 4, 2 * MiB), 0.3, 1e-12);
  CHECK_NEAR(sim_hw_comm_efficiency(&hw, SIM_REDUCE_SCATTER, 16, 2 * MiB), 0.1, 1e-15);
  CHECK_NEAR(sim_hw_comm_efficiency(&hw, SIM_ALL_GATHER, 2, 2 * MiB), 0.7, 1e-15);
  CHECK_NEAR(sim_hw_comm_efficiency(&hw, SIM_ALL_REDUCE, 2, 2 * MiB), 1.0, 1e-15);
  const struct {
    const char *line, *message;
  } bad[] = {
      {"eff_broadcast@2 = 4096:0.5\n", "line 8: eff_broadcast@2: not eff_"},
      {"eff_all_gather@0 = 4096:0.5\n", "eff_all_gather@0: not eff_"},
      {"eff_all_gather@two = 4096:0.5\n", "eff_all_gather@two: not eff_"},
      {"eff_all_gather@2 = 4096:0.5\neff_all_gather@2 = 4096:0.6\n",
       "line 9: eff_all_gather@2: given twice"},
      /* Any key given twice is refused (no silent "last one wins"), naming both lines. */
      {"mem_bw = 2e11\n", "line 8: key 'mem_bw' is given twice (first on line 2)"},
      {"eff_norm_fwd = 1e-6:0.5\neff_norm_fwd = 0.3\n",
       "line 9: key 'eff_norm_fwd' is given twice (first on line 8)"},
      /* A bad count names only its own key and line; one too large is out of range, not "not a
       * whole number". */
      {"gpus_per_node = 0\n", "line 8: gpus_per_node = 0 must be 1 to 1048576"},
      {"overlap = 2\n", "line 8: overlap = 2 must be 0 or 1"},
      {"compute_slots = 2000000\n", "line 8: compute_slots = 2000000 must be 0 to 1048576"},
      /* So does a value only the check refuses (0 where > 0 is needed). */
      {"eff_all_gather = 0\n", "line 8: eff_all_gather = 0 must be > 0"},
      {"eff_matmul = 0\n", "line 8: eff_matmul = 0 must be > 0"},
      {"peak_flops_fp32 = 0\n", "line 8: peak_flops_fp32 = 0 must be > 0"},
      {"eff_all_reduce@2 = 4096:0.5 1024:0.4\n", "eff_all_reduce@2: size 1024 of point 2"},
      {"eff_all_reduce@2 = 4096:0\n", "eff_all_reduce@2: efficiency 0 of point 1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    expect_refused(bad[i].line, bad[i].message);
  }
}

/* An op class's curve by roofline time: 0.5 at 1 us, 0.9 at 100 us. 10 us lies halfway in
 * log(time): 0.7; 3 us a quarter of the way (log 3 / log 100 = 0.2386): 0.5 + 0.4 x 0.2386.
 * Below the first point 0.5, above the last 0.9; a class given as a number has no curve.
 * --efficiency-scale 0.5 halves the curve's points and the other classes' constants. */
static void check_class_curve(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_load(write_file("class.hw",
                                  "eff_optimizer = 0.8\n"
                                  "eff_matmul = 1e-6:0.5 1e-4:0.9\n"
                                  "eff_norm_fwd = 0.3\n"),
                       &hw));
  CHECK_EQ_INT(hw.efficiency_curve[SIM_MATMUL].points, 2);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-5, 0}), 0.7, 1e-12);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){3e-6, 0}),
             0.5 + 0.4 * 0.238560627, 1e-9);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-8, 0}), 0.5, 1e-15);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1.0, 0}), 0.9, 1e-15);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_OPTIMIZER, (sim_call_size){1e-5, 0}), 0.8, 1e-15);
  CHECK_EQ_INT(hw.efficiency_curve[SIM_NORM_FWD].points, 0);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_NORM_FWD, (sim_call_size){1e-6, 0}), 0.3, 1e-15);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_CAST, (sim_call_size){1e-5, 0}), 1.0, 1e-15);
  sim_hw_scale_class_efficiency(&hw, 0.5);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-5, 0}), 0.35, 1e-12);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1.0, 0}), 0.45, 1e-15);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_OPTIMIZER, (sim_call_size){1e-5, 0}), 0.4, 1e-15);
  const struct {
    const char *line, *message;
  } bad[] = {
      {"eff_matmul = 1e-4:0.5 1e-6:0.9\n", "line 8: eff_matmul: size 1e-06 of point 2"},
      {"eff_matmul = 1e-6:0.5 1e-6:0.9\n", "line 8: eff_matmul: size 1e-06 of point 2"},
      {"eff_gelu_fwd = 1e-6:0\n", "line 8: eff_gelu_fwd: efficiency 0 of point 1"},
      {"eff_cast = 1e-6:0.5 fast\n", "line 8: eff_cast: 'fast' is not SIZE:EFFICIENCY pairs"},
      {"eff_cast = 0:0.5\n", "line 8: eff_cast: size 0 of point 1"},
      {"eff_cast = 1e-6:0.5:0.4\n", "line 8: eff_cast: '1e-6:0.5:0.4' is not SIZE:EFF"},
      {"eff_norm_fwd@dim = 64:0.5\n", "line 8: eff_norm_fwd@dim: only eff_matmul is keyed by"},
      {"eff_matmul@dim = 0.9\n", "line 8: eff_matmul@dim: '0.9' is not SIZE:EFF"},
      {"eff_matmul@dim = 256:0.9 64:0.5\n", "line 8: eff_matmul@dim: size 64 of point 2"},
      {"eff_matmul@dims = 64:0.5\n", "line 8: eff_matmul@dims: not eff_"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    expect_refused(bad[i].line, bad[i].message);
  }
  /* The matmul class by the GEMM's smallest dimension: 0.6 at 64, 0.9 at 1024; 256 lies halfway
   * in log(dim): 0.75, whatever the roofline time. A later constant (or curve by time) replaces
   * it and its key. Only the matmul class takes a dimension. */
  CHECK_OK(sim_hw_load(write_file("dim.hw", "eff_matmul@dim = 64:0.6 1024:0.9\n"), &hw));
  CHECK_EQ_INT(hw.efficiency_key[SIM_MATMUL], SIM_KEY_GEMM_DIM);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-3, 256}), 0.75, 1e-12);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-9, 256}), 0.75, 1e-12);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-3, 8}), 0.6, 1e-15);
  CHECK_OK(sim_hw_load(write_file("dim.hw",
                                  "eff_matmul@dim = 64:0.6 1024:0.9\n"
                                  "eff_matmul = 1e-6:0.5 1e-4:0.9\n"),
                       &hw));
  CHECK_EQ_INT(hw.efficiency_key[SIM_MATMUL], SIM_KEY_ROOFLINE);
  CHECK_NEAR(sim_hw_class_efficiency(&hw, SIM_MATMUL, (sim_call_size){1e-5, 256}), 0.7, 1e-12);
  /* A curve built in code is checked as one read from a file. */
  CHECK_OK(sim_hw_builtin("h100", &hw));
  hw.efficiency_curve[SIM_ATTENTION_FWD] =
      (sim_curve){.points = 1, .size = {-1}, .efficiency = {1}};
  CHECK_STATUS(sim_hw_check(&hw), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "eff_attention_fwd: size -1 of point 1") != NULL);
}

/* d12 on 8 ranks at ZeRO-3 in fp32: a block holds 12 C^2 + 13 C = 7,087,872 parameters,
 * 28,351,488 bytes of fp32 gradient to reduce-scatter. With a curve of 0.5 at half that
 * size and 0.25 at twice it, the block is halfway in log(bytes): 0.375, and its
 * reduce-scatter costs the ring's time over bytes / 0.375 on the node's link. */
static void check_schedule(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  const double block = (12.0 * 768 * 768 + 13 * 768) * 4;
  hw.comm_curves[SIM_REDUCE_SCATTER][0] = (sim_group_curve){
      .ranks = 8,
      .curve = {.points = 2, .size = {block / 2, block * 2}, .efficiency = {0.5, 0.25}}};
  CHECK_OK(sim_hw_check(&hw));
  plan_input in = {.R = 1,
                   .S = 8,
                   .T = 1,
                   .stage = 3,
                   .micro_batch = 1,
                   .grad_accum = 1,
                   .prefetch = 1,
                   .reshard_after_forward = 1,
                   .precision = {ST_FP32, ST_FP32}};
  CHECK_OK(gpt_config_named("d12", &in.cfg));
  CHECK_OK(gpt_config_finish(&in.cfg, 1));
  in.seq_len = in.cfg.max_seq;
  sim_costs c;
  CHECK_OK(sim_costs_of(&hw, &in, &c));
  const sim_link link = {hw.intra_bw, hw.intra_latency};
  CHECK_NEAR(c.reduce_scatter[1] / sim_ring_reduce_scatter(8, block / 0.375, link), 1.0, 1e-12);
  /* The all-gather of the same block has no curve: efficiency 1 as the built-in row
   * says. */
  CHECK_NEAR(c.gather[1] / sim_ring_all_gather(8, block, link), 1.0, 1e-12);
  /* A curve whose ranks or sizes are out of range is refused by the check. */
  hw.comm_curves[SIM_REDUCE_SCATTER][0].curve.efficiency[1] = 0;
  CHECK_STATUS(sim_hw_check(&hw), ST_ERR_INVALID_ARG);
}

int main(void) {
  check_interpolation();
  check_refusals();
  check_choice();
  check_hardware_file();
  check_class_curve();
  check_schedule();
  return test_finish("sim_curve_test");
}
