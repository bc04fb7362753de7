/* unit_policy.c - the ZeRO stages' policies (unit_policy.h holds the table this encodes). */
#include "sharding/unit_policy.h"

#include "core/error.h"

static const unit_policy policies[4] = {
    [0] = {.gather_params = UNIT_PARAMS_KEPT, .reduce = UNIT_REDUCE_IN_PLACE, .gather_grads = 1},
    [1] = {.shard_optimizer = 1,
           .gather_params = UNIT_PARAMS_KEPT,
           .reduce = UNIT_REDUCE_IN_PLACE,
           .publish_params = 1},
    [2] = {.shard_grads = 1,
           .shard_optimizer = 1,
           .gather_params = UNIT_PARAMS_KEPT,
           .transient_grads = 1,
           .reduce = UNIT_REDUCE_TO_SHARD,
           .publish_params = 1},
    [3] = {.shard_params = 1,
           .shard_grads = 1,
           .shard_optimizer = 1,
           .gather_params = UNIT_PARAMS_GATHERED_PER_USE,
           .transient_grads = 1,
           .reduce = UNIT_REDUCE_TO_SHARD},
};

st_status unit_policy_for_stage(int stage, unit_policy *out) {
  if (stage < 0 || stage > 3) {
    return st_error(ST_ERR_INVALID_ARG, "ZeRO stage %d is not 0, 1, 2 or 3", stage);
  }
  *out = policies[stage];
  return ST_OK;
}
