/* sim_comm_curve.c - size-dependent collective efficiencies (see sim_comm_curve.h). */
#include "engine/plan/sim_comm_curve.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/error.h"

st_status sim_comm_curve_check(const sim_comm_curve *c, const char *what) {
  if (c->points < 1 || c->points > SIM_CURVE_POINTS) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %d points, want 1 to %d", what, c->points,
                    SIM_CURVE_POINTS);
  }
  for (int p = 0; p < c->points; p++) {
    const double b = c->bytes[p], e = c->efficiency[p];
    if (!isfinite(b) || b <= 0 || (p > 0 && b <= c->bytes[p - 1])) {
      return st_error(ST_ERR_INVALID_ARG, "%s: size %g of point %d must be > 0 and above the last",
                      what, b, p + 1);
    }
    if (!isfinite(e) || e <= 0) {
      return st_error(ST_ERR_INVALID_ARG, "%s: efficiency %g of point %d must be > 0", what, e,
                      p + 1);
    }
  }
  return ST_OK;
}

/* One "BYTES:EFF" at *text, advancing it past the pair; 0 when malformed. */
static int parse_pair(const char **text, double *bytes, double *eff) {
  char *end = NULL;
  errno = 0;
  *bytes = strtod(*text, &end);
  if (end == *text || *end != ':' || errno == ERANGE) return 0;
  const char *second = end + 1;
  *eff = strtod(second, &end);
  if (end == second || errno == ERANGE || (*end != '\0' && *end != ' ' && *end != '\t')) return 0;
  *text = end;
  return 1;
}

st_status sim_comm_curve_parse(const char *text, const char *what, sim_comm_curve *out) {
  out->points = 0;
  for (;;) {
    while (*text == ' ' || *text == '\t') text++;
    if (!*text) break;
    if (out->points == SIM_CURVE_POINTS) {
      return st_error(ST_ERR_INVALID_ARG, "%s: more than %d points", what, SIM_CURVE_POINTS);
    }
    const char *pair = text;
    if (!parse_pair(&text, &out->bytes[out->points], &out->efficiency[out->points])) {
      return st_error(ST_ERR_INVALID_ARG, "%s: '%s' is not BYTES:EFFICIENCY pairs", what, pair);
    }
    out->points++;
  }
  return sim_comm_curve_check(out, what);
}

double sim_comm_curve_at(const sim_comm_curve *c, double bytes) {
  const int last = c->points - 1;
  if (bytes <= c->bytes[0]) return c->efficiency[0];
  if (bytes >= c->bytes[last]) return c->efficiency[last];
  int p = 1;
  while (c->bytes[p] < bytes) p++;
  const double w = log(bytes / c->bytes[p - 1]) / log(c->bytes[p] / c->bytes[p - 1]);
  return c->efficiency[p - 1] + w * (c->efficiency[p] - c->efficiency[p - 1]);
}

const sim_comm_curve *sim_comm_curve_for(const sim_comm_curve curves[SIM_CURVES], int ranks) {
  const sim_comm_curve *below = NULL, *above = NULL;
  for (int k = 0; k < SIM_CURVES; k++) {
    const sim_comm_curve *c = &curves[k];
    if (c->ranks == 0) continue;
    if (c->ranks == ranks) return c;
    if (c->ranks < ranks && (!below || c->ranks > below->ranks)) below = c;
    if (c->ranks > ranks && (!above || c->ranks < above->ranks)) above = c;
  }
  return below ? below : above;
}
