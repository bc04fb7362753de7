/* fit_suggest_test.c - the start-up check's search for the cheapest change that fits (fit.h),
 * where no single change does. The planner is the oracle (planner_test holds it to the
 * allocator); what is tested is the search: at a limit that only two changes together meet, the
 * suggestion fits, every single change was tried and found too big, and taking back any one of
 * the suggestion's changes (at every ZeRO stage), or bf16 gradients beside bf16 parameters, no
 * longer fits; where more ranks are needed,
 * no smaller shard group fits with the other changes at their most; the description names
 * exactly the changed flags; and a limit below everything names nothing. */
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "engine/model/gpt.h"
#include "engine/plan/fit.h"
#include "engine/plan/planner.h"
#include "tests/testing.h"

static const fit_bounds bounds = {.max_grad_accum = 64, .max_ranks = 64, .bf16_possible = 1};

/* A CUDA run of a small GPT: `layers` blocks, C = `width`, 4 heads, micro-batch 8 x 64, one
 * rank, fp32. */
static plan_input small_run(int layers, int width) {
  plan_input in = {.R = 1,
                   .S = 1,
                   .T = 1,
                   .micro_batch = 8,
                   .seq_len = 64,
                   .grad_accum = 1,
                   .prefetch = 1,
                   .reshard_after_forward = 1,
                   .precision = {ST_FP32, ST_FP32},
                   .device = ST_DEVICE_CUDA};
  in.cfg =
      (gpt_config){.n_layer = layers, .n_head = 4, .n_embd = width, .vocab = 256, .max_seq = 64};
  CHECK_OK(gpt_config_finish(&in.cfg, 1));
  in.compute_copies = plan_compute_copies(in.device, in.precision);
  return in;
}

static uint64_t need_of(plan_input run) {
  run.compute_copies = plan_compute_copies(run.device, run.precision);
  memory_plan plan;
  CHECK_OK(plan_memory(&run, &plan));
  return fit_need(&run, &plan);
}

/* The least `run` needs at any ZeRO stage from `from` up. */
static uint64_t least_over_stages(plan_input run, int from) {
  uint64_t least = UINT64_MAX;
  for (run.stage = from; run.stage <= 3; run.stage++) {
    const uint64_t need = need_of(run);
    if (need < least) least = need;
  }
  return least;
}

/* Every single change of `in`, each at its most (fit.h's list but more ranks): none within
 * `limit`. The micro-batch: 1 where the grad-accum bound allows (every case here: a power of
 * two, or a bound of 1). */
static void check_no_single_change_fits(const plan_input *in, uint64_t limit, const fit_bounds *b) {
  plan_input runs[6];
  for (int i = 0; i < 6; i++) runs[i] = *in;
  runs[0].stage = 3;
  runs[1].recompute = GPT_RECOMPUTE_GELU;
  if (b->max_grad_accum >= in->micro_batch * in->grad_accum) {
    runs[2].micro_batch = 1;
    runs[2].grad_accum = in->micro_batch * in->grad_accum;
  }
  runs[3].recompute = GPT_RECOMPUTE_BLOCK;
  runs[4].precision = (unit_precision){ST_BF16, ST_BF16};
  runs[5].offload_optimizer = 1;
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(least_over_stages(runs[i], 0) > limit, "single change %d fits the limit alone", i);
  }
}

/* Taking back any one change of the suggestion `s` for `in` no longer fits, at any stage. */
static void check_minimal(const plan_input *in, const fit_suggestion *s, uint64_t limit) {
  const plan_input *to = &s->run;
  for (int field = 0; field < 4; field++) {
    plan_input back = *to;
    int changed = 0;
    switch (field) {
      case 0:
        changed = to->recompute != in->recompute;
        back.recompute = in->recompute;
        break;
      case 1:
        changed = to->micro_batch != in->micro_batch && to->S == in->S;
        back.micro_batch = in->micro_batch;
        back.grad_accum = in->grad_accum;
        break;
      case 2:
        changed = to->precision.param != in->precision.param;
        back.precision = in->precision;
        break;
      default:
        changed = to->offload_optimizer != in->offload_optimizer;
        back.offload_optimizer = in->offload_optimizer;
        break;
    }
    if (changed) {
      CHECK_MSG(least_over_stages(back, in->stage) > limit,
                "change %d of the suggestion is not needed: it fits without", field);
    }
  }
  /* Nor do bf16 parameters with the run's own gradients, where the device takes the pair. */
  plan_input grads_back = *to;
  grads_back.precision.reduce = in->precision.reduce;
  if (to->precision.reduce != in->precision.reduce &&
      gpt_check_precision(to->device, grads_back.precision) == ST_OK) {
    CHECK_MSG(least_over_stages(grads_back, in->stage) > limit,
              "the suggestion's gradient dtype is not needed: it fits with the run's");
  }
  if (to->stage > in->stage) {
    plan_input lower = *to;
    lower.stage--;
    CHECK_MSG(need_of(lower) > limit, "ZeRO-%d fits too, the suggestion says %d", lower.stage,
              to->stage);
  }
}

