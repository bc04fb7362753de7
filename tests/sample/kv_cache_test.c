/* kv_cache_test.c - the cached generation forward (gpt_kv) against the full forward
 * (gpt_forward) on the same tokens: every position's logits agree within fp32 rounding, however
 * the sequence is fed (all at once, a prompt then one token at a time, one at a time from the
 * start, pieces of 3), for two sequences sharing one cache through gpt_kv_clear, on GPT-2's
 * initialisation and on wide random weights. Then the refusals, and every allocation failing in
 * turn with nothing leaked.
 *
 * Tolerance: per position, max |cached - full| over the vocabulary <= 1e-5 x max |full|. The
 * two paths run the same kernels on different row counts and sum attention over different
 * lengths, so they differ by fp32 rounding only (measured: printed below, ~1e-7); a wrong
 * position, a stale cache row or a missed mask is off by 1e-2 or more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_kv.h"
#include "tests/sample/sample_testing.h"
#include "tests/testing.h"

enum { B = 2, T = 16, VOCAB = 200 };
#define TOL 1e-5

static const gpt_config CFG = {
    .n_layer = 3, .n_head = 4, .n_embd = 32, .vocab = VOCAB, .max_seq = T};

static double worst_seen;

/* Feeds `seq` (T tokens) in pieces of `piece` after a first piece of `first`, collecting every
 * position's logits (vocab columns) into got[T * VOCAB]. */
static void run_cached(gpt_kv *kv, const int32_t *seq, int first, int piece, float *got) {
  gpt_kv_clear(kv);
  int at = 0;
  while (at < T) {
    int n = at == 0 ? first : piece;
    if (n > T - at) n = T - at;
    CHECK_OK(gpt_kv_forward(kv, seq + at, n, n, got + (int64_t)at * VOCAB));
    at += n;
    CHECK_EQ_INT(gpt_kv_length(kv), at);
  }
}

/* Per position: max abs difference over the vocabulary relative to the largest full logit. */
static void compare(const char *what, const float *got, const float *full, int vocab_padded) {
  double worst = 0;
  int worst_pos = 0;
  for (int t = 0; t < T; t++) {
    double diff = 0, scale = 0;
    for (int v = 0; v < VOCAB; v++) {
      diff = fmax(diff, fabs((double)got[t * VOCAB + v] - full[t * vocab_padded + v]));
      scale = fmax(scale, fabs((double)full[t * vocab_padded + v]));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      worst_pos = t;
    }
  }
  CHECK_MSG(worst <= TOL, "%s: position %d differs by %.3g of its largest logit (tolerance %g)",
            what, worst_pos, worst, TOL);
  if (worst > worst_seen) worst_seen = worst;
}

static void check_equivalence(test_weights weights, const char *name) {
  gpt_model *m = test_model(CFG, B, weights, 11);
  int32_t tokens[B * T];
  for (int i = 0; i < B * T; i++) tokens[i] = (int32_t)((i * 37 + 5) % VOCAB);
  tokens[3] = VOCAB - 1; /* the last real row of wte */
  const int vp = m->cfg.vocab_padded;
  float *full = malloc(sizeof(float) * B * T * vp), *got = malloc(sizeof(float) * T * VOCAB);
  test_full_logits(m, tokens, full);
  gpt_kv *kv = NULL;
  CHECK_OK(gpt_kv_create(&kv, m, T, T));
  const struct {
    int first, piece;
    const char *how;
  } feeds[] = {{T, T, "all at once"},
               {5, 1, "a prompt of 5, then one at a time"},
               {1, 1, "one at a time"},
               {3, 3, "pieces of 3"}};
  for (int b = 0; b < B; b++) {
    for (size_t f = 0; f < sizeof feeds / sizeof feeds[0]; f++) {
      char what[128];
      snprintf(what, sizeof what, "%s weights, sequence %d, %s", name, b, feeds[f].how);
      run_cached(kv, tokens + b * T, feeds[f].first, feeds[f].piece, got);
      compare(what, got, full + (int64_t)b * T * vp, vp);
    }
  }
  printf(
      "kv_cache_test: %s weights: cached vs full logits differ by at most %.3g of a "
      "position's largest logit (tolerance %g)\n",
      name, worst_seen, TOL);
  worst_seen = 0;
  gpt_kv_destroy(kv);
  free(got);
  free(full);
  gpt_destroy(m);
}

static void check_refusals(void) {
  gpt_model *m = test_model(CFG, 1, TEST_WEIGHTS_INIT, 3);
  gpt_kv *kv = NULL;
  float logits[4 * VOCAB];
  int32_t ok[4] = {1, 2, 3, 4}, bad[2] = {1, VOCAB};
  CHECK_STATUS(gpt_kv_create(&kv, m, T + 1, 1), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_kv_create(&kv, m, 2, 3), ST_ERR_INVALID_ARG);
  CHECK_OK(gpt_kv_create(&kv, m, 4, 2));
  CHECK_STATUS(gpt_kv_forward(kv, bad, 2, 1, logits), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "token 200 (new token 1) is outside the vocabulary [0, 200)"),
            "detail: %s", st_last_error());
  CHECK_EQ_INT(gpt_kv_length(kv), 0);
  CHECK_STATUS(gpt_kv_forward(kv, ok, 4, 3, logits), ST_ERR_INVALID_ARG);
  CHECK_STATUS(gpt_kv_forward(kv, ok, 0, 1, logits), ST_ERR_INVALID_ARG);
  for (int i = 0; i < T / 4; i++) CHECK_OK(gpt_kv_forward(kv, ok, 4, 1, logits));
  CHECK_STATUS(gpt_kv_forward(kv, ok, 1, 1, logits), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "would pass the model's 16 positions"), "detail: %s",
            st_last_error());
  gpt_kv_destroy(kv);
  gpt_destroy(m);
}

/* Every allocation of creating a cache and running it fails in turn: ST_ERR_OOM, no leak. */
static void check_oom(void) {
  gpt_model *m = test_model(CFG, 1, TEST_WEIGHTS_INIT, 3);
  int32_t tokens[3] = {7, 8, 9};
  float logits[VOCAB];
  mem_stats before;
  mem_stats_get(&before);
  int failures = 0;
  for (long n = 1; n < 1000; n++) {
    gpt_kv *kv = NULL;
    mem_fail_nth(n);
    st_status status = gpt_kv_create(&kv, m, 3, 1);
    if (status == ST_OK) status = gpt_kv_forward(kv, tokens, 3, 1, logits);
    mem_fail_nth(0);
    gpt_kv_destroy(kv);
    mem_stats after;
    mem_stats_get(&after);
    CHECK_MSG(after.live_blocks == before.live_blocks, "allocation %ld failed: %lld blocks leaked",
              n, (long long)(after.live_blocks - before.live_blocks));
    if (status == ST_OK) break;
    CHECK_MSG(status == ST_ERR_OOM, "allocation %ld failed: got %s", n, st_status_string(status));
    failures++;
  }
  CHECK_MSG(failures >= 4, "only %d allocations were exercised", failures);
  gpt_destroy(m);
}

int main(void) {
  check_equivalence(TEST_WEIGHTS_INIT, "initial");
  check_equivalence(TEST_WEIGHTS_WIDE, "wide");
  check_refusals();
  check_oom();
  return test_finish("kv_cache_test");
}
