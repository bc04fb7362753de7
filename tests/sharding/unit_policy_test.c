/* unit_policy_test.c - the ZeRO policies against DESIGN.md's ZeRO table, transcribed here row
 * by row as text, and against its model-state memory formulas; plus the policy's own
 * consistency (what is sharded is what is reduced into a shard and gathered per use). */
#include "sharding/unit_policy.h"

#include <string.h>

#include "tests/testing.h"

/* DESIGN.md, "Parameter units and shards": params, grads, optimizer state, collectives. */
typedef struct design_row {
  const char *params, *grads, *optimizer;
  int all_reduce_grads;       /* "all-reduce grads" (stage 0, split as reduce-scatter + gather) */
  int gather_params_after;    /* "all-gather params after step" */
  int gather_per_unit_passes; /* "all-gather per unit in forward and again in backward" */
} design_row;

static const design_row design[4] = {
    {"full", "full", "full", 1, 0, 0},
    {"full", "full", "shard", 0, 1, 0},
    {"full", "shard (full unit transiently in backward)", "shard", 0, 1, 0},
    {"shard (full unit only between gather and release)", "shard", "shard", 0, 0, 1},
};

static int sharded(const char *cell) { return strncmp(cell, "shard", 5) == 0; }

/* DESIGN.md's model states per element, with p and g the param and reduce bytes. */
static double design_states(int stage, double p, double g, double S) {
  switch (stage) {
    case 0: return p + g + 12;
    case 1: return p + g + 12 / S;
    case 2: return p + (g + 12) / S;
    default: return (p + g + 12) / S;
  }
}

static double policy_states(const unit_policy *pol, double p, double g, double S) {
  return p / (pol->shard_params ? S : 1) + g / (pol->shard_grads ? S : 1) +
         12 / (pol->shard_optimizer ? S : 1);
}

int main(void) {
  for (int stage = 0; stage < 4; stage++) {
    unit_policy pol;
    CHECK_OK(unit_policy_for_stage(stage, &pol));
    const design_row *d = &design[stage];
    CHECK_MSG(pol.shard_params == sharded(d->params), "stage %d params", stage);
    CHECK_MSG(pol.shard_grads == sharded(d->grads), "stage %d grads", stage);
    CHECK_MSG(pol.shard_optimizer == sharded(d->optimizer), "stage %d optimizer", stage);
    CHECK_MSG(pol.transient_grads == (strstr(d->grads, "transiently") != NULL || pol.shard_params),
              "stage %d: full grads transient", stage);
    CHECK_MSG(pol.gather_grads == d->all_reduce_grads, "stage %d gathers grads back", stage);
    CHECK_MSG(pol.publish_params == d->gather_params_after, "stage %d publishes", stage);
    CHECK_MSG((pol.gather_params == UNIT_PARAMS_GATHERED_PER_USE) == d->gather_per_unit_passes,
              "stage %d gathers per use", stage);
    /* Grads held as a shard are reduce-scattered into it; full ones in place. */
    CHECK_MSG((pol.reduce == UNIT_REDUCE_TO_SHARD) == pol.shard_grads, "stage %d reduce", stage);
    /* Sharded params are gathered for use and never published; kept params are either
     * published (sharded optimizer) or owned whole. */
    CHECK_MSG((pol.gather_params == UNIT_PARAMS_GATHERED_PER_USE) == pol.shard_params,
              "stage %d gather follows params", stage);
    CHECK_MSG(pol.publish_params == (!pol.shard_params && pol.shard_optimizer),
              "stage %d publish follows optimizer", stage);
    const double dtypes[2][2] = {{4, 4}, {2, 2}};
    for (int k = 0; k < 2; k++) {
      for (int S = 1; S <= 8; S *= 2) {
        const double p = dtypes[k][0], g = dtypes[k][1];
        CHECK_NEAR(policy_states(&pol, p, g, S), design_states(stage, p, g, S), 1e-12);
      }
    }
  }
  unit_policy pol;
  CHECK_STATUS(unit_policy_for_stage(4, &pol), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "stage 4") != NULL);
  CHECK_STATUS(unit_policy_for_stage(-1, &pol), ST_ERR_INVALID_ARG);
  return test_finish("unit_policy_test");
}
