/* generate_test.c - the generation loop (gpt_generate) on a small model with wide random
 * weights:
 * - greedy decoding (temperature 0) of 20 tokens is the same twice, and equals an independent
 *   loop that reruns the full forward (gpt_forward) over the whole sequence for every token and
 *   takes the argmax of the last position's logits over the real vocabulary;
 * - a prompt fed in pieces (a cache of 4 tokens a call) gives the same tokens;
 * - top-k 1 at temperature 1 equals greedy; seeded sampling repeats with its seed and changes
 *   with another; no sampled token is a padding row of wte (those have logits like the others);
 * - it stops at the model's last position, saying so, and not before;
 * - a bad prompt or count is refused before anything runs. */
#include <stdio.h>
#include <string.h>

#include "engine/model/gpt_generate.h"
#include "tests/sample/sample_testing.h"
#include "tests/testing.h"

enum { T = 40, VOCAB = 200, PROMPT = 5, NEW = 20 };

static const gpt_config CFG = {
    .n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = VOCAB, .max_seq = T};
static const int32_t prompt[PROMPT] = {17, 4, 199, 80, 3};

/* Generates with a fresh cache of max_tokens and a sampler of (temperature, top_k, seed). */
static int cached_tokens; /* the cache's length after the last generate() */

static gpt_generation generate(gpt_model *m, int max_tokens, const int32_t *p, int n_prompt,
                               int n_new, double temperature, int top_k, uint64_t seed,
                               int32_t *out) {
  gpt_kv *kv = NULL;
  sampler *s = NULL;
  gpt_generation g = {0};
  const sampler_config sc = {temperature, top_k, seed};
  CHECK_OK(gpt_kv_create(&kv, m, max_tokens, 1));
  CHECK_OK(sampler_create(&s, VOCAB, &sc));
  CHECK_OK(gpt_generate(kv, s, p, n_prompt, n_new, out, NULL, NULL, &g));
  cached_tokens = gpt_kv_length(kv);
  sampler_destroy(s);
  gpt_kv_destroy(kv);
  return g;
}

/* The reference: the full forward over the padded sequence for each new token (causal, so the
 * padding after the last real token changes nothing before it), argmax by a plain loop. */
static void greedy_by_full_forward(gpt_model *m, int32_t *out) {
  static int32_t seq[T];
  static float logits[T * 256];
  memset(seq, 0, sizeof seq);
  memcpy(seq, prompt, sizeof prompt);
  for (int i = 0; i < NEW; i++) {
    int last = PROMPT + i - 1;
    test_full_logits(m, seq, logits);
    const float *row = logits + (int64_t)last * m->cfg.vocab_padded;
    int best = 0;
    for (int v = 1; v < VOCAB; v++) {
      if (row[v] > row[best]) best = v;
    }
    out[i] = seq[last + 1] = best;
  }
}

static int same(const int32_t *a, const int32_t *b, int n) { return memcmp(a, b, n * 4) == 0; }

static void check_greedy_and_sampling(gpt_model *m) {
  int32_t greedy[NEW], again[NEW], reference[NEW], pieces[NEW], top1[NEW], s1[NEW], s2[NEW],
      s3[NEW];
  gpt_generation g = generate(m, PROMPT, prompt, PROMPT, NEW, 0.0, 0, 1, greedy);
  CHECK_EQ_INT(g.generated, NEW);
  CHECK_EQ_INT(g.full, 0);
  generate(m, PROMPT, prompt, PROMPT, NEW, 0.0, 0, 2, again);
  CHECK_MSG(same(greedy, again, NEW), "greedy decoding is deterministic");
  greedy_by_full_forward(m, reference);
  CHECK_MSG(same(greedy, reference, NEW), "greedy with the cache equals argmax of full forwards");
  generate(m, 4, prompt, PROMPT, NEW, 0.0, 0, 1, pieces);
  CHECK_MSG(same(greedy, pieces, NEW), "a prompt fed in pieces gives the same tokens");
  generate(m, PROMPT, prompt, PROMPT, NEW, 1.0, 1, 99, top1);
  CHECK_MSG(same(greedy, top1, NEW), "top-k 1 equals greedy");

  generate(m, PROMPT, prompt, PROMPT, NEW, 1.0, 0, 42, s1);
  generate(m, PROMPT, prompt, PROMPT, NEW, 1.0, 0, 42, s2);
  generate(m, PROMPT, prompt, PROMPT, NEW, 1.0, 0, 43, s3);
  CHECK_MSG(same(s1, s2, NEW), "sampling with seed 42 twice gives the same tokens");
  CHECK_MSG(!same(s1, s3, NEW), "seeds 42 and 43 give different tokens");
  CHECK_MSG(!same(s1, greedy, NEW), "sampling at temperature 1 is not greedy");
  int in_vocab = 1;
  for (int i = 0; i < NEW; i++) in_vocab &= s1[i] >= 0 && s1[i] < VOCAB && s3[i] < VOCAB;
  CHECK_MSG(in_vocab, "every sampled token is in the real vocabulary");
  printf("generate_test: greedy %d %d %d ..., seed 42 %d %d %d ...\n", greedy[0], greedy[1],
         greedy[2], s1[0], s1[1], s1[2]);
}

static void check_stops(gpt_model *m) {
  int32_t long_prompt[T], out[NEW];
  for (int i = 0; i < T; i++) long_prompt[i] = (i * 13) % VOCAB;
  gpt_generation g = generate(m, T, long_prompt, T - 3, 10, 0.0, 0, 1, out);
  CHECK_MSG(g.generated == 3 && g.full, "3 positions left, 10 asked: %d generated, full %d",
            g.generated, g.full);
  /* The token at the last position is not fed: nothing could follow it. */
  CHECK_EQ_INT(cached_tokens, T - 1);
  g = generate(m, T, long_prompt, T - 3, 3, 0.0, 0, 1, out);
  CHECK_MSG(g.generated == 3 && !g.full, "3 positions left, 3 asked: %d generated, full %d",
            g.generated, g.full);
  g = generate(m, T, long_prompt, T, 1, 0.0, 0, 1, out);
  CHECK_MSG(g.generated == 0 && g.full, "no position left: %d generated, full %d", g.generated,
            g.full);
}

static void check_refusals(gpt_model *m) {
  gpt_kv *kv = NULL;
  sampler *s = NULL;
  const sampler_config sc = {0.0, 0, 1};
  CHECK_OK(gpt_kv_create(&kv, m, 4, 1));
  CHECK_OK(sampler_create(&s, VOCAB, &sc));
  int32_t out[4], bad[2] = {3, VOCAB}, big[T + 1] = {0};
  gpt_generation g;
  CHECK_STATUS(gpt_generate(kv, s, prompt, 0, 4, out, NULL, NULL, &g), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_generate(kv, s, bad, 2, 4, out, NULL, NULL, &g), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "prompt token 200 (at 1) is outside"), "detail: %s",
            st_last_error());
  CHECK_STATUS(gpt_generate(kv, s, big, T + 1, 4, out, NULL, NULL, &g), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_generate(kv, s, prompt, PROMPT, 0, out, NULL, NULL, &g), ST_ERR_INVALID_ARG);
  CHECK_EQ_INT(gpt_kv_length(kv), 0);
  sampler_destroy(s);
  gpt_kv_destroy(kv);
}

int main(void) {
  gpt_model *m = test_model(CFG, 1, TEST_WEIGHTS_WIDE, 5);
  check_greedy_and_sampling(m);
  check_stops(m);
  check_refusals(m);
  gpt_destroy(m);
  return test_finish("generate_test");
}
