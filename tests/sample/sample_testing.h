/* sample_testing.h - what the generation tests share: small random models on one rank and the
 * logits of a full forward (gpt_forward), the reference the cached path is held to. */
#ifndef ST_TESTS_SAMPLE_SAMPLE_TESTING_H
#define ST_TESTS_SAMPLE_SAMPLE_TESTING_H

#include <stdint.h>

#include "engine/model/gpt.h"

typedef enum test_weights {
  /* GPT-2's initialisation (gpt_init_params): tiny logits, nearly uniform attention. */
  TEST_WEIGHTS_INIT = 0,
  /* Every weight and bias N(0, 0.3), norm weights 1 + N(0, 0.1): peaked attention and logits
   * spread over several units, as in a trained model, so the softmaxes really select. wte's
   * padding rows are drawn too, so a path that let them take part would pick them. */
  TEST_WEIGHTS_WIDE = 1
} test_weights;

/* An fp32 model of `cfg` (finished here) on the CPU with micro-batches of B x cfg.max_seq, its
 * weights drawn from `seed`. Exits the test if it cannot be built. */
gpt_model *test_model(gpt_config cfg, int B, test_weights weights, uint64_t seed);

/* The logits of a full forward (gpt_forward, then gpt_head_logits chunk by chunk) for
 * tokens[B * T] (host, [B * T, vocab_padded]) into `out`. */
void test_full_logits(gpt_model *m, const int32_t *tokens, float *out);

/* The device the test models live on (they keep a pointer to it). */
const st_device *test_device(void);

#endif /* ST_TESTS_SAMPLE_SAMPLE_TESTING_H */
