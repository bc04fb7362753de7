/* oom_test.c - every allocation of a model's life on one rank fails in turn: creating the GPT,
 * initialising it, one training step and an export. Each failure must come back as ST_ERR_OOM
 * and leave no block allocated; the run without injected failures must succeed (so the loop
 * really covered every allocation). */
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/gpt_io.h"
#include "engine/train_step.h"
#include "tests/testing.h"

enum { B = 2, T = 16 };

/* Runs the whole life once; returns its status. */
static st_status life(const char *export_path) {
  gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = 256, .max_seq = T};
  ST_CHECK(gpt_config_finish(&cfg, 1));
  st_device cpu = device_cpu();
  gpt_model *m = NULL;
  ST_CHECK(gpt_create(&m, &cfg, &cpu, B, T, NULL));
  int32_t inputs[B * T], targets[B * T];
  for (int i = 0; i < B * T; i++) {
    inputs[i] = (i * 5) % 256;
    targets[i] = (i * 3 + 1) % 256;
  }
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  train_hparams h = {.schedule = {LR_CONSTANT, 1e-3, 0, 0, 1},
                     .adam = ADAMW_HPARAMS_DEFAULT,
                     .weight_decay = 0.1f,
                     .clip = 1.0f,
                     .grad_accum = 1,
                     .global_tokens = B * T};
  step_stats s;
  st_status status;
  ST_CHECK_GOTO(gpt_init_params(m, 1), status, done);
  ST_CHECK_GOTO(train_state_reset(m), status, done);
  ST_CHECK_GOTO(train_step(m, &h, 0, in, tg, &s), status, done);
  ST_CHECK_GOTO(gpt_export(m, export_path, 1), status, done);
done:
  gpt_destroy(m);
  return status;
}

int main(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/oom_export.safetensors",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  int failures_seen = 0;
  for (long n = 1;; n++) {
    mem_fail_nth(n);
    st_status status = life(path);
    mem_fail_nth(0);
    mem_stats stats;
    mem_stats_get(&stats);
    CHECK_MSG(stats.live_blocks == 0, "allocation %ld failed: %llu blocks left", n,
              (unsigned long long)stats.live_blocks);
    if (status == ST_OK) break; /* n is past the last allocation */
    CHECK_MSG(status == ST_ERR_OOM, "allocation %ld failed: got %s (%s)", n,
              st_status_string(status), st_last_error());
    failures_seen++;
    if (n > 100000) break;
  }
  CHECK_MSG(failures_seen > 20, "only %d allocations were exercised", failures_seen);
  printf("oom_test: %d allocations failed in turn\n", failures_seen);
  return test_finish("oom_test");
}
