/* sim_curve_fit.h - an op class's efficiency curve (sim_curve.h, keyed by one of a call's sizes:
 * sim_class_key) fitted from timed calls, how well it fits them, and its line in a hardware
 * file. The calibration tool (benchmarks/kernels/op_timings) times each call of a class and
 * hands the timings here.
 *
 * The fit sorts the calls by key and splits them into at most `max_points` groups of
 * consecutive calls with equal counts (as near as whole calls allow; calls of the same key
 * always share a group). Equal counts rather than equal measured time: the point of a curve
 * is the small calls, and groups of equal time would pool all of them into the first point
 * whenever a few large calls take most of the class's time. Each group gives one point: its
 * calls' geometric-mean key, and their pooled efficiency sum(roofline) / sum(measured), the
 * ratio the tool prints for a whole class. One call, or calls all of one key, give one point:
 * a constant.
 *
 * Pure: no clock, no hardware; the caller's array is only reordered. */
#ifndef ST_ENGINE_PLAN_SIM_CURVE_FIT_H
#define ST_ENGINE_PLAN_SIM_CURVE_FIT_H

#include <stdio.h>

#include "engine/plan/sim_curve.h"
#include "engine/plan/sim_hw.h"

typedef struct sim_call_timing {
  double key;        /* the size the curve is keyed by (sim_call_size_key) */
  double roofline_s; /* the call's roofline time at efficiency 1 (sim_op_roofline) */
  double measured_s; /* its measured time */
} sim_call_timing;

/* Fits the curve of `n` calls of one class into `out` (described above), sorting `calls` by
 * key. ST_ERR_INVALID_ARG when n < 1, max_points is not 1 to SIM_CURVE_POINTS, or a key or time
 * is not finite and > 0 (naming the call). */
st_status sim_curve_fit(sim_call_timing *calls, int n, int max_points, sim_curve *out);

/* How far the curve's times are from the measured ones: sum |roofline / curve(key) - measured|
 * over sum measured, over `n` >= 1 calls (a fraction: 0.02 is 2% of the class's time). */
double sim_curve_fit_error(const sim_call_timing *calls, int n, const sim_curve *c);

/* Writes `eff_<class> = S:E S:E ...` (keyed by roofline time) or `eff_<class>@dim = D:E ...`
 * (by the GEMM's smallest dimension) and a newline to `out`, the form sim_hw_load reads: sizes
 * with 3 significant digits (more where 3 would not keep them increasing), efficiencies with 3
 * decimals (3 significant digits below 0.1, where 3 decimals would lose them). ST_ERR_INVALID_ARG
 * for a curve sim_curve_check refuses, ST_ERR_IO when the write fails. */
st_status sim_class_curve_print(FILE *out, sim_op_class cls, sim_class_key key, const sim_curve *c);

#endif /* ST_ENGINE_PLAN_SIM_CURVE_FIT_H */
