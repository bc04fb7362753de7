/* sim_curve_fit.h - an op class's efficiency curve (sim_curve.h, keyed by a call's roofline time
 * at efficiency 1) fitted from timed calls, and its line in a hardware file. The calibration
 * tool (benchmarks/kernels/op_timings) times each call of a class and hands the pairs here.
 *
 * The fit sorts the calls by roofline time and splits them into at most `max_points` groups of
 * consecutive calls with equal counts (as near as whole calls allow; calls of the same roofline
 * time always share a group). Equal counts rather than equal measured time: the point of a curve
 * is the small calls, and groups of equal time would pool all of them into the first point
 * whenever a few large calls take most of the class's time. Each group gives one point: its
 * calls' geometric-mean roofline time, and their pooled efficiency sum(roofline) /
 * sum(measured), the ratio the tool prints for a whole class. One call, or calls all of one
 * roofline time, give one point: a constant.
 *
 * Pure: no clock, no hardware; the caller's array is only reordered. */
#ifndef ST_ENGINE_PLAN_SIM_CURVE_FIT_H
#define ST_ENGINE_PLAN_SIM_CURVE_FIT_H

#include <stdio.h>

#include "engine/plan/sim_curve.h"
#include "engine/plan/sim_hw.h"

typedef struct sim_call_timing {
  double roofline_s; /* the call's roofline time at efficiency 1 (sim_op_time's, efficiency 1) */
  double measured_s; /* its measured time */
} sim_call_timing;

/* Fits the curve of `n` calls of one class into `out` (described above), sorting `calls` by
 * roofline time. ST_ERR_INVALID_ARG when n < 1, max_points is not 1 to SIM_CURVE_POINTS, or a
 * time is not finite and > 0 (naming the call). */
st_status sim_curve_fit(sim_call_timing *calls, int n, int max_points, sim_curve *out);

/* Writes `eff_<class> = S:E S:E ...` and a newline to `out`, the form sim_hw_load reads: sizes
 * with 3 significant digits (more where 3 would not keep them increasing), efficiencies with 3
 * decimals (3 significant digits below 0.1, where 3 decimals would lose them). ST_ERR_INVALID_ARG
 * for a curve sim_curve_check refuses, ST_ERR_IO when the write fails. */
st_status sim_class_curve_print(FILE *out, sim_op_class cls, const sim_curve *c);

#endif /* ST_ENGINE_PLAN_SIM_CURVE_FIT_H */
