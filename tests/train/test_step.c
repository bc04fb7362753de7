/* test_step.c - the engine tests' synthetic training step (test_step.h). */
#include "tests/train/test_step.h"

void test_step_tokens(int32_t *inputs, int32_t *targets, int n) {
  for (int i = 0; i < n; i++) {
    inputs[i] = (i * 7) % 256;
    targets[i] = (i * 11 + 3) % 256;
  }
}

train_hparams test_step_hparams(int64_t global_tokens) {
  return (train_hparams){.schedule = {LR_CONSTANT, 1e-3, 0, 0, 1},
                         .adam = ADAMW_HPARAMS_DEFAULT,
                         .weight_decay = 0.1f,
                         .clip = 1.0f,
                         .grad_accum = 1,
                         .global_tokens = global_tokens};
}
