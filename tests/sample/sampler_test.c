/* sampler_test.c - the sampler on hand-made logits: greedy takes the largest (the lower id on a
 * tie); top-k keeps exactly the k largest (the lower ids among ties at the boundary); draws follow
 * softmax(logits / temperature) (20000 draws over 4 tokens, each frequency within 0.015 of its
 * probability: about 4 standard deviations); a seed repeats its draws and another seed does not;
 * bad settings and a NaN logit are refused. */
#include "engine/model/sampler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing.h"

enum { DRAWS = 20000 };

static sampler *make(int vocab, double temperature, int top_k, uint64_t seed) {
  sampler *s = NULL;
  const sampler_config c = {temperature, top_k, seed};
  CHECK_OK(sampler_create(&s, vocab, &c));
  return s;
}

static int32_t pick(sampler *s, const float *logits) {
  int32_t t = -1;
  CHECK_OK(sampler_pick(s, logits, &t));
  return t;
}

static void check_greedy(void) {
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
  sampler *s = make(6, 0.0, 0, 1);
  CHECK_EQ_INT(pick(s, logits), 1); /* 1 and 3 tie: the lower id */
  sampler_destroy(s);
  s = make(6, 3.0, 1, 77);
  int all_top = 1;
  for (int i = 0; i < 100; i++) all_top &= pick(s, logits) == 1;
  CHECK_MSG(all_top, "top-k 1 at temperature 3 always takes the largest logit");
  sampler_destroy(s);
}

static void check_top_k(void) {
  float logits[50];
  for (int i = 0; i < 50; i++) logits[i] = (float)((i * 17) % 50) * 0.01f; /* a permutation */
  sampler *s = make(50, 5.0, 3, 9);                                        /* nearly flat */
  int seen[50] = {0}, outside = 0;
  for (int i = 0; i < 3000; i++) {
    int32_t t = pick(s, logits);
    seen[t]++;
    outside += logits[t] < 0.47f; /* the three largest are 0.49, 0.48, 0.47 */
  }
  CHECK_MSG(outside == 0, "top-k 3: %d draws outside the 3 largest logits", outside);
  int top_seen = 0;
  for (int i = 0; i < 50; i++) top_seen += logits[i] >= 0.47f && seen[i] > 0;
  CHECK_EQ_INT(top_seen, 3);
  sampler_destroy(s);
}

/* With many tied logits, top-k keeps exactly the k first by (logit descending, id ascending),
 * found here by a plain O(V k) scan: at a huge temperature all k are drawn, and nothing else. */
static void check_top_k_ties(void) {
  enum { V = 1000, K = 7 };
  static float logits[V];
  for (int i = 0; i < V; i++) logits[i] = (float)((i * 7919) % 23); /* 23 values, ~43 ties each */
  int keep[V] = {0};
  for (int j = 0; j < K; j++) {
    int best = -1;
    for (int i = 0; i < V; i++) {
      if (!keep[i] && (best < 0 || logits[i] > logits[best])) best = i;
    }
    keep[best] = 1;
  }
  sampler *s = make(V, 1e6, K, 31);
  int seen[V] = {0}, outside = 0, kept_seen = 0;
  for (int i = 0; i < 2000; i++) {
    int32_t t = pick(s, logits);
    outside += !keep[t];
    kept_seen += keep[t] && !seen[t]++;
  }
  CHECK_MSG(outside == 0, "top-k %d with ties: %d draws outside the k first", K, outside);
  CHECK_EQ_INT(kept_seen, K);
  sampler_destroy(s);
}

/* Frequencies of DRAWS draws against softmax(logits / temperature). */
static void check_distribution(double temperature, int top_k) {
  const double p[4] = {0.1, 0.2, 0.3, 0.4};
  float logits[4];
  for (int i = 0; i < 4; i++) logits[i] = (float)log(p[i]);
  double want[4], total = 0;
  for (int i = 0; i < 4; i++) total += want[i] = pow(p[i], 1.0 / temperature);
  sampler *s = make(4, temperature, top_k, 2024);
  int count[4] = {0};
  for (int i = 0; i < DRAWS; i++) count[pick(s, logits)]++;
  for (int i = 0; i < 4; i++) {
    double freq = (double)count[i] / DRAWS;
    CHECK_MSG(fabs(freq - want[i] / total) < 0.015,
              "temperature %g, top-k %d: token %d drawn %.4f of the time, expected %.4f",
              temperature, top_k, i, freq, want[i] / total);
  }
  sampler_destroy(s);
}

static void check_seeds(void) {
  float logits[64];
  for (int i = 0; i < 64; i++) logits[i] = 0.0f;
  int32_t a[32], b[32], c[32];
  sampler *sa = make(64, 1.0, 0, 5), *sb = make(64, 1.0, 0, 5), *sc = make(64, 1.0, 0, 6);
  for (int i = 0; i < 32; i++) {
    a[i] = pick(sa, logits);
    b[i] = pick(sb, logits);
    c[i] = pick(sc, logits);
  }
  CHECK_MSG(memcmp(a, b, sizeof a) == 0, "seed 5 twice draws the same tokens");
  CHECK_MSG(memcmp(a, c, sizeof a) != 0, "seeds 5 and 6 draw different tokens");
  sampler_destroy(sa);
  sampler_destroy(sb);
  sampler_destroy(sc);
}

static void check_refusals(void) {
  sampler *s = NULL;
  sampler_config c = {-0.5, 0, 1};
  CHECK_STATUS(sampler_create(&s, 10, &c), ST_ERR_INVALID_ARG);
  c = (sampler_config){NAN, 0, 1};
  CHECK_STATUS(sampler_create(&s, 10, &c), ST_ERR_INVALID_ARG);
  c = (sampler_config){1.0, -1, 1};
  CHECK_STATUS(sampler_create(&s, 10, &c), ST_ERR_INVALID_ARG);
  CHECK(s == NULL);
  s = make(3, 1.0, 0, 1);
  const float bad[3] = {0.0f, NAN, 1.0f};
  int32_t t;
  CHECK_STATUS(sampler_pick(s, bad, &t), ST_ERR_INVALID_ARG);
  sampler_destroy(s);
}

int main(void) {
  check_greedy();
  check_top_k();
  check_top_k_ties();
  check_distribution(1.0, 0);
  check_distribution(2.0, 0);
  check_distribution(0.5, 10); /* top-k above the vocabulary keeps all of it */
  check_seeds();
  check_refusals();
  return test_finish("sampler_test");
}
