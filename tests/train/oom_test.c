/* oom_test.c - every allocation of a model's life on one rank fails in turn: creating the GPT,
 * initialising it, one training step and an export, in fp32, with bf16 parameters and
 * gradients (whose compute copies and conversions allocate too), with fp16 ones and dynamic
 * loss scaling (exactly bf16's allocations: the overflow flag shares the norm's device
 * buffer), and in fp32 with the optimizer offloaded through a GPU's pinned staging (forced on
 * the CPU). Each failure must come back as ST_ERR_OOM and leave no block allocated (a life that
 * succeeds although its failure fired has swallowed it); the first run whose failure never
 * fires, past the last allocation, must succeed (so the loop really covered every one). */
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_io.h"
#include "tests/testing.h"
#include "tests/train/test_step.h"

enum { B = 2, T = 16 };

/* Runs the whole life once; returns its status. */
static st_status life(const char *export_path, st_dtype dtype, int offload) {
  gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = 256, .max_seq = T};
  ST_CHECK(gpt_config_finish(&cfg, 1));
  st_device cpu = device_cpu();
  gpt_model *m = NULL;
  const gpt_parallel par = {.precision = {dtype, dtype}, .offload_optimizer = offload};
  ST_CHECK(gpt_create(&m, &cfg, &cpu, B, T, &par));
  for (int u = 0; u < m->n_units; u++) m->units[u].offload_staging = offload;
  int32_t inputs[B * T], targets[B * T];
  test_step_tokens(inputs, targets, B * T);
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  const train_hparams h = test_step_hparams(B * T);
  loss_scaler scaler;
  if (dtype == ST_FP16) {
    loss_scaler_init_dynamic(&scaler, LOSS_SCALER_INITIAL_SCALE, LOSS_SCALER_DEFAULT_WINDOW);
  } else {
    loss_scaler_init_none(&scaler);
  }
  step_stats s;
  st_status status;
  ST_CHECK_GOTO(gpt_init_params(m, 1), status, done);
  ST_CHECK_GOTO(train_state_reset(m), status, done);
  ST_CHECK_GOTO(train_step(m, &h, &scaler, 0, in, tg, &s), status, done);
  ST_CHECK_GOTO(gpt_export(m, export_path, 1), status, done);
done:
  gpt_destroy(m);
  return status;
}

/* Fails each allocation of life() in turn; returns how many there were. */
static int fail_each_allocation(const char *path, st_dtype dtype, int offload) {
  int failures_seen = 0;
  for (long n = 1;; n++) {
    mem_fail_nth(n);
    st_status status = life(path, dtype, offload);
    const int fired = !mem_fail_pending();
    mem_fail_nth(0);
    mem_stats stats;
    mem_stats_get(&stats);
    CHECK_MSG(stats.live_blocks == 0, "%s: allocation %ld failed: %llu blocks left",
              dtype_name(dtype), n, (unsigned long long)stats.live_blocks);
    if (status == ST_OK && !fired) break; /* n is past the last allocation */
    CHECK_MSG(status != ST_OK,
              "%s: allocation %ld failed, and the life still succeeded (swallowed)",
              dtype_name(dtype), n);
    CHECK_MSG(status == ST_OK || status == ST_ERR_OOM, "%s: allocation %ld failed: got %s (%s)",
              dtype_name(dtype), n, st_status_string(status), st_last_error());
    failures_seen++;
    if (n > 100000) break;
  }
  CHECK_MSG(failures_seen > 20, "%s: only %d allocations were exercised", dtype_name(dtype),
            failures_seen);
  printf("oom_test: %s%s: %d allocations failed in turn\n", dtype_name(dtype),
         offload ? " offloaded" : "", failures_seen);
  return failures_seen;
}

int main(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/oom_export.safetensors",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  const int fp32 = fail_each_allocation(path, ST_FP32, 0);
  const int bf16 = fail_each_allocation(path, ST_BF16, 0);
  CHECK_MSG(bf16 > fp32, "bf16 exercised %d allocations, no more than fp32's %d", bf16, fp32);
  const int fp16 = fail_each_allocation(path, ST_FP16, 0); /* with dynamic loss scaling */
  CHECK_MSG(fp16 == bf16, "fp16 exercised %d allocations, bf16 %d: the same buffers", fp16, bf16);
  const int staged = fail_each_allocation(path, ST_FP32, 1);
  CHECK_MSG(staged > fp32, "offloaded exercised %d allocations, no more than fp32's %d", staged,
            fp32);
  return test_finish("oom_test");
}
