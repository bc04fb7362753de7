/* unit.h - an FSDP unit: parameters declared together, flattened by unit_layout, and the
 * buffers and collectives of its ZeRO stage (DESIGN.md's table). Models declare parameters
 * here (C/C++ users through the public st_unit, public_unit.h), compute on the full (TP-local)
 * buffers between gather and release, and the optimizer works on the owned range.
 *
 * Buffers (all fp32; owner: the unit; categories as the memory planner counts them):
 *                 stage 0            stage 1              stage 2               stage 3
 *   params        full, resident     full, resident       full, resident        full while gathered
 * (GATHERED) param_shard   = params           view of params       view of params        shard,
 * resident (PARAMS) grads         full, resident     full, resident       full from the first
 * backward until reduced (GATHERED) grad_shard    view of grads      view of grads        shard,
 * resident (GRADS) master, adam_m, adam_v: the owned range: the whole buffer at stage 0, the shard
 * otherwise. Reduction (last micro-batch, after the unit's backward), the same arithmetic at every
 * stage: reduce-scatter over the shard group (in place at stages 0-1), then, with R > 1, all-reduce
 * of the grad shard over the replicate group; stage 0 then all-gathers the shards back into
 * its full gradient (a ring all-reduce over the dp group, split so that its sums are exactly
 * those of the sharded stages: equal meshes give bit-identical results at every stage).
 * Publishing after the optimizer: stage 0 copies the master, stages 1-2 all-gather it over the
 * shard group, stage 3 keeps it sharded. Every rank of a group calls these in the same order. */
#ifndef ST_SHARDING_UNIT_H
#define ST_SHARDING_UNIT_H

#include "core/device.h"
#include "core/tensor.h"
#include "sharding/comm.h"
#include "sharding/unit_layout.h"

/* The groups a unit talks on; each may have size 1. */
typedef struct unit_groups {
  comm *shard;     /* S ranks holding the shards of this unit */
  comm *replicate; /* R ranks holding the same shard */
} unit_groups;

typedef struct unit {
  char name[64];
  unit_layout layout;
  const st_device *dev;
  st_stream stream; /* copies and fills of this unit's buffers */
  int stage;
  unit_groups groups;
  int shard_rank;
  int64_t owned_begin, owned_numel;
  float *params, *param_shard;
  float *grads, *grad_shard;
  float *master, *adam_m, *adam_v;
  comm_work gather_work;
  int gather_pending;
  comm_work reduce_work;
  int reduce_pending;
} unit;

/* groups may be NULL for a single-rank unit (stage 0, S = R = 1). */
st_status unit_init(unit *u, const char *name, const st_device *dev, int stage,
                    const unit_groups *groups, int T, int t);

/* Declares a parameter (see unit_layout_add); *index receives its position in the unit. */
st_status unit_declare(unit *u, const char *name, int ndim, const int64_t *shape, tp_split split,
                       int blocks, int *index);

/* Allocates the resident buffers once every parameter is declared (zero-filled). At stage 3
 * the unit starts released; the caller fills the parameters through unit_set_param_range. */
st_status unit_allocate(unit *u);

void unit_free(unit *u);

/* Writes elements [first, first + count) of the flat parameter buffer on every stage: into the
 * resident full buffer, and the owned part into the shard (stage 3 keeps only that). */
st_status unit_set_params(unit *u, int64_t first, const float *values, int64_t count);

/* Starts gathering the full parameters (stage 3; a no-op when gathered or in flight). */
st_status unit_gather_start(unit *u);
/* Waits for the gather, starting it first if needed; afterwards params is the full buffer. */
st_status unit_gather_wait(unit *u);
/* Frees the full parameters (stage 3 only; other stages keep them). */
void unit_release(unit *u);
int unit_is_gathered(const unit *u);

/* Makes the full gradient buffer exist (zeroed at first use in a step at stages 2-3). */
st_status unit_grads_ensure(unit *u);
/* Zeroes the full gradients for a new step where they exist: always at stages 0-1; stages 2-3
 * start a step without any, unless a backward was left unreduced. */
st_status unit_grads_zero(unit *u);
/* Starts the unit's gradient reduction (see the header comment). */
st_status unit_reduce_start(unit *u);
/* Finishes it (a no-op when none is in flight): the owned gradients are then complete;
 * stages 2-3 free the full gradients. */
st_status unit_reduce_wait(unit *u);

/* The gradients of the owned range (the full buffer at stage 0, the shard otherwise). */
float *unit_owned_grads(const unit *u);

/* Copies the parameters' owned range into the master weights and zeroes Adam's moments. */
st_status unit_optimizer_reset(unit *u);
/* After the optimizer updated the master: make the parameters reflect it (see above). */
st_status unit_publish(unit *u);

/* Descriptors of a parameter's local slice and of its gradient in the full buffers (valid while
 * gathered, and, for the gradient, while the full gradients exist). */
st_tensor unit_param_tensor(const unit *u, int index);
st_tensor unit_grad_tensor(const unit *u, int index);

#endif /* ST_SHARDING_UNIT_H */
