/* fit.c - the fit verdict and the search for the cheapest change that fits (fit.h). Each
 * candidate is a whole run planned by plan_memory, so a suggestion is exactly as good as the
 * planner. */
#include "engine/plan/fit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
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
                         fit_change change, int *fits) {
  memory_plan plan;
  ST_CHECK(plan_memory(run, &plan));
  const uint64_t need = fit_need(run, &plan);
  *fits = need <= limit;
  if (*fits) *out = (fit_suggestion){change, *run, need};
  return ST_OK;
}

static st_status try_zero(const plan_input *in, uint64_t limit, const fit_bounds *b,
                          fit_suggestion *out, int *fits) {
  (void)b;
  for (int stage = in->stage + 1; stage <= 3 && !*fits; stage++) {
    plan_input run = *in;
    run.stage = stage;
    ST_CHECK(try_run(&run, limit, out, FIT_ZERO, fits));
  }
  return ST_OK;
}

/* `run` at `accum` micro-batches of a step, micro-batch x grad-accum (`per_rank`) kept; 0 (and
 * `run` unchanged) where `accum` does not divide it. */
static int split_batch(plan_input *run, int64_t per_rank, int accum) {
  if (per_rank % accum) return 0;
  run->grad_accum = accum;
  run->micro_batch = (int)(per_rank / accum);
  return 1;
}

/* micro-batch x grad-accum stays the same; the largest micro-batch that fits. */
static st_status try_micro_batch(const plan_input *in, uint64_t limit, const fit_bounds *b,
                                 fit_suggestion *out, int *fits) {
  const int64_t per_rank = (int64_t)in->micro_batch * in->grad_accum;
  for (int accum = in->grad_accum + 1; accum <= b->max_grad_accum && !*fits; accum++) {
    plan_input run = *in;
    if (split_batch(&run, per_rank, accum)) {
      ST_CHECK(try_run(&run, limit, out, FIT_MICRO_BATCH, fits));
    }
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
    ST_CHECK(try_run(&run, limit, out, FIT_BF16, fits));
  }
  return ST_OK;
}

static st_status try_offload(const plan_input *in, uint64_t limit, const fit_bounds *b,
                             fit_suggestion *out, int *fits) {
  (void)b;
  /* Where device memory is host RAM, offloading moves nothing out of the budget. */
  if (in->offload_optimizer || in->device_is_host) return ST_OK;
  plan_input run = *in;
  run.offload_optimizer = 1;
  return try_run(&run, limit, out, FIT_OFFLOAD, fits);
}

/* Recompute `mode`, where the run does not recompute at least as much already. */
static st_status try_recompute(const plan_input *in, uint64_t limit, gpt_recompute mode,
                               fit_suggestion *out, int *fits) {
  if (in->recompute >= mode) return ST_OK;
  plan_input run = *in;
  run.recompute = mode;
  return try_run(&run, limit, out, FIT_RECOMPUTE, fits);
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
    if (in->micro_batch % k == 0) {
      run.micro_batch = in->micro_batch / k;
    } else if (in->grad_accum % k == 0) {
      run.grad_accum = in->grad_accum / k;
    }
    ST_CHECK(try_run(&run, limit, out, FIT_RANKS, fits));
    if (!*fits && in->stage < 3) {
      run.stage = 3;
      ST_CHECK(try_run(&run, limit, out, FIT_RANKS, fits));
    }
  }
  return ST_OK;
}

/* The most each change but the stage can save, applied to `run` (the stacked search below,
 * which tries every stage). */
static void most_recompute_gelu(plan_input *run, const fit_bounds *b) {
  (void)b;
  if (run->recompute < GPT_RECOMPUTE_GELU) run->recompute = GPT_RECOMPUTE_GELU;
}

static void most_recompute_block(plan_input *run, const fit_bounds *b) {
  (void)b;
  run->recompute = GPT_RECOMPUTE_BLOCK;
}

/* The smallest micro-batch that keeps the global batch within the grad-accum bound. */
static void most_micro_batch(plan_input *run, const fit_bounds *b) {
  const int64_t per_rank = (int64_t)run->micro_batch * run->grad_accum;
  for (int accum = b->max_grad_accum; accum > run->grad_accum; accum--) {
    if (split_batch(run, per_rank, accum)) return;
  }
}

/* bf16 parameters, with bf16 gradients where the device takes them. */
static void most_bf16(plan_input *run, const fit_bounds *b) {
  if (!b->bf16_possible) return;
  const unit_precision tries[2] = {{ST_BF16, ST_BF16}, {ST_BF16, run->precision.reduce}};
  for (int i = 0; i < 2; i++) {
    if (gpt_check_precision(run->device, tries[i]) == ST_OK) {
      run->precision = tries[i];
      return;
    }
    st_error_clear();
  }
}

static void most_offload(plan_input *run, const fit_bounds *b) {
  (void)b;
  if (!run->device_is_host) run->offload_optimizer = 1;
}

