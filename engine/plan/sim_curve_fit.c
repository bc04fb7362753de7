/* sim_curve_fit.c - an op class's curve from timed calls, and its hardware-file line (see
 * sim_curve_fit.h). */
#include "engine/plan/sim_curve_fit.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

static int by_key(const void *a, const void *b) {
  const double x = ((const sim_call_timing *)a)->key;
  const double y = ((const sim_call_timing *)b)->key;
  return (x > y) - (x < y);
}

/* Appends the point of the sorted calls [first, end): their geometric-mean key and pooled
 * efficiency. */
static void add_point(const sim_call_timing *calls, int first, int end, sim_curve *out) {
  double log_sum = 0, roofline = 0, measured = 0;
  for (int i = first; i < end; i++) {
    log_sum += log(calls[i].key);
    roofline += calls[i].roofline_s;
    measured += calls[i].measured_s;
  }
  /* Rounding must not move the mean outside the group: the next group's calls lie above it,
   * so the sizes then increase strictly. */
  double size = exp(log_sum / (end - first));
  size = fmax(calls[first].key, fmin(size, calls[end - 1].key));
  out->size[out->points] = size;
  out->efficiency[out->points] = roofline / measured;
  out->points++;
}

st_status sim_curve_fit(sim_call_timing *calls, int n, int max_points, sim_curve *out) {
  if (n < 1 || max_points < 1 || max_points > SIM_CURVE_POINTS) {
    return st_error(ST_ERR_INVALID_ARG,
                    "curve fit: %d calls into %d points, want >= 1 into 1 to %d", n, max_points,
                    SIM_CURVE_POINTS);
  }
  for (int i = 0; i < n; i++) {
    const double k = calls[i].key, r = calls[i].roofline_s, m = calls[i].measured_s;
    if (!isfinite(k) || k <= 0 || !isfinite(r) || r <= 0 || !isfinite(m) || m <= 0) {
      return st_error(ST_ERR_INVALID_ARG,
                      "curve fit: call %d has key %g, roofline %g s and measured %g s, want all "
                      "> 0",
                      i, k, r, m);
    }
  }
  qsort(calls, (size_t)n, sizeof *calls, by_key);
  const int groups = n < max_points ? n : max_points;
  out->points = 0;
  int first = 0;
  for (int g = 1; first < n; g++) {
    /* Group g ends near g/groups of the calls, after at least one call and never between two
     * calls of the same key (whose points would coincide). */
    int end = (int)((long long)g * n / groups);
    if (end <= first) end = first + 1;
    while (end < n && calls[end].key == calls[end - 1].key) end++;
    add_point(calls, first, end, out);
    first = end;
  }
  return sim_curve_check(out, "curve fit");
}

double sim_curve_fit_error(const sim_call_timing *calls, int n, const sim_curve *c) {
  double off = 0, measured = 0;
  for (int i = 0; i < n; i++) {
    off += fabs(calls[i].roofline_s / sim_curve_at(c, calls[i].key) - calls[i].measured_s);
    measured += calls[i].measured_s;
  }
  return off / measured;
}

/* Prints `size` with the fewest significant digits from 3 that print it above `below` (the
 * previous point's size as printed; 0 for the first), and returns it as printed. */
static double print_size(FILE *out, double size, double below) {
  char text[32];
  double printed = 0;
  for (int digits = 3; digits <= 17; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, size);
    printed = strtod(text, NULL);
    if (printed > below) break;
  }
  fputs(text, out);
  return printed;
}

st_status sim_class_curve_print(FILE *out, sim_op_class cls, sim_class_key key,
                                const sim_curve *c) {
  char what[64];
  snprintf(what, sizeof what, "eff_%s%s", sim_op_class_name(cls),
           key == SIM_KEY_GEMM_DIM ? "@dim" : "");
  ST_CHECK(sim_curve_check(c, what));
  fprintf(out, "%s =", what);
  double below = 0;
  for (int p = 0; p < c->points; p++) {
    fputc(' ', out);
    below = print_size(out, c->size[p], below);
    const double e = c->efficiency[p];
    fprintf(out, e >= 0.1 ? ":%.3f" : ":%.3g", e);
  }
  fputc('\n', out);
  if (ferror(out)) return st_error(ST_ERR_IO, "%s: writing the curve failed", what);
  return ST_OK;
}
