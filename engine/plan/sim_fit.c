/* sim_fit.c - the configuration search of `plan --fit` (see sim_fit.h). Every dimension lists
 * values that do not depend on the others; a combination the engine cannot run (a mesh that
 * does not divide the GPUs, a gradient accumulation that does not split the global batch into
 * whole micro-batches, prefetch or resharding variations below stage 3) is skipped when its
 * value is applied. Memory is checked before the step is simulated, so configurations that do
 * not fit cost little. */
#include "engine/plan/sim_fit.h"

#include <limits.h>
#include <string.h>

#include "core/error.h"
#include "engine/plan/fit.h"
#include "engine/plan/sim_report.h"

/* 240: the most divisors a GPU count up to PLAN_MAX_RANKS has (720720's), so that no tp or
 * replicate size is left out; also the bound on max_grad_accum. */
enum { FIT_MAX_VALUES = 240, FIT_MAX_DIMS = 8 };

typedef struct fit_ctx {
  const sim_hardware *hw;
  const fit_request *req;
  int64_t sequences; /* global batch in sequences */
} fit_ctx;

/* A dimension of the search: applies `value` to a candidate whose earlier dimensions are set;
 * returns 0 when the combination cannot run. */
typedef struct fit_dim {
  const char *name;
  int (*apply)(const fit_ctx *x, int value, plan_input *in);
  int count;
  int values[FIT_MAX_VALUES];
} fit_dim;

static int apply_tp(const fit_ctx *x, int T, plan_input *in) {
  if (x->req->gpus % T || T > x->hw->gpus_per_node) return 0;
  in->T = T;
  in->cfg = x->req->cfg;
  if (gpt_config_finish(&in->cfg, T) != ST_OK) {
    st_error_clear();
    return 0;
  }
  return 1;
}

static int apply_replicate(const fit_ctx *x, int R, plan_input *in) {
  const int dp = x->req->gpus / in->T;
  if (dp % R) return 0;
  in->R = R;
  in->S = dp / R;
  return 1;
}

static int apply_stage(const fit_ctx *x, int stage, plan_input *in) {
  (void)x;
  in->stage = stage;
  return 1;
}

/* The micro-batch follows from the accumulation: sequences / (R S accum), where that is whole
 * and an int. Enumerating the (at most 64) accumulations, not the micro-batches, keeps the
 * search short however large the batch. */
static int apply_grad_accum(const fit_ctx *x, int accum, plan_input *in) {
  const int64_t per_micro_batch = (int64_t)accum * in->R * in->S;
  if (x->sequences % per_micro_batch) return 0;
  const int64_t mb = x->sequences / per_micro_batch;
  if (mb > INT_MAX) return 0;
  in->micro_batch = (int)mb;
  in->grad_accum = accum;
  return 1;
}

/* Prefetch depth and resharding only change stage 3's schedule. */
static int apply_prefetch(const fit_ctx *x, int depth, plan_input *in) {
  (void)x;
  if (in->stage != 3 && depth != 1) return 0;
  in->prefetch = depth;
  return 1;
}

/* The optimizer offloaded to the host: always possible where device memory is host RAM (it then
 * changes nothing), else only on hardware that describes its host link. */
static int apply_offload(const fit_ctx *x, int offload, plan_input *in) {
  if (offload && !in->device_is_host && !sim_hw_has_host_link(x->hw)) {
    return 0;
  }
  in->offload_optimizer = offload;
  return 1;
}

static int apply_reshard(const fit_ctx *x, int reshard, plan_input *in) {
  (void)x;
  if (in->stage != 3 && !reshard) return 0;
  in->reshard_after_forward = reshard;
  return 1;
}

static int apply_recompute(const fit_ctx *x, int mode, plan_input *in) {
  (void)x;
  in->recompute = (gpt_recompute)mode;
  return 1;
}

static void add_divisors(fit_dim *d, int n, int cap) {
  for (int v = 1; v <= n && v <= cap; v++) {
    if (n % v == 0) d->values[d->count++] = v;
  }
}

/* The dimensions for this request, in the order they are applied (at most FIT_MAX_DIMS). */
static int make_dims(const fit_ctx *x, fit_dim *dims) {
  const fit_request *r = x->req;
  int n = 0;
  fit_dim *d = &dims[n++];
  *d = (fit_dim){.name = "tp", .apply = apply_tp};
  add_divisors(d, r->gpus, x->hw->gpus_per_node);
  d = &dims[n++];
  *d = (fit_dim){.name = "dp_replicate", .apply = apply_replicate};
  add_divisors(d, r->gpus, r->gpus);
  d = &dims[n++];
  *d = (fit_dim){.name = "zero", .apply = apply_stage, .count = 4, .values = {0, 1, 2, 3}};
  d = &dims[n++];
  *d = (fit_dim){.name = "grad_accum", .apply = apply_grad_accum};
  for (int accum = 1; accum <= r->max_grad_accum; accum++) d->values[d->count++] = accum;
  d = &dims[n++];
  *d = (fit_dim){.name = "prefetch", .apply = apply_prefetch, .count = 2, .values = {1, 2}};
  d = &dims[n++];
  *d = (fit_dim){.name = "reshard", .apply = apply_reshard, .count = 2, .values = {1, 0}};
  d = &dims[n++];
  *d = (fit_dim){.name = "offload", .apply = apply_offload, .count = 2, .values = {0, 1}};
  d = &dims[n++];
  *d = (fit_dim){.name = "recompute",
                 .apply = apply_recompute,
                 .count = 3,
                 .values = {GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_GELU, GPT_RECOMPUTE_BLOCK}};
  return n;
}

