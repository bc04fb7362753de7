/* sim_comm_curve.h - a collective's measured efficiency as a function of its buffer size, for
 * one group size: the calibration of a link whose collectives do not reach one fixed fraction
 * of its bandwidth. Open MPI's non-blocking reduce-scatter on this project's CPU machine, for
 * one, reaches 0.39 of the ping-pong bandwidth at 1 MiB, 0.24 at 12 MiB and 0.10 at 16 MiB
 * (docs/SIMULATOR.md), so one number cannot describe both M1's 3 MB and M2's 12.6 MB blocks.
 *
 * A curve is a list of (bytes, efficiency) points with increasing bytes, written in a hardware
 * file as `eff_<collective>@<ranks> = BYTES:EFF BYTES:EFF ...` (bytes as the simulator counts
 * them: the gathered buffer of an all-gather, the full input of a reduce-scatter, the buffer of
 * an all-reduce). Between two points the efficiency is interpolated linearly in log(bytes);
 * outside them it is the nearest point's. */
#ifndef ST_ENGINE_PLAN_SIM_COMM_CURVE_H
#define ST_ENGINE_PLAN_SIM_COMM_CURVE_H

#include "shardtrain.h"

enum {
  SIM_CURVE_POINTS = 16, /* points of one curve */
  SIM_CURVES = 8         /* curves (group sizes) of one collective */
};

typedef struct sim_comm_curve {
  int ranks;  /* the group size it was measured on; 0: an unused slot */
  int points; /* >= 1 when used */
  double bytes[SIM_CURVE_POINTS];
  double efficiency[SIM_CURVE_POINTS];
} sim_comm_curve;

/* Parses a curve's value ("BYTES:EFF BYTES:EFF ...") into `out` (its ranks left as they are).
 * ST_ERR_INVALID_ARG naming `what` (the file, line and key) for a malformed pair, a size that
 * does not increase, an efficiency that is not > 0, or more than SIM_CURVE_POINTS points. */
st_status sim_comm_curve_parse(const char *text, const char *what, sim_comm_curve *out);

/* Checks a curve built in code: 1 <= points <= SIM_CURVE_POINTS, sizes increasing and > 0,
 * efficiencies finite and > 0. ST_ERR_INVALID_ARG naming `what` otherwise. */
st_status sim_comm_curve_check(const sim_comm_curve *c, const char *what);

/* The curve's efficiency at `bytes` (interpolated as above). */
double sim_comm_curve_at(const sim_comm_curve *c, double bytes);

/* The curve of `curves` (SIM_CURVES slots) for a group of `ranks`: the one measured on that
 * many ranks, else on the most ranks below it, else on the fewest above it; NULL when no slot
 * is used. */
const sim_comm_curve *sim_comm_curve_for(const sim_comm_curve curves[SIM_CURVES], int ranks);

#endif /* ST_ENGINE_PLAN_SIM_COMM_CURVE_H */
