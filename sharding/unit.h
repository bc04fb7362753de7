/* unit.h - an FSDP unit: parameters declared together, flattened by unit_layout, and the
 * buffers and collectives of its ZeRO stage (DESIGN.md's table) under a mixed-precision policy.
 * Models declare parameters here (C/C++ users through the public st_unit, public_unit.h),
 * compute on the full (TP-local) buffers between gather and release, and the optimizer works
 * on the owned range.
 *
 * Buffers; p and g are the param and reduce dtypes; the category is the memory planner's:
 *
 *   buffer        dtype  stage 0          stage 1          stage 2          stage 3
 *   params        p      full, resident   full, resident   full, resident   full while gathered
 *   param_shard   p      = params         view of params   view of params   shard, resident
 *   grads         g      full, resident   full, resident   full in backward full in backward
 *   grad_shard    g      view of grads    view of grads    shard, resident  shard, resident
 *   master, m, v  fp32   full             shard            shard            shard
 *
 * Resident buffers are PARAMS, GRADS and OPTIMIZER; the full ones that exist only in use are
 * GATHERED (stage 3's params from gather to release; stages 2-3's grads from the unit's first
 * backward of a step until its reduction). Gradients are stored in g, not fp32: that is what
 * the ZeRO memory formulas count (docs/SHARDING.md, "Mixed precision").
 *
 * Where the device's kernels do not compute in a low-precision dtype (kernel_kind_computes_in: the
 * CPU with bf16), a buffer of that dtype in use has an fp32 compute copy (GATHERED): compute_params
 * from gather_wait to release (filled from the params), compute_grads from grads_begin to
 * grads_end (filled from the grads, which hold the earlier micro-batches' sum, and written back
 * rounded). The descriptors below point at these copies where they exist, else at the buffers
 * themselves. The copies are converted and the buffers zeroed by the unit's kernel backend
 * (kernel_cast, stream_memset) on C, in order with the compute that reads them.
 *
 * Reduction (last micro-batch, after the unit's backward), the same arithmetic at every stage:
 * reduce-scatter over the shard group in g (in place at stages 0-1), then, with R > 1,
 * all-reduce of the grad shard over the replicate group; stage 0 then all-gathers the shards
 * back into its full gradient (a ring all-reduce over the dp group, split so that its sums are
 * exactly those of the sharded stages: equal meshes give bit-identical results at every stage).
 * The optimizer updates the master and writes the owned range of the params in p; publishing
 * then all-gathers the params at stages 1-2. Every rank of a group calls these in the same
 * order. Gathers and reductions are ordered on the streams of unit_streams.h by events (the
 * schedule is in unit_policy.h); transient full-unit buffers come from its buffer pool.
 *
 * Optimizer offload (unit_offload_optimizer): master, m and v live in host memory (MEM_PINNED,
 * category OPTIMIZER_HOST) and AdamW runs on the host. Where device memory is host RAM (the
 * CPU) the host reads the owned gradients and writes the owned parameters in place, so the
 * arithmetic and the bytes are exactly those of the resident optimizer; elsewhere
 * (offload_staging) the optimizer copies the owned gradients to pinned host memory, updates,
 * and copies the owned parameters back before they are published. */
#ifndef ST_SHARDING_UNIT_H
#define ST_SHARDING_UNIT_H

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/kernels.h"
#include "sharding/comm.h"
#include "sharding/unit_layout.h"
#include "sharding/unit_policy.h"
#include "sharding/unit_streams.h"

/* The mixed-precision policy; {ST_FP32, ST_FP32} (all zero) is plain fp32. */
typedef struct unit_precision {
  st_dtype param;  /* parameters as held, gathered and computed with: fp32, bf16 or fp16 */
  st_dtype reduce; /* gradients as accumulated, stored and reduced: fp32, bf16 or fp16 */
} unit_precision;

