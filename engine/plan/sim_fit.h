/* sim_fit.h - `plan --fit`'s search: for a model, a number of GPUs, their memory and a global
 * batch, every configuration the engine can run (mesh R x S x T, ZeRO stage, micro-batch and
 * gradient accumulation, prefetch depth and resharding at stage 3, the optimizer offloaded to
 * the host or not, activation recompute none, gelu or block), dropped when the planner's memory
 * per rank exceeds the GPU's (the device's part: an offloaded optimizer's state lives in host
 * memory), ranked by the simulator's tokens/s (recompute's extra forward included, so it wins
 * only where the memory it frees buys a faster configuration).
 *
 * The search is an odometer over a list of dimensions (sim_fit.c): each dimension lists its
 * values for the request and applies one to a candidate. */
#ifndef ST_ENGINE_PLAN_SIM_FIT_H
#define ST_ENGINE_PLAN_SIM_FIT_H

#include <stdint.h>

#include "engine/plan/planner.h"
#include "engine/plan/sim_hw.h"
#include "engine/plan/sim_schedule.h"

typedef struct fit_request {
  gpt_config cfg;        /* the model (finished for tp 1; each candidate re-checks its T) */
  int gpus;              /* world size */
  double gpu_gib;        /* memory per GPU the plan must fit in */
  int64_t global_tokens; /* tokens per optimizer step: a multiple of the sequence length */
  unit_precision precision;
  int max_grad_accum; /* the engine's bound on micro-batches per step */
} fit_request;

typedef struct fit_candidate {
  plan_input in;
  sim_result r;
  memory_plan mp;
} fit_candidate;

typedef struct fit_stats {
  long enumerated; /* configurations the engine could run */
  long fitting;    /* ... whose memory fits */
} fit_stats;

/* The best `k` fitting candidates, fastest first, into best[0..*found). ST_ERR_INVALID_ARG when
 * the request itself is impossible (a global batch that is not whole sequences, no GPUs). */
st_status sim_fit(const sim_hardware *hw, const fit_request *req, fit_candidate *best, int k,
                  int *found, fit_stats *stats);

#endif /* ST_ENGINE_PLAN_SIM_FIT_H */
