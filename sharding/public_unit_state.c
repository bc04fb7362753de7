/* public_unit_state.c - the public calls that save and restore a unit's optimizer state
 * (shardtrain.h, "Checkpointing a unit"): each rank's owned part of each parameter, read and
 * written through the unit's stream (unit_restore_owned, unit_publish), as the engine's
 * checkpoints do. */
#include "core/error.h"
#include "sharding/public_unit.h"

_Static_assert(ST_STATE_MASTER == 0 && ST_STATE_ADAM_M == 1 && ST_STATE_ADAM_V == 2,
               "st_optimizer_state indexes the master, m and v in that order");

st_status st_unit_owned_range(const st_unit *unit, int index, int64_t *first, int64_t *count) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED));
  ST_CHECK(unit_handle_check_index(unit, __func__, index));
  ST_CHECK(unit_handle_check_pointer(first, __func__, "first"));
  ST_CHECK(unit_handle_check_pointer(count, __func__, "count"));
  int64_t lo, hi;
  unit_owned_part(&unit->u, index, &lo, &hi);
  *first = lo - unit->u.layout.params[index].offset;
  *count = hi - lo;
  return ST_OK;
}

st_status st_unit_read_state(st_unit *h, int index, st_optimizer_state state, float *out) {
  ST_CHECK(unit_handle_check(h, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_OPTIMIZER));
  ST_CHECK(unit_handle_check_index(h, __func__, index));
  if ((int)state < ST_STATE_MASTER || (int)state > ST_STATE_ADAM_V) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: state %d is not ST_STATE_MASTER, ST_STATE_ADAM_M or ST_STATE_ADAM_V",
                    __func__, (int)state);
  }
  unit *u = &h->u;
  int64_t lo, hi;
  unit_owned_part(u, index, &lo, &hi);
  if (hi == lo) return ST_OK;
  ST_CHECK(unit_handle_check_pointer(out, __func__, "out"));
  const float *states[3] = {u->master, u->adam_m, u->adam_v};
  ST_CHECK(stream_memcpy(&u->stream, out, states[state] + (lo - u->owned_begin),
                         (size_t)(hi - lo) * sizeof(float)));
  return stream_sync(&u->stream);
}

st_status st_unit_write_state(st_unit *unit, int index, const float *master, const float *adam_m,
                              const float *adam_v) {
  ST_CHECK(unit_handle_check(unit, __func__,
                             UNIT_NEEDS_FINALIZED | UNIT_NEEDS_RELEASED | UNIT_NEEDS_GRADS_ZERO));
  ST_CHECK(unit_handle_check_index(unit, __func__, index));
  int64_t lo, hi;
  unit_owned_part(&unit->u, index, &lo, &hi);
  if (hi > lo) {
    ST_CHECK(unit_handle_check_pointer(master, __func__, "master"));
    ST_CHECK(unit_handle_check_pointer(adam_m, __func__, "adam_m"));
    ST_CHECK(unit_handle_check_pointer(adam_v, __func__, "adam_v"));
    ST_CHECK(unit_restore_owned(&unit->u, lo, hi - lo, master, adam_m, adam_v));
  }
  unit->optimizer = UNIT_OPTIMIZER_RESTORING;
  return ST_OK;
}

/* Whether this rank owns no element of any parameter (its shard only padding). */
static int owns_no_parameter(const unit *u) {
  for (int k = 0; k < u->layout.count; k++) {
    int64_t lo, hi;
    unit_owned_part(u, k, &lo, &hi);
    if (hi > lo) return 0;
  }
  return 1;
}

/* A rank that owns none of the parameters has no state to write, and joins the collective
 * whether or not it wrote: refused for want of a write, it would leave the others waiting in
 * the gather. */
st_status st_unit_publish_state(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_RELEASED));
  if (!owns_no_parameter(&unit->u)) {
    ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_STATE_SET));
  }
  ST_CHECK(unit_publish(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->optimizer = UNIT_OPTIMIZER_READY;
  return ST_OK;
}