typedef struct unit {
  char name[ST_UNIT_NAME_MAX + 1];
  unit_layout layout;
  const st_device *dev;
  const kernel_backend *kb; /* borrowed (unit_use_kernels): casts, and the optimizer's ops */
  st_stream stream;         /* set-up, restore and the optimizer's updates (unit_optimizer_begin) */
  unit_streams *streams;    /* C, G, R and the pool: shared, or private_streams */
  unit_streams private_streams;  /* a unit's own, C = stream, when none is shared */
  st_event grads_ready, reduced; /* recorded on C before the reduction, on R after it */
  st_event params_read; /* recorded on C before the optimizer or publishing writes params */
  st_event updated;     /* recorded on `stream` after the optimizer: G and C wait for it */
  unit_policy policy;   /* the ZeRO stage, as data (unit_policy.h) */
  unit_precision precision;
  int copies_params, copies_grads; /* keeps fp32 compute copies (see above) */
  unit_groups groups;
  int shard_rank;
  int64_t owned_begin, owned_numel;
  void *params, *param_shard;            /* in precision.param */
  void *grads, *grad_shard;              /* in precision.reduce */
  float *compute_params, *compute_grads; /* fp32 copies in use, or NULL */
  float *master, *adam_m, *adam_v;
  int offload_optimizer; /* master, m, v in host memory (see above) */
  int offload_staging;   /* ... and the optimizer stages through pinned host buffers */
  comm_work gather_work; /* the all-gather on G, from gather_start to gather_wait */
  int gather_pending;
  comm_work reduce_work; /* the reduce-scatter on R, from reduce_start to reduce_wait */
  int reduce_pending;
} unit;

/* groups may be NULL for a single-rank unit (stage 0, S = R = 1); precision may be NULL
 * (fp32). A param dtype the device cannot train with is ST_ERR_UNSUPPORTED, a value that is
 * not a dtype ST_ERR_INVALID_ARG. fp16 in either place needs loss scaling (the caller's:
 * optim/loss_scaler.h). */
st_status unit_init(unit *u, const char *name, const st_device *dev, int stage,
                    const unit_precision *precision, const unit_groups *groups, int T, int t);

/* The kernel backend of the unit's device that converts its compute copies and runs its
 * optimizer (optim/unit_optim.h), borrowed from the unit's owner, which keeps it until
 * unit_free; call before unit_allocate. A unit that keeps no copies and whose owner runs no
 * optimizer on it (the sharding tests) needs none. */
void unit_use_kernels(unit *u, const kernel_backend *kb);

/* Declares a parameter (see unit_layout_add); *index receives its position in the unit. */
st_status unit_declare(unit *u, const char *name, int ndim, const int64_t *shape, tp_split split,
                       int blocks, int *index);

/* Makes the unit use a model's shared streams (unit_streams.h; created over the same groups)
 * instead of its own; call before unit_allocate. `streams` must outlive the unit. */
st_status unit_share_streams(unit *u, unit_streams *streams);

/* The host waits for everything the unit's streams were given (unit_streams_step_end): for
 * callers that read its buffers from the host next (the public st_unit calls). */
st_status unit_host_wait(unit *u);

/* Keeps the master weights and Adam's moments in host memory (see above); call before
 * unit_allocate. Staging is chosen from the device: none where its memory is host RAM. */
st_status unit_offload_optimizer(unit *u);

/* Allocates the resident buffers once every parameter is declared (zero-filled). At stage 3
 * the unit starts released; the caller fills the parameters through unit_set_params. */
st_status unit_allocate(unit *u);

void unit_free(unit *u);

/* Writes elements [first, first + count) of the flat parameters (host fp32 values): the master
 * weights' owned part exactly, and in the param dtype the params (the owned part at stage 3,
 * and the full buffer too while gathered) and the compute copy, if any. */
st_status unit_set_params(unit *u, int64_t first, const float *values, int64_t count);

/* The elements [*begin, *end) of the flat parameters unit_set_params keeps on this rank now:
 * all of them while the full parameters are resident, else (stage 3, released) the owned
 * range. An initialiser need compute no others. */
void unit_kept_range(const unit *u, int64_t *begin, int64_t *end);

/* Starts gathering the full parameters on G, into a pooled buffer after its last readers
 * (parameters gathered per use; a no-op when gathered or in flight). */
st_status unit_gather_start(unit *u);
/* Orders C after the gather (a stream wait; the host waits only where the collective backend
 * completes on the host), starting it first if needed; afterwards the parameter descriptors
 * are valid for work on C (and the compute copy exists, where one is kept). */
st_status unit_gather_wait(unit *u);
/* Ends the parameters' use on C: hands the compute copy and, when gathered per use, the full
 * parameters back to the pool, to be reused after C's work so far. */
