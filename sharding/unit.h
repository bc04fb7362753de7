/* unit.h - an FSDP unit: a set of parameters declared together, flattened by unit_layout, with
 * the buffers a rank keeps for it. Models (and C/C++ users) declare parameters here and read
 * them through descriptors; the optimizer walks the owned shard of the flat buffers.
 *
 * Buffers (owner: the unit, freed by unit_free; categories as the memory planner counts them):
 *   params  [numel]        fp32, MEM_PARAMS     the TP slice of every parameter, flat
 *   grads   [numel]        fp32, MEM_GRADS      gradients, same layout, accumulated
 *   master, adam_m, adam_v [shard_numel] fp32, MEM_OPTIMIZER   this rank's shard
 * With one shard (S = 1) the shard is the whole buffer. Sharded stages (gather, release,
 * reduce-scatter) build on this layout. */
#ifndef ST_SHARDING_UNIT_H
#define ST_SHARDING_UNIT_H

#include "core/device.h"
#include "core/tensor.h"
#include "sharding/unit_layout.h"

typedef struct unit {
  char name[64];
  unit_layout layout;
  const st_device *dev;
  int shard_rank;
  float *params;
  float *grads;
  float *master;
  float *adam_m;
  float *adam_v;
} unit;

st_status unit_init(unit *u, const char *name, const st_device *dev, int S, int s, int T, int t);

/* Declares a parameter (see unit_layout_add); *index receives its position in the unit. */
st_status unit_declare(unit *u, const char *name, int ndim, const int64_t *shape, tp_split split,
                       int blocks, int *index);

/* Allocates the buffers once every parameter is declared; params and grads start at zero. */
st_status unit_allocate(unit *u);

void unit_free(unit *u);

/* Descriptors of a parameter's local slice and of its gradient, in the flat buffers. */
st_tensor unit_param_tensor(const unit *u, int index);
st_tensor unit_grad_tensor(const unit *u, int index);

/* First flat element of the owned shard. */
int64_t unit_shard_begin(const unit *u);

#endif /* ST_SHARDING_UNIT_H */