/* Two changes together: block recompute and micro-batch 2 x 4. */
static void check_two_changes(void) {
  const plan_input in = small_run(4, 128);
  plan_input target = in;
  target.recompute = GPT_RECOMPUTE_BLOCK;
  target.micro_batch = 2;
  target.grad_accum = 4;
  const uint64_t limit = need_of(target);
  check_no_single_change_fits(&in, limit, &bounds);
  fit_suggestion s;
  CHECK_OK(fit_suggest(&in, limit, &bounds, &s));
  CHECK_EQ_INT(s.change, FIT_COMBINED);
  CHECK_MSG(s.need <= limit && need_of(s.run) == s.need, "suggested %llu bytes, limit %llu",
            (unsigned long long)s.need, (unsigned long long)limit);
  CHECK_EQ_INT(s.run.S, 1);
  CHECK_EQ_INT(s.run.micro_batch * s.run.grad_accum, in.micro_batch * in.grad_accum);
  check_minimal(&in, &s, limit);
  char text[320];
  fit_describe(&in, &s, &bounds, text, sizeof text);
  CHECK_MSG(strstr(text, "--recompute") && strstr(text, "--micro-batch") &&
                strstr(text, "--grad-accum") && strstr(text, "the same global batch") &&
                !strstr(text, "ranks"),
            "suggestion '%s'", text);
}

/* bf16 parameters beside fp32 gradients and block recompute, the optimizer already offloaded
 * and no accumulation allowed: the stack goes to bf16 gradients too, which the suggestion
 * takes back. */
static void check_gradients_kept(void) {
  const fit_bounds one_micro_batch = {.max_grad_accum = 1, .max_ranks = 64, .bf16_possible = 1};
  plan_input in = small_run(4, 128);
  in.offload_optimizer = 1;
  plan_input target = in;
  target.recompute = GPT_RECOMPUTE_BLOCK;
  target.precision = (unit_precision){ST_BF16, ST_FP32};
  const uint64_t limit = need_of(target);
  check_no_single_change_fits(&in, limit, &one_micro_batch);
  fit_suggestion s;
  CHECK_OK(fit_suggest(&in, limit, &one_micro_batch, &s));
  CHECK_EQ_INT(s.change, FIT_COMBINED);
  CHECK_MSG(s.run.precision.param == ST_BF16 && s.run.precision.reduce == ST_FP32,
            "suggested %s parameters with %s gradients", dtype_name(s.run.precision.param),
            dtype_name(s.run.precision.reduce));
  check_minimal(&in, &s, limit);
}

/* More ranks with other changes: a limit that only 4 ranks at ZeRO-3 in bf16 with block
 * recompute meet. The suggestion has the fewest ranks that fit with every other change at its
 * most. */
static void check_ranks_and_more(void) {
  /* 32 blocks of 0.8M parameters, 8 tokens a step: the parameters and gradients dominate
   * (about 190 MiB in fp32, against one gathered block's 3 MiB and the CUDA backend's 45 MiB of
   * workspace), so more ranks alone fit too, but only at more ranks. */
  plan_input in = small_run(32, 256);
  in.micro_batch = 1;
  in.seq_len = 8;
  in.offload_optimizer = 1; /* already: bf16 and more ranks are what is left */
  plan_input target = in;
  target.S = 4;
  target.stage = 3;
  target.precision = (unit_precision){ST_BF16, ST_BF16};
  const uint64_t limit = need_of(target);
  check_no_single_change_fits(&in, limit, &bounds);
  fit_suggestion s;
  CHECK_OK(fit_suggest(&in, limit, &bounds, &s));
  CHECK_EQ_INT(s.change, FIT_COMBINED);
  CHECK_MSG(s.need <= limit, "suggested %llu bytes, limit %llu", (unsigned long long)s.need,
            (unsigned long long)limit);
  CHECK_MSG(s.run.S > 1 && s.run.S <= 4, "suggested a shard group of %d", s.run.S);
  for (int fewer = 1; fewer < s.run.S; fewer++) {
    plan_input most = target;
    most.S = fewer;
    most.micro_batch = 1;
    most.grad_accum = 1;
    CHECK_MSG(least_over_stages(most, 0) > limit, "%d ranks fit with every change at its most",
              fewer);
  }
  check_minimal(&in, &s, limit);
  char text[320];
  fit_describe(&in, &s, &bounds, text, sizeof text);
  char ranks[64];
  snprintf(ranks, sizeof ranks, "%d ranks with this limit each (--dp-shard %d ", s.run.S, s.run.S);
  CHECK_MSG(strncmp(text, ranks, strlen(ranks)) == 0 && strstr(text, "larger global batch"),
            "suggestion '%s'", text);
}

/* A limit below every run: nothing, alone or together. */
static void check_nothing(void) {
  const plan_input in = small_run(4, 128);
  fit_suggestion s;
  CHECK_OK(fit_suggest(&in, 1024, &bounds, &s));
  CHECK_EQ_INT(s.change, FIT_NOTHING);
  char text[320];
  fit_describe(&in, &s, &bounds, text, sizeof text);
  CHECK_MSG(strstr(text, "none found") && strstr(text, "alone and together"), "'%s'", text);
}

int main(void) {
  check_two_changes();
  check_gradients_kept();
  check_ranks_and_more();
  check_nothing();
  return test_finish("fit_suggest_test");
}