void unit_release(unit *u);

/* Starts the unit's backward for this micro-batch: the full gradients exist (zeroed at their
 * first use in a step at stages 2-3) and the gradient descriptors are valid. */
st_status unit_grads_begin(unit *u);
/* Ends it: the compute copy, if any, is written back to the gradients and freed. */
st_status unit_grads_end(unit *u);
/* Zeroes the full gradients for a new step where they exist: always at stages 0-1; stages 2-3
 * start a step without any, unless a backward was left unreduced. */
st_status unit_grads_zero(unit *u);
/* Ends the backward (unit_grads_end) and starts the gradient reduction (see above): C records
 * grads-ready, R waits for it and reduce-scatters. */
st_status unit_reduce_start(unit *u);
/* Issues the rest of the reduction on R (a no-op when none is in flight), records reduced and
 * orders C after it: work on C then sees complete owned gradients. Transient full gradients go
 * back to the pool, to be reused after R's work. */
st_status unit_reduce_wait(unit *u);
/* A backward that visits units in turn, on its last micro-batch, after u's backward: finishes
 * the reduction of `earlier` (the unit whose backward ended just before u's; NULL: none), then
 * starts u's. In that order, so that reduced(earlier), which C waits for, is recorded on R
 * before u's reduce-scatter joins R: C goes on with the next unit's backward while u's gradients
 * are reduced, and at most two units' full gradients exist at once. */
st_status unit_reduce_handoff(unit *u, unit *earlier);

/* The owned range, in elements of the flat buffer from owned_begin: the gradients (reduce
 * dtype; the full buffer at stage 0, the shard otherwise) and the parameters (param dtype),
 * which the optimizer overwrites before unit_publish. */
void *unit_owned_grads(const unit *u);
void *unit_owned_params(const unit *u);

/* Zeroes Adam's moments. The master weights come from unit_set_params; with fp32 params they
 * are also copied from the owned parameters, which a caller may have written in place. */
st_status unit_optimizer_reset(unit *u);
/* Parameter k's elements inside the owned range, as flat indices [*lo, *hi) (*lo == *hi: none,
 * still within the parameter's [offset, offset + numel]):
 * what a checkpoint saves and restores of it on this rank. */
void unit_owned_part(const unit *u, int k, int64_t *lo, int64_t *hi);
/* Restores owned elements [first, first + count) (flat indices inside the owned range) from
 * host fp32 values, as a checkpoint holds them: the master weights and Adam's moments exactly,
 * the owned parameters as the master rounded to the param dtype (what AdamW writes). Call
 * unit_publish once the owned range is restored. */
st_status unit_restore_owned(unit *u, int64_t first, int64_t count, const float *master,
                             const float *adam_m, const float *adam_v);

/* Orders the unit's stream, on which the optimizer updates the owned range, after C's work so
 * far: the gradients it produced, the step's scalars computed from them, and its reads of the
 * parameters that the update overwrites. A stream wait, not the host's. */
st_status unit_optimizer_begin(unit *u);

/* After the optimizer wrote the owned parameters through the unit's stream: records updated(u)
 * there and makes every rank's params reflect them, all in stream order (no host wait): stages
 * 1-2 all-gather them on G after updated(u) and C's reads so far, and C is ordered after the
 * gather; otherwise G (stage 3's next gather of the shard) and C (the next forward, the
 * gradients' zeroing, a compute copy's refresh) wait for updated(u). A compute copy in use is
 * refreshed on C. */
st_status unit_publish(unit *u);

/* Writes the full fp32 master weights (layout.numel elements of device memory) into `out`:
 * all-gathered over the shard group, except at stage 0. Collective over the shard group. With
 * the optimizer offloaded, the owned part is first copied to a transient device buffer
 * (collectives take device memory). */
st_status unit_gather_master(unit *u, float *out);

/* Descriptors of a parameter's local slice and of its gradient: the fp32 compute copies where
 * they exist, else the full buffers in their dtypes (valid while gathered, and, for the
 * gradient, between unit_grads_begin and unit_grads_end). */
st_tensor unit_param_tensor(const unit *u, int index);
st_tensor unit_grad_tensor(const unit *u, int index);

#endif /* ST_SHARDING_UNIT_H */
