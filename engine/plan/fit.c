/* fit.c - the fit verdict and the search for the cheapest change that fits (fit.h). Each
 * candidate is a whole run planned by plan_memory, so a suggestion is exactly as good as the
 * planner. */
#include "engine/plan/fit.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "engine/model/gpt.h"

uint64_t fit_need(const plan_input *in, const memory_plan *plan) {
  return in->device_is_host ? plan->total : plan->device_bytes;
}

int fit_refused(uint64_t need, uint64_t limit) {
  /* need * (100 - tolerance) / 100 > limit, in exact integer arithmetic. */
  const unsigned __int128 kept = (unsigned __int128)need * (100 - FIT_PLANNER_TOLERANCE_PERCENT);
  return kept > (unsigned __int128)limit * 100;
}

/* Plans `run`; *fits = its prediction is within `limit`. */
static st_status try_run(const plan_input *run, uint64_t limit, fit_suggestion *out,
                         fit_change change, int batch_factor, int *fits) {
  memory_plan plan;
  ST_CHECK(plan_memory(run, &plan));
  const uint64_t need = fit_need(run, &plan);
  *fits = need <= limit;
  if (*fits) *out = (fit_suggestion){change, *run, need, batch_factor};
  return ST_OK;
}

static st_status try_zero(const plan_input *in, uint64_t limit, fit_suggestion *out, int *fits) {
  for (int stage = in->stage + 1; stage <= 3 && !*fits; stage++) {
    plan_input run = *in;
    run.stage = stage;
    ST_CHECK(try_run(&run, limit, out, FIT_ZERO, 1, fits));
  }
  return ST_OK;
}

/* micro-batch x grad-accum stays the same; the largest micro-batch that fits. */
static st_status try_micro_batch(const plan_input *in, uint64_t limit, const fit_bounds *b,
                                 fit_suggestion *out, int *fits) {
  const int64_t per_rank = (int64_t)in->micro_batch * in->grad_accum;
  for (int accum = in->grad_accum + 1; accum <= b->max_grad_accum && !*fits; accum++) {
    if (per_rank % accum) continue;
    plan_input run = *in;
    run.grad_accum = accum;
    run.micro_batch = (int)(per_rank / accum);
    ST_CHECK(try_run(&run, limit, out, FIT_MICRO_BATCH, 1, fits));
  }
  return ST_OK;
}

static st_status try_bf16(const plan_input *in, uint64_t limit, const fit_bounds *b,
                          fit_suggestion *out, int *fits) {
  if (!b->bf16_possible) return ST_OK;
  const unit_precision tries[2] = {{ST_BF16, in->precision.reduce}, {ST_BF16, ST_BF16}};
  for (int i = 0; i < 2 && !*fits; i++) {
    if (tries[i].param == in->precision.param && tries[i].reduce == in->precision.reduce) continue;
    /* bf16 parameters keep the run's gradient dtype where the kernels write it beside bf16
     * activations (fp32 on a GPU: 2 bytes per parameter saved, gradients still accumulated in
     * fp32); a pair gpt_create would refuse (fp16 gradients) is skipped for bf16/bf16. */
    if (gpt_check_precision(in->device, tries[i]) != ST_OK) {
      st_error_clear();
      continue;
    }
    plan_input run = *in;
    run.precision = tries[i];
    ST_CHECK(try_run(&run, limit, out, FIT_BF16, 1, fits));
  }
  return ST_OK;
}

static st_status try_offload(const plan_input *in, uint64_t limit, fit_suggestion *out, int *fits) {
  /* Where device memory is host RAM, offloading moves nothing out of the budget. */
  if (in->offload_optimizer || in->device_is_host) return ST_OK;
  plan_input run = *in;
  run.offload_optimizer = 1;
  return try_run(&run, limit, out, FIT_OFFLOAD, 1, fits);
}

/* Recompute `mode`, where the run does not recompute at least as much already. */
static st_status try_recompute(const plan_input *in, uint64_t limit, gpt_recompute mode,
                               fit_suggestion *out, int *fits) {
  if (in->recompute >= mode) return ST_OK;
  plan_input run = *in;
  run.recompute = mode;
  return try_run(&run, limit, out, FIT_RECOMPUTE, 1, fits);
}

static int in_list(const int *list, int n, int x) {
  for (int i = 0; i < n; i++) {
    if (list[i] == x) return 1;
  }
  return 0;
}

/* Candidate factors k of the shard group, ascending: the divisors of the micro-batch and of
 * grad-accum (the global batch can stay) and the powers of two, while R x kS x T <= max. */
static int rank_factors(const plan_input *in, int max_ranks, int *k, int capacity) {
  const int64_t world = (int64_t)in->R * in->S * in->T;
  int n = 0;
  for (int64_t f = 2; world * f <= max_ranks && n < capacity; f++) {
    const int divides = in->micro_batch % f == 0 || in->grad_accum % f == 0;
    const int power_of_two = (f & (f - 1)) == 0;
    if ((divides || power_of_two) && !in_list(k, n, (int)f)) k[n++] = (int)f;
  }
  return n;
}