static st_status try_recompute_gelu(const plan_input *in, uint64_t limit, const fit_bounds *b,
                                    fit_suggestion *out, int *fits) {
  (void)b;
  return try_recompute(in, limit, GPT_RECOMPUTE_GELU, out, fits);
}

static st_status try_recompute_block(const plan_input *in, uint64_t limit, const fit_bounds *b,
                                     fit_suggestion *out, int *fits) {
  (void)b;
  return try_recompute(in, limit, GPT_RECOMPUTE_BLOCK, out, fits);
}

/* The changes in fit.h's order of cost: the cheapest variant that fits, and the most the change
 * can save (the stage: none, every stage is tried). More ranks come last. */
static const struct {
  st_status (*cheapest)(const plan_input *, uint64_t, const fit_bounds *, fit_suggestion *, int *);
  void (*most)(plan_input *, const fit_bounds *);
} kinds[] = {
    {try_zero, NULL},
    {try_recompute_gelu, most_recompute_gelu},
    {try_micro_batch, most_micro_batch},
    {try_recompute_block, most_recompute_block},
    {try_bf16, most_bf16},
    {try_offload, most_offload},
};
enum { KIND_COUNT = sizeof kinds / sizeof kinds[0] };

/* `run` at the lowest ZeRO stage from `in`'s up that fits replaces the suggestion `s`, if one
 * fits (*fits = 1): a higher stage is not always smaller (a gathered unit can cost more than
 * its shards save), and the stage is the cheapest change. */
static st_status try_stages(const plan_input *in, plan_input run, uint64_t limit, fit_suggestion *s,
                            int *fits) {
  *fits = 0;
  for (run.stage = in->stage; run.stage <= 3 && !*fits; run.stage++) {
    ST_CHECK(try_run(&run, limit, s, s->change, fits));
  }
  return ST_OK;
}

static st_status keep_if_fits(const plan_input *in, const plan_input *run, uint64_t limit,
                              fit_suggestion *s) {
  int fits = 0;
  return try_stages(in, *run, limit, s, &fits);
}

/* Takes back, from the fitting suggestion `s` for `in`, what it fits without, the costliest
 * change first: the offload, bf16 (else only its gradients), recompute (to none, else to the
 * GELU's), the smaller micro-batch (the largest that fits with the rank's share of the global
 * batch); the stage each time the lowest that fits. */
static st_status prune(const plan_input *in, uint64_t limit, fit_suggestion *s) {
  ST_CHECK(keep_if_fits(in, &s->run, limit, s));
  plan_input run = s->run;
  run.offload_optimizer = in->offload_optimizer;
  ST_CHECK(keep_if_fits(in, &run, limit, s));
  run = s->run;
  run.precision = in->precision;
  ST_CHECK(keep_if_fits(in, &run, limit, s));
  run = s->run;
  run.precision.reduce = in->precision.reduce; /* bf16 parameters with the run's gradients */
  if (gpt_check_precision(run.device, run.precision) == ST_OK) {
    ST_CHECK(keep_if_fits(in, &run, limit, s));
  } else {
    st_error_clear();
  }
  for (gpt_recompute r = in->recompute; r < s->run.recompute; r++) {
    run = s->run;
    run.recompute = r;
    ST_CHECK(keep_if_fits(in, &run, limit, s));
  }
  const int64_t per_rank = (int64_t)s->run.micro_batch * s->run.grad_accum;
  for (int accum = s->run.S == in->S ? in->grad_accum : 1; accum < s->run.grad_accum; accum++) {
    run = s->run;
    if (split_batch(&run, per_rank, accum)) ST_CHECK(keep_if_fits(in, &run, limit, s));
  }
  return ST_OK;
}

/* Which change turns `from` into `to`: FIT_COMBINED for several, FIT_NOTHING for none. More
 * ranks count as one change with the stage, micro-batch or grad-accum they came with. */
static fit_change change_of(const plan_input *from, const plan_input *to) {
  fit_change found = FIT_NOTHING;
  int n = 0;
  const int ranks = to->S != from->S;
  const struct {
    int changed;
    fit_change change;
  } fields[] = {
      {ranks, FIT_RANKS},
      {!ranks && to->stage != from->stage, FIT_ZERO},
      {!ranks && to->micro_batch != from->micro_batch, FIT_MICRO_BATCH},
      {to->recompute != from->recompute, FIT_RECOMPUTE},
      {to->precision.param != from->precision.param ||
           to->precision.reduce != from->precision.reduce,
       FIT_BF16},
      {to->offload_optimizer != from->offload_optimizer, FIT_OFFLOAD},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    if (fields[i].changed) {
      found = fields[i].change;
      n++;
    }
  }
  return n > 1 ? FIT_COMBINED : found;
}

/* No single change fits: the changes but more ranks stacked in order of cost, each at its most,
 * until the stack fits at some stage; what fits is pruned of what it does not need. `stack` is
 * left as the run with every change at its most. */
