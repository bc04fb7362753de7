/* public_unit_state.c - the public calls that save and restore a unit's optimizer state
 * (shardtrain.h, "Checkpointing a unit"): each rank's owned part of each parameter, read and
 * written through the unit's stream (unit_restore_owned, unit_publish), as the engine's
 * checkpoints do. */
#include "core/error.h"
#include "sharding/comm.h"
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

/* `mine` summed over the unit's shard group, through the handle's device scalar as its
 * collectives need. */
static st_status shard_group_sum(st_unit *h, int mine, int *total) {
  *total = mine;
  unit *u = &h->u;
  if (u->layout.S == 1) return ST_OK;
  float count = (float)mine;
  ST_CHECK(stream_memcpy(&u->stream, h->scalar, &count, sizeof count));
  ST_CHECK(stream_sync(&u->stream));
  ST_CHECK(comm_all_reduce(u->groups.shard, h->scalar, h->scalar, 1, ST_FP32, COMM_SUM, NULL));
  ST_CHECK(stream_memcpy(&u->stream, &count, h->scalar, sizeof count));
  ST_CHECK(stream_sync(&u->stream));
  *total = (int)count;
  return ST_OK;
}

/* A rank that owns none of the parameters has no state to write, and publishes whether or not
 * it wrote. The ranks that own some and wrote nothing are counted over the shard group first,
 * so that every rank refuses alike: a rank that owns nothing would otherwise go on into the
 * gather alone, and wait there for the others. */
st_status st_unit_publish_state(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_RELEASED));
  const int unwritten =
      !owns_no_parameter(&unit->u) && unit->optimizer == UNIT_OPTIMIZER_STALE ? 1 : 0;
  int unwritten_ranks = 0;
  ST_CHECK(shard_group_sum(unit, unwritten, &unwritten_ranks));
  if (unwritten_ranks > 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: unit '%s' has no optimizer state on %d of the %d ranks of its shard "
                    "group (none reset or written since its parameters were set); call "
                    "st_unit_write_state or st_unit_optimizer_reset first",
                    __func__, unit->u.name, unwritten_ranks, unit->u.layout.S);
  }
  ST_CHECK(unit_publish(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->optimizer = UNIT_OPTIMIZER_READY;
  return ST_OK;
}
