/* test_step.h - the synthetic training step the engine tests run (oom_test, planner_test):
 * fixed byte tokens and fixed hyperparameters (constant lr 1e-3, weight decay 0.1, clipping
 * at 1, one micro-batch), so the tests differ only in what they check. */
#ifndef ST_TESTS_TRAIN_TEST_STEP_H
#define ST_TESTS_TRAIN_TEST_STEP_H

#include <stdint.h>

#include "engine/train/train_step.h"

/* n inputs and n targets: a fixed pattern of byte tokens (below 256). */
void test_step_tokens(int32_t *inputs, int32_t *targets, int n);

/* The step's hyperparameters for a global batch of global_tokens tokens. */
train_hparams test_step_hparams(int64_t global_tokens);

#endif /* ST_TESTS_TRAIN_TEST_STEP_H */
