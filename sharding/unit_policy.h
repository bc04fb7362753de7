/* unit_policy.h - a ZeRO stage as data: which of a unit's states are sharded, when its
 * parameters are gathered, which collectives reduce its gradients and publish its parameters.
 * Derived once from the stage (unit_policy_for_stage, a pure function); the unit (unit.c), the
 * memory and communication planner (engine/plan/planner.c) and the step simulator
 * (engine/plan/sim_schedule.c) read the policy, never the stage.
 *
 * The table (DESIGN.md's ZeRO table; S = shard group, R = replicate group):
 *
 *   field             stage 0   stage 1   stage 2   stage 3
 *   shard_params      no        no        no        yes  (full params only gathered)
 *   shard_grads       no        no        yes       yes  (grads kept as a shard)
 *   shard_optimizer   no        yes       yes       yes  (master, m, v on the owned range)
 *   gather_params     kept      kept      kept      forward and backward
 *   transient_grads   no        no        yes       yes  (full grads: first backward to reduced)
 *   reduce            in place  in place  to shard  to shard
 *   gather_grads      yes       no        no        no   (stage 0's split all-reduce)
 *   publish_params    no        yes       yes       no   (all-gather after the optimizer)
 *
 * One training step, unit u, in the order every rank issues it (C compute stream, G gather
 * stream, R reduce stream; docs/ARCHITECTURE.md, "Streams and events"):
 *
 *   when                       stream  what                                      stages
 *   forward, before u          G       all-gather params (prefetch ahead)        gather_params
 *   forward, before u          C       wait gathered(u)                          gather_params
 *   forward, after u           C->pool release params (unless kept to backward)  gather_params
 *   backward, before u         G, C    gather again, as in the forward           gather_params
 *   backward, first use        C       full grads from the pool, zeroed          transient_grads
 *   backward, after u          R       wait grads-ready(u); reduce-scatter       all
 *                                      (in place within the full grads, or into the shard)
 *   backward, one unit later   R       replicate all-reduce of the shard (R > 1) all
 *                              R       all-gather the shards back into the grads gather_grads
 *                              C       wait reduced(u); full grads to the pool   transient_grads
 *   optimizer                  C       norm and AdamW on the owned range         all
 *   after the optimizer        G, C    G waits C's reads; all-gather the updated publish_params
 *                                      params; C waits published(u)
 */
#ifndef ST_SHARDING_UNIT_POLICY_H
#define ST_SHARDING_UNIT_POLICY_H

#include "shardtrain.h"

/* When a unit's full parameters exist. */
typedef enum unit_gather {
  UNIT_PARAMS_KEPT = 0,        /* resident: never gathered during a step */
  UNIT_PARAMS_GATHERED_PER_USE /* all-gathered before the forward and again before the backward */
} unit_gather;

/* Where the gradient reduce-scatter leaves each rank's shard. */
typedef enum unit_reduce {
  UNIT_REDUCE_IN_PLACE = 0, /* on the rank's own piece of the resident full gradients */
  UNIT_REDUCE_TO_SHARD      /* into a resident shard; the full gradients are then dropped */
} unit_reduce;

typedef struct unit_policy {
  int shard_params;    /* the resident params are the owned shard only */
  int shard_grads;     /* the resident grads are the owned shard only */
  int shard_optimizer; /* master, m and v (and the owned range) are the shard, not everything */
  unit_gather gather_params;
  int transient_grads; /* full grads exist from the unit's first backward of a step to reduced */
  unit_reduce reduce;
  int gather_grads;   /* the reduced shards are all-gathered back into the full gradients */
  int publish_params; /* the updated owned params are all-gathered after the optimizer */
} unit_policy;

/* The policy of ZeRO stage 0..3 (table above); ST_ERR_INVALID_ARG, naming the stage, else. */
st_status unit_policy_for_stage(int stage, unit_policy *out);

#endif /* ST_SHARDING_UNIT_POLICY_H */