/* Whether a ranks before b: faster, or as fast (within a part in a million: configurations
 * that do the same work in a different order tie up to rounding) and smaller. */
static int ranks_before(const fit_candidate *a, const fit_candidate *b) {
  const double tie = 1e-6 * b->r.step_s;
  if (a->r.step_s < b->r.step_s - tie) return 1;
  if (a->r.step_s > b->r.step_s + tie) return 0;
  return a->mp.total < b->mp.total;
}

/* Keeps best[] sorted (ranks_before), at most k entries. */
static void consider(fit_candidate *best, int k, int *found, const fit_candidate *c) {
  int at = *found;
  while (at > 0 && ranks_before(c, &best[at - 1])) at--;
  if (at >= k) return;
  const int last = *found < k ? *found : k - 1;
  memmove(&best[at + 1], &best[at], (size_t)(last - at) * sizeof *best);
  best[at] = *c;
  if (*found < k) (*found)++;
}

static st_status evaluate(const fit_ctx *x, const plan_input *in, fit_candidate *best, int k,
                          int *found, fit_stats *stats) {
  fit_candidate c = {.in = *in};
  stats->enumerated++;
  ST_CHECK(sim_memory(x->hw, &c.in, &c.mp));
  if ((double)fit_need(&c.in, &c.mp) > x->req->gpu_gib * 1073741824.0) return ST_OK;
  stats->fitting++;
  ST_CHECK(sim_step(x->hw, &c.in, &c.r));
  consider(best, k, found, &c);
  return ST_OK;
}

/* Why no configuration could even run (nothing to weigh against memory): no tensor-parallel
 * size divides both the GPUs and the model, or no data-parallel size (GPUs / T) divides the
 * global batch's sequences into at most max_grad_accum micro-batches. */
static st_status why_none(const fit_ctx *x, const fit_dim *tp) {
  char sizes[256] = "";
  size_t used = 0;
  int divides = 0;
  for (int i = 0; i < tp->count; i++) {
    plan_input probe = {0};
    if (!apply_tp(x, tp->values[i], &probe)) continue;
    const int dp = x->req->gpus / tp->values[i];
    if (x->sequences % dp == 0) divides = 1;
    if (used < sizeof sizes) {
      used += (size_t)snprintf(sizes + used, sizeof sizes - used, "%s%d", used ? ", " : "", dp);
    }
  }
  if (!used) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--fit: no tensor-parallel size divides both the %d GPUs and the model's %d "
                    "heads (at most %d GPUs per node)",
                    x->req->gpus, x->req->cfg.n_head, x->hw->gpus_per_node);
  }
  if (!divides) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--fit: the global batch of %lld sequences cannot be split evenly over %d "
                    "GPUs (data-parallel sizes %s, for the tensor-parallel sizes the heads allow)",
                    (long long)x->sequences, x->req->gpus, sizes);
  }
  return st_error(ST_ERR_INVALID_ARG,
                  "--fit: the global batch of %lld sequences needs more than %d micro-batches of "
                  "gradient accumulation on %d GPU%s (data-parallel sizes %s)",
                  (long long)x->sequences, x->req->max_grad_accum, x->req->gpus,
                  x->req->gpus == 1 ? "" : "s", sizes);
}

st_status sim_fit(const sim_hardware *hw, const fit_request *req, fit_candidate *best, int k,
                  int *found, fit_stats *stats) {
  *found = 0;
  memset(stats, 0, sizeof *stats);
  const int seq = req->cfg.max_seq;
  if (req->gpus < 1 || req->gpus > PLAN_MAX_RANKS || k < 1 || req->gpu_gib <= 0 ||
      req->max_grad_accum < 1 || req->max_grad_accum > FIT_MAX_VALUES) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--fit: %d GPUs of %g GiB, top %d, at most %d micro-batches: want 1 to %d "
                    "GPUs, some memory, a top of 1 or more and 1 to %d micro-batches",
                    req->gpus, req->gpu_gib, k, req->max_grad_accum, PLAN_MAX_RANKS,
                    FIT_MAX_VALUES);
  }
  if (req->global_tokens < seq || req->global_tokens % seq) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--global-batch %lld tokens is not a whole number of %d-token sequences",
                    (long long)req->global_tokens, seq);
  }
  const fit_ctx x = {hw, req, req->global_tokens / seq};
  fit_dim dims[FIT_MAX_DIMS];
  const int nd = make_dims(&x, dims);
  plan_input base = {.cfg = req->cfg, .seq_len = seq, .precision = req->precision};
  sim_device_fields(hw, &base);
  /* The odometer: idx[d] is dimension d's value; `cand[d]` the candidate with dimensions
   * 0..d applied, so a change at d re-applies only d and the ones after it. */
  int idx[FIT_MAX_DIMS] = {0};
  plan_input cand[FIT_MAX_DIMS + 1];
  cand[0] = base;
  int d = 0;
  while (d >= 0) {
    if (idx[d] == dims[d].count) { /* dimension exhausted: carry into the previous one */
      idx[d] = 0;
      if (--d >= 0) idx[d]++;
      continue;
    }
    cand[d + 1] = cand[d];
    if (!dims[d].apply(&x, dims[d].values[idx[d]], &cand[d + 1])) {
      idx[d]++;
      continue;
    }
    if (d + 1 < nd) {
      d++;
      continue;
    }
    ST_CHECK(evaluate(&x, &cand[nd], best, k, found, stats));
    idx[d]++;
  }
  return stats->enumerated ? ST_OK : why_none(&x, &dims[0]);
}
