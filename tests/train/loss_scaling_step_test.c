/* loss_scaling_step_test.c - the training step's loss scaling on one rank, against the same
 * step without it (test_step.h's synthetic step: one fixed batch, a constant learning rate):
 *   - fp32 at a fixed scale of 2^16 gives the loss, the gradient norm and the master weights of
 *     the unscaled step bit for bit: scaling by a power of two is exact, and unscaling is folded
 *     into the norm and AdamW's gradient factor, never an extra rounding;
 *   - fp16 parameters, dynamic scale: an overflow injected at step 1 (ST_TEST_INJECT_OVERFLOW)
 *     is skipped: the stats say so with a NaN norm, the master weights and Adam's moments are
 *     bit-identical to those before it, and the scale halves; the next step is AdamW's second
 *     (the bias correction does not count the skipped one), so the masters after steps
 *     {0, skipped, 2} equal an uninjected run's after steps {0, 1} bit for bit (the same batch
 *     and lr, and scales 65536 and 32768 are both exact);
 *   - fp32 without scaling: an injected inf is divergence (ST_ERR_INTERNAL), and the step's
 *     update was skipped on the device: masters and moments stay as they were. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"
#include "tests/train/test_step.h"

enum { B = 2, T = 16, STATE = 3 };

typedef struct run {
  st_device cpu; /* the model keeps a pointer to it */
  gpt_model *m;
  loss_scaler scaler;
  int32_t inputs[B * T], targets[B * T];
} run;

static void run_open(run *r, st_dtype param) {
  gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = 256, .max_seq = T};
  CHECK_OK(gpt_config_finish(&cfg, 1));
  r->cpu = device_cpu();
  const gpt_parallel par = {.precision = {param, ST_FP32}};
  CHECK_OK(gpt_create(&r->m, &cfg, &r->cpu, B, T, &par));
  CHECK_OK(gpt_init_params(r->m, 1));
  CHECK_OK(train_state_reset(r->m));
  test_step_tokens(r->inputs, r->targets, B * T);
}

static step_stats run_step(run *r, int step) {
  const train_hparams h = test_step_hparams(B * T);
  const int32_t *in[1] = {r->inputs}, *tg[1] = {r->targets};
  step_stats s;
  CHECK_OK(train_step(r->m, &h, &r->scaler, step, in, tg, &s));
  return s;
}

/* Every unit's master weights, Adam m and v (one rank: it owns everything), end to end. */
static float *state_copy(const gpt_model *m) {
  size_t total = 0;
  for (int u = 0; u < m->n_units; u++) total += (size_t)m->units[u].owned_numel;
  float *out = malloc(STATE * total * sizeof *out), *at = out;
  for (int u = 0; u < m->n_units; u++) {
    const unit *x = &m->units[u];
    const float *parts[STATE] = {x->master, x->adam_m, x->adam_v};
    for (int k = 0; k < STATE; k++) {
      memcpy(at, parts[k], (size_t)x->owned_numel * sizeof *at);
      at += x->owned_numel;
    }
  }
  return out;
}

static int same_state(const gpt_model *a, const float *b) {
  size_t total = 0;
  for (int u = 0; u < a->n_units; u++) total += (size_t)a->units[u].owned_numel;
  float *now = state_copy(a);
  const int same = memcmp(now, b, STATE * total * sizeof *now) == 0;
  free(now);
  return same;
}

static void test_fp32_fixed_scale_is_exact(void) {
  run plain, scaled;
  run_open(&plain, ST_FP32);
  run_open(&scaled, ST_FP32);
  loss_scaler_init_none(&plain.scaler);
  loss_scaler_init_fixed(&scaled.scaler, 65536.0);
  for (int step = 0; step < 3; step++) {
    const step_stats a = run_step(&plain, step), b = run_step(&scaled, step);
    CHECK_MSG(a.loss == b.loss && a.grad_norm == b.grad_norm && !b.skipped,
              "step %d: loss %.9g / %.9g, norm %.9g / %.9g", step, a.loss, b.loss, a.grad_norm,
              b.grad_norm);
    CHECK(b.loss_scale == 65536.0 && a.loss_scale == 1.0);
  }
  float *want = state_copy(plain.m);
  CHECK_MSG(same_state(scaled.m, want), "fp32 at scale 2^16: the same masters and moments");
  free(want);
  gpt_destroy(scaled.m);
  gpt_destroy(plain.m);
}

static void test_fp16_skip(void) {
  run injected, plain;
  run_open(&injected, ST_FP16);
  run_open(&plain, ST_FP16);
  loss_scaler_init_dynamic(&injected.scaler, 65536.0, 2000);
  loss_scaler_init_dynamic(&plain.scaler, 65536.0, 2000);
  CHECK(setenv("ST_TEST_INJECT_OVERFLOW", "1:0", 1) == 0);
  run_step(&injected, 0);
  float *before = state_copy(injected.m);
  const step_stats s = run_step(&injected, 1);
  CHECK_MSG(s.skipped && isnan(s.grad_norm) && s.loss_scale == 65536.0 && isfinite(s.loss),
            "step 1: skipped %d, norm %g, scale %g", s.skipped, s.grad_norm, s.loss_scale);
  CHECK_MSG(same_state(injected.m, before),
            "a skipped step leaves masters and moments as they were");
  CHECK(injected.scaler.state.scale == 32768.0 && injected.scaler.state.skipped == 1);
  const step_stats after = run_step(&injected, 2);
  CHECK(!after.skipped && after.loss_scale == 32768.0);
  CHECK(unsetenv("ST_TEST_INJECT_OVERFLOW") == 0);

  run_step(&plain, 0);
  const step_stats p = run_step(&plain, 1);
  CHECK(!p.skipped && p.loss_scale == 65536.0);
  float *want = state_copy(plain.m);
  CHECK_MSG(same_state(injected.m, want),
            "steps {0, skipped, 2} at scales 65536, 32768 equal steps {0, 1} at 65536");
  CHECK_MSG(after.grad_norm == p.grad_norm, "the same gradient norm: %.9g vs %.9g", after.grad_norm,
            p.grad_norm);
  free(want);
  free(before);
  gpt_destroy(plain.m);
  gpt_destroy(injected.m);
}

/* Without loss scaling an inf gradient is divergence: reported on the host after the step, whose
 * update the device skipped (kernel_step_factors), so masters and moments stay as they were. */
static void test_divergence_changes_nothing(void) {
  run r;
  run_open(&r, ST_FP32);
  loss_scaler_init_none(&r.scaler);
  run_step(&r, 0);
  float *before = state_copy(r.m);
  CHECK(setenv("ST_TEST_INJECT_OVERFLOW", "1:0", 1) == 0);
  const train_hparams h = test_step_hparams(B * T);
  const int32_t *in[1] = {r.inputs}, *tg[1] = {r.targets};
  step_stats s;
  CHECK_STATUS(train_step(r.m, &h, &r.scaler, 1, in, tg, &s), ST_ERR_INTERNAL);
  CHECK(unsetenv("ST_TEST_INJECT_OVERFLOW") == 0);
  CHECK_MSG(same_state(r.m, before), "a diverged step leaves masters and moments as they were");
  free(before);
  gpt_destroy(r.m);
}

int main(void) {
  test_fp32_fixed_scale_is_exact();
  test_fp16_skip();
  test_divergence_changes_nothing();
  return test_finish("loss_scaling_step_test");
}
