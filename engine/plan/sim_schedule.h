/* sim_schedule.h - one training step's time, replayed in the engine's own order on a model of
 * a rank: a compute stream and a queue of non-blocking collectives on the data-parallel links.
 *
 * The order is the engine's (engine/model/gpt_forward.c, gpt_backward.c, train_step.c, sharding/
 * unit.c): per micro-batch, the forward acquires units in order (waits for the unit's gather,
 * then starts the gathers of the next `prefetch` units), releases each block after its forward
 * when resharding; the backward acquires them in reverse (the embedding, kept from the forward,
 * excepted), and on the last micro-batch, after each unit's backward, finishes the previous
 * unit's reduction (its reduce-scatter, then its replicate all-reduce and, at stage 0, the
 * all-gather of the gradients, both blocking) and then starts this unit's reduce-scatter; after
 * the last micro-batch: the embedding's reduction, the gradient norm (a sum of squares and two
 * scalar all-reduces), the loss mean, AdamW on the owned shard of each unit and, at stages 1-2,
 * the blocking all-gather of its updated parameters. Tensor-parallel all-reduces (two per
 * block forward, two backward) block the compute stream. With activation recompute, every
 * block's backward but the last block's starts with the recompute (engine/model/
 * gpt_recompute.c), whose block forward repeats one tensor-parallel all-reduce.
 *
 * A non-blocking collective (stage 3's gathers, the reduce-scatters) is queued at the time it is
 * issued; collectives run one at a time in issue order. With hardware overlap, one runs while
 * the stream computes, from max(issue, end of the previous one); without (MPI on the CPU: a
 * request progresses only inside MPI calls), it runs when the stream waits for it, after every
 * collective issued before it. Waiting on an unfinished collective is exposed communication.
 * Ranks of one node share its compute slots: with more ranks than slots, every compute time
 * and every collective (on a CPU the same cores do its copies) stretches by ranks / slots. */
#ifndef ST_ENGINE_PLAN_SIM_SCHEDULE_H
#define ST_ENGINE_PLAN_SIM_SCHEDULE_H

#include "engine/plan/planner.h"
#include "engine/plan/sim_hw.h"

/* The collectives of a step, for the breakdown. */
typedef enum sim_comm_kind {
  SIM_COMM_TP,        /* tp all-reduces of activations (blocking) */
  SIM_COMM_GATHER,    /* stage 3's parameter all-gathers (non-blocking) */
  SIM_COMM_REDUCE,    /* reduce-scatters of gradients (non-blocking) */
  SIM_COMM_REPLICATE, /* replicate all-reduces of gradient shards (blocking) */
  SIM_COMM_PUBLISH,   /* stage 0's gradient and stages 1-2's parameter all-gathers (blocking) */
  SIM_COMM_SCALAR,    /* the gradient norm's and the loss's scalar all-reduces (blocking) */
  SIM_COMM_COUNT
} sim_comm_kind;

const char *sim_comm_kind_name(sim_comm_kind k);

typedef struct sim_result {
  double step_s;    /* one optimizer step */
  double compute_s; /* time the stream computes (kernels, fills, casts, optimizer) */
  double optimizer_s;
  double exposed_s;                /* step_s - compute_s: waiting for or blocked in communication */
  double comm_s[SIM_COMM_COUNT];   /* time each kind of collective takes, in all */
  double class_s[SIM_CLASS_COUNT]; /* compute time per op class */
  double model_flops;              /* per step, whole model: tokens x gpt_config_flops_per_token */
  double tokens_per_s, tokens_per_s_per_gpu, mfu;
  double slowdown; /* compute stretch from shared compute slots (1: none) */
  int world;
} sim_result;

/* The step of `in` (a finished config, mesh, stage, batch, precision) on `hw`: sim_costs, then
 * sim_replay, then throughput and MFU. ST_ERR_INVALID_ARG for a mesh of more than PLAN_MAX_RANKS
 * ranks, and for a step that is not a finite time > 0 with a (normal) throughput and MFU > 0. */
st_status sim_step(const sim_hardware *hw, const plan_input *in, sim_result *out);

/* What the replay is made of, in seconds; index 0 is the embedding unit, 1 any block, 2 the
 * final unit. Compute times are per micro-batch and do not include the slowdown. */
typedef struct sim_costs {
  double fwd[3], bwd[3];                                               /* a unit's compute */
  double fwd_class[3][SIM_CLASS_COUNT], bwd_class[3][SIM_CLASS_COUNT]; /* the same per class */
  double recompute, recompute_class[SIM_CLASS_COUNT]; /* a block's, before its backward */
  double tp_all_reduce;                               /* one, of B x T x C activations */
  double gather[3], reduce_scatter[3], replicate[3];  /* per unit */
  double grad_gather[3], publish[3];                  /* stage 0, stages 1-2 */
  double fill[3];                                     /* zeroing a unit's gradients */
  double cast_params[3], cast_grads[3];               /* one compute copy (CPU, bf16) */
  double sumsq[3], adamw[3];                          /* on the owned shard; sumsq with fp16
                                                         includes loss scaling's finite check */
  double adamw_fill; /* once a step before the units' AdamW: an offloaded pipeline's start */
  double scalars;    /* norm and loss all-reduces */
  double slowdown;   /* compute stretch, >= 1 */
  int overlap;       /* hardware overlap (sim_hw.h) */
} sim_costs;

/* The costs of `in` on `hw` (collectives placed on the mesh's groups). */
st_status sim_costs_of(const sim_hardware *hw, const plan_input *in, sim_costs *out);

/* Replays one step of `in` (its stage, mesh, layers, micro-batches, prefetch, resharding and
 * compute copies) from `costs`: fills step_s, compute_s, optimizer_s, exposed_s, comm_s,
 * class_s and slowdown of `out` (the rest stays 0). */
st_status sim_replay(const plan_input *in, const sim_costs *costs, sim_result *out);

#endif /* ST_ENGINE_PLAN_SIM_SCHEDULE_H */
