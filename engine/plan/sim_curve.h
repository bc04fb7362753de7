/* sim_curve.h - a measured efficiency as a function of a size: the calibration of work that does
 * not reach one fixed fraction of its roofline. Two users, three sizes:
 *
 * - a collective, keyed by its buffer in bytes (the gathered buffer of an all-gather, the full
 *   input of a reduce-scatter, the buffer of an all-reduce), one curve per group size: Open
 *   MPI's non-blocking reduce-scatter on 2 ranks of this project's CPU machine, timed alone with
 *   cold caches, reaches 0.12 of the ping-pong bandwidth at 1 MiB, 0.21 at 12 MiB and 0.085 at
 *   16 MiB (benchmarks/hardware/epyc_2core.hw; docs/SIMULATOR.md);
 * - an op class, keyed by a call's roofline time at efficiency 1 in seconds: small calls reach
 *   less of their roofline than large ones (on a GPU small kernels are launch-bound); or the
 *   matmul class, keyed by the GEMM's smallest dimension (sim_class_key in sim_hw.h): M2's
 *   64-row matmuls reach 0.914 of the sgemm peak on the CPU, where M1's 1024-row ones reach 0.971.
 *
 * A curve is a list of (size, efficiency) points with increasing sizes, written in a hardware
 * file as `SIZE:EFF SIZE:EFF ...`. Between two points the efficiency is interpolated linearly in
 * log(size); outside them it is the nearest point's. */
#ifndef ST_ENGINE_PLAN_SIM_CURVE_H
#define ST_ENGINE_PLAN_SIM_CURVE_H

#include "shardtrain.h"

enum {
  SIM_CURVE_POINTS = 16, /* points of one curve */
  SIM_CURVE_GROUPS = 8   /* group sizes a collective may have curves for */
};

typedef struct sim_curve {
  int points; /* >= 1 when used; 0: no curve */
  double size[SIM_CURVE_POINTS];
  double efficiency[SIM_CURVE_POINTS];
} sim_curve;

/* Parses "SIZE:EFF SIZE:EFF ..." into `out`. ST_ERR_INVALID_ARG naming `what` (the file, line
 * and key) for a malformed pair, a size that does not increase, an efficiency that is not > 0,
 * or more than SIM_CURVE_POINTS points. */
st_status sim_curve_parse(const char *text, const char *what, sim_curve *out);

/* Checks a curve built in code: 1 <= points <= SIM_CURVE_POINTS, sizes increasing and > 0,
 * efficiencies finite and > 0. ST_ERR_INVALID_ARG naming `what` otherwise. */
st_status sim_curve_check(const sim_curve *c, const char *what);

/* The curve's efficiency at `size` (interpolated as above). */
double sim_curve_at(const sim_curve *c, double size);

/* Multiplies every point's efficiency by `factor` (a what-if: --efficiency-scale). */
void sim_curve_scale(sim_curve *c, double factor);

/* A collective's curve measured on a group of `ranks`. */
typedef struct sim_group_curve {
  int ranks; /* 0: an unused slot */
  sim_curve curve;
} sim_group_curve;

/* The curve of `curves` (SIM_CURVE_GROUPS slots) for a group of `ranks`: the one measured on
 * that many ranks, else on the most ranks below it, else on the fewest above it; NULL when no
 * slot is used. */
const sim_curve *sim_group_curve_for(const sim_group_curve curves[SIM_CURVE_GROUPS], int ranks);

#endif /* ST_ENGINE_PLAN_SIM_CURVE_H */