/* S becomes kS; the global batch stays by dividing the micro-batch (less activation memory)
 * or else grad-accum by k, or else grows k times. The current stage first, then ZeRO-3. */
static st_status try_ranks(const plan_input *in, uint64_t limit, const fit_bounds *b,
                           fit_suggestion *out, int *fits) {
  int factors[512];
  const int n = rank_factors(in, b->max_ranks, factors, 512);
  for (int i = 0; i < n && !*fits; i++) {
    const int k = factors[i];
    plan_input run = *in;
    run.S = in->S * k;
    int batch_factor = 1;
    if (in->micro_batch % k == 0) {
      run.micro_batch = in->micro_batch / k;
    } else if (in->grad_accum % k == 0) {
      run.grad_accum = in->grad_accum / k;
    } else {
      batch_factor = k;
    }
    ST_CHECK(try_run(&run, limit, out, FIT_RANKS, batch_factor, fits));
    if (!*fits && in->stage < 3) {
      run.stage = 3;
      ST_CHECK(try_run(&run, limit, out, FIT_RANKS, batch_factor, fits));
    }
  }
  return ST_OK;
}

st_status fit_suggest(const plan_input *in, uint64_t limit, const fit_bounds *bounds,
                      fit_suggestion *out) {
  *out = (fit_suggestion){FIT_NOTHING, *in, 0, 1};
  int fits = 0;
  ST_CHECK(try_zero(in, limit, out, &fits));
  if (!fits) ST_CHECK(try_recompute(in, limit, GPT_RECOMPUTE_GELU, out, &fits));
  if (!fits) ST_CHECK(try_micro_batch(in, limit, bounds, out, &fits));
  if (!fits) ST_CHECK(try_recompute(in, limit, GPT_RECOMPUTE_BLOCK, out, &fits));
  if (!fits) ST_CHECK(try_bf16(in, limit, bounds, out, &fits));
  if (!fits) ST_CHECK(try_offload(in, limit, out, &fits));
  if (!fits) ST_CHECK(try_ranks(in, limit, bounds, out, &fits));
  return ST_OK;
}

void fit_format_bytes(uint64_t bytes, char *out, size_t size) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double x = (double)bytes;
  int u = 0;
  while (x >= 1024.0 && u < 5) {
    x /= 1024.0;
    u++;
  }
  if (u == 0) {
    snprintf(out, size, "%llu B", (unsigned long long)bytes);
  } else {
    snprintf(out, size, "%.*f %s", x >= 100 ? 0 : x >= 10 ? 1 : 2, x, units[u]);
  }
}

void fit_describe(const plan_input *from, const fit_suggestion *s, const fit_bounds *bounds,
                  char *out, size_t size) {
  const plan_input *to = &s->run;
  char need[32];
  fit_format_bytes(s->need, need, sizeof need);
  switch (s->change) {
    case FIT_ZERO: snprintf(out, size, "--zero %d (predicted %s)", to->stage, need); return;
    case FIT_MICRO_BATCH:
      snprintf(out, size, "--micro-batch %d --grad-accum %d (the same global batch; predicted %s)",
               to->micro_batch, to->grad_accum, need);
      return;
    case FIT_BF16:
      snprintf(out, size, "--param-dtype bf16%s (predicted %s)",
               to->precision.reduce != from->precision.reduce ? " --reduce-dtype bf16" : "", need);
      return;
    case FIT_RECOMPUTE:
      snprintf(out, size, "--recompute %s (predicted %s)", gpt_recompute_name(to->recompute), need);
      return;
    case FIT_OFFLOAD:
      snprintf(out, size, "--offload optimizer (predicted %s of device memory)", need);
      return;
    case FIT_RANKS: {
      char batch[96] = "";
      if (to->micro_batch != from->micro_batch) {
        snprintf(batch, sizeof batch, " --micro-batch %d", to->micro_batch);
      } else if (to->grad_accum != from->grad_accum) {
        snprintf(batch, sizeof batch, " --grad-accum %d", to->grad_accum);
      }
      char effect[64] = "the same global batch";
      if (s->batch_factor > 1) {
        snprintf(effect, sizeof effect, "a %dx larger global batch", s->batch_factor);
      }
      snprintf(out, size, "%d ranks with this limit each (--dp-shard %d%s%s; %s; predicted %s)",
               to->R * to->S * to->T, to->S, batch, to->stage != from->stage ? " --zero 3" : "",
               effect, need);
      return;
    }
    case FIT_NOTHING:
    default:
      snprintf(out, size,
               "none found (tried a higher --zero, --recompute gelu and block, a smaller "
               "--micro-batch with --grad-accum up to %d, bf16, --offload optimizer where the "
               "device has its own memory, and up to %d ranks)",
               bounds->max_grad_accum, bounds->max_ranks);
      return;
  }
}
