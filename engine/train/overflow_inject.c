/* overflow_inject.c - the ST_TEST_INJECT_OVERFLOW hook (overflow_inject.h). */
#include "engine/train/overflow_inject.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"

/* This process's world rank: 0 without a mesh (one rank). */
static st_status world_rank(const gpt_model *m, int *rank) {
  *rank = 0;
  if (!m->par.mesh) return ST_OK;
  st_mesh_coords coords;
  ST_CHECK(st_mesh_get_coords(m->par.mesh, &coords));
  *rank = coords.world_rank;
  return ST_OK;
}

st_status overflow_inject(gpt_model *m, int step) {
  const char *value = env_get_string(ENV_TEST_INJECT_OVERFLOW);
  if (strcmp(value, "none") == 0) return ST_OK;
  int at_step = -1, at_rank = -1, used = 0;
  if (sscanf(value, "%d:%d%n", &at_step, &at_rank, &used) != 2 || value[used] != '\0' ||
      at_step < 0 || at_rank < 0) {
    return st_error(ST_ERR_INVALID_ARG, "ST_TEST_INJECT_OVERFLOW '%s' is not STEP:RANK", value);
  }
  int rank = 0;
  ST_CHECK(world_rank(m, &rank));
  unit *u = &m->units[0];
  if (step != at_step || rank != at_rank || u->owned_numel == 0) return ST_OK;
  union {
    float f32;
    uint16_t f16;
  } inf;
  dtype_store_f32(&inf, u->precision.reduce, 0, INFINITY);
  ST_CHECK(stream_memcpy(&m->stream, unit_owned_grads(u), &inf, dtype_size(u->precision.reduce)));
  return stream_sync(&m->stream);
}