static st_status try_stacked(const plan_input *in, uint64_t limit, const fit_bounds *b,
                             fit_suggestion *out, int *fits, plan_input *stack) {
  *stack = *in;
  for (int k = 0; k < KIND_COUNT && !*fits; k++) {
    if (!kinds[k].most) continue;
    kinds[k].most(stack, b);
    ST_CHECK(try_stages(in, *stack, limit, out, fits));
  }
  if (*fits) ST_CHECK(prune(in, limit, out));
  return ST_OK;
}

/* More ranks, the fewest that fit: alone, or on top of every other change at its most (then
 * pruned); alone where the two need as many. */
static st_status try_more_ranks(const plan_input *in, const plan_input *stack, uint64_t limit,
                                const fit_bounds *b, fit_suggestion *out, int *fits) {
  fit_suggestion alone = *out, stacked = *out;
  int alone_fits = 0, stacked_fits = 0;
  ST_CHECK(try_ranks(in, limit, b, &alone, &alone_fits));
  ST_CHECK(try_ranks(stack, limit, b, &stacked, &stacked_fits));
  if (stacked_fits && (!alone_fits || stacked.run.S < alone.run.S)) {
    ST_CHECK(prune(in, limit, &stacked));
    *out = stacked;
  } else if (alone_fits) {
    *out = alone;
  }
  *fits = alone_fits || stacked_fits;
  return ST_OK;
}

st_status fit_suggest(const plan_input *in, uint64_t limit, const fit_bounds *bounds,
                      fit_suggestion *out) {
  *out = (fit_suggestion){FIT_NOTHING, *in, 0};
  int fits = 0;
  for (int k = 0; k < KIND_COUNT && !fits; k++) {
    ST_CHECK(kinds[k].cheapest(in, limit, bounds, out, &fits));
  }
  plan_input stack;
  if (!fits) ST_CHECK(try_stacked(in, limit, bounds, out, &fits, &stack));
  if (!fits) ST_CHECK(try_more_ranks(in, &stack, limit, bounds, out, &fits));
  if (fits) out->change = change_of(in, &out->run);
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

/* Appends to `out` (of `size`, holding `*len` characters) what `fmt` formats. */
static void append(char *out, size_t size, size_t *len, const char *fmt, ...) {
  if (*len >= size) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(out + *len, size - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
}

static int64_t global_batch(const plan_input *run) {
  return (int64_t)run->R * run->S * run->micro_batch * run->grad_accum;
}

void fit_describe(const plan_input *from, const fit_suggestion *s, const fit_bounds *bounds,
                  char *out, size_t size) {
  if (s->change == FIT_NOTHING) {
    snprintf(out, size,
             "none found (tried a higher --zero, --recompute gelu and block, a smaller "
             "--micro-batch with --grad-accum up to %d, bf16, --offload optimizer where the "
             "device has its own memory, and up to %d ranks, alone and together)",
             bounds->max_grad_accum, bounds->max_ranks);
    return;
  }
  const plan_input *to = &s->run;
  size_t len = 0;
  out[0] = '\0';
  if (to->S != from->S) {
    append(out, size, &len, "%d ranks with this limit each (--dp-shard %d ", to->R * to->S * to->T,
           to->S);
  }
  if (to->micro_batch != from->micro_batch) {
    append(out, size, &len, "--micro-batch %d ", to->micro_batch);
  }
  if (to->grad_accum != from->grad_accum)
    append(out, size, &len, "--grad-accum %d ", to->grad_accum);
  if (to->stage != from->stage) append(out, size, &len, "--zero %d ", to->stage);
  if (to->recompute != from->recompute) {
    append(out, size, &len, "--recompute %s ", gpt_recompute_name(to->recompute));
  }
  if (to->precision.param != from->precision.param) {
    append(out, size, &len, "--param-dtype %s ", dtype_name(to->precision.param));
  }
  if (to->precision.reduce != from->precision.reduce) {
    append(out, size, &len, "--reduce-dtype %s ", dtype_name(to->precision.reduce));
  }
  if (to->offload_optimizer != from->offload_optimizer) {
    append(out, size, &len, "--offload optimizer ");
  }
  if (len > 0 && len <= size) out[--len] = '\0'; /* the last space */
  append(out, size, &len, to->S != from->S ? "; " : " (");
  const int64_t was = global_batch(from), now = global_batch(to);
  if (now != was) {
    append(out, size, &len, "a %lldx larger global batch; ", (long long)(now / was));
  } else if (to->S != from->S || to->micro_batch != from->micro_batch) {
    append(out, size, &len, "the same global batch; ");
  }
  char need[32];
  fit_format_bytes(s->need, need, sizeof need);
  append(out, size, &len, "predicted %s%s)", need,
         to->offload_optimizer && !from->offload_optimizer ? " of device memory" : "");
}
