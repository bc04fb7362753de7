/* sim_curve.c - size-dependent efficiencies (see sim_curve.h). */
#include "engine/plan/sim_curve.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/error.h"

st_status sim_curve_check(const sim_curve *c, const char *what) {
  if (c->points < 1 || c->points > SIM_CURVE_POINTS) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %d points, want 1 to %d", what, c->points,
                    SIM_CURVE_POINTS);
  }
  for (int p = 0; p < c->points; p++) {
    const double s = c->size[p], e = c->efficiency[p];
    if (!isfinite(s) || s <= 0 || (p > 0 && s <= c->size[p - 1])) {
      return st_error(ST_ERR_INVALID_ARG, "%s: size %g of point %d must be > 0 and above the last",
                      what, s, p + 1);
    }
    if (!isfinite(e) || e <= 0) {
      return st_error(ST_ERR_INVALID_ARG, "%s: efficiency %g of point %d must be > 0", what, e,
                      p + 1);
    }
  }
  return ST_OK;
}

/* One "SIZE:EFF" at *text, advancing it past the pair; 0 when malformed. */
static int parse_pair(const char **text, double *size, double *eff) {
  char *end = NULL;
  errno = 0;
  *size = strtod(*text, &end);
  if (end == *text || *end != ':' || errno == ERANGE) return 0;
  const char *second = end + 1;
  *eff = strtod(second, &end);
  if (end == second || errno == ERANGE || (*end != '\0' && *end != ' ' && *end != '\t')) return 0;
  *text = end;
  return 1;
}

st_status sim_curve_parse(const char *text, const char *what, sim_curve *out) {
  out->points = 0;
  for (;;) {
    while (*text == ' ' || *text == '\t') text++;
    if (!*text) break;
    if (out->points == SIM_CURVE_POINTS) {
      return st_error(ST_ERR_INVALID_ARG, "%s: more than %d points", what, SIM_CURVE_POINTS);
    }
    const char *pair = text;
    if (!parse_pair(&text, &out->size[out->points], &out->efficiency[out->points])) {
      return st_error(ST_ERR_INVALID_ARG, "%s: '%s' is not SIZE:EFFICIENCY pairs", what, pair);
    }
    out->points++;
  }
  return sim_curve_check(out, what);
}

double sim_curve_at(const sim_curve *c, double size) {
  const int last = c->points - 1;
  if (size <= c->size[0]) return c->efficiency[0];
  if (size >= c->size[last]) return c->efficiency[last];
  int p = 1;
  while (c->size[p] < size) p++;
  const double w = log(size / c->size[p - 1]) / log(c->size[p] / c->size[p - 1]);
  return c->efficiency[p - 1] + w * (c->efficiency[p] - c->efficiency[p - 1]);
}

void sim_curve_scale(sim_curve *c, double factor) {
  for (int p = 0; p < c->points; p++) c->efficiency[p] *= factor;
}

const sim_curve *sim_group_curve_for(const sim_group_curve curves[SIM_CURVE_GROUPS], int ranks) {
  const sim_group_curve *below = NULL, *above = NULL;
  for (int k = 0; k < SIM_CURVE_GROUPS; k++) {
    const sim_group_curve *g = &curves[k];
    if (g->ranks == 0) continue;
    if (g->ranks == ranks) return &g->curve;
    if (g->ranks < ranks && (!below || g->ranks > below->ranks)) below = g;
    if (g->ranks > ranks && (!above || g->ranks < above->ranks)) above = g;
  }
  const sim_group_curve *g = below ? below : above;
  return g ? &g->curve : NULL;
}
