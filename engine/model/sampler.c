/* sampler.c - greedy and top-k / temperature sampling (sampler.h). The candidate table
 * (MEM_WORKSPACE, one entry per token) belongs to the sampler; picking allocates nothing. */
#include "engine/model/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"

typedef struct candidate {
  float logit;
  int32_t id;
} candidate;

struct sampler {
  sampler_config config;
  int vocab;
  uint64_t stream; /* the RNG stream of the draws */
  uint64_t draws;  /* draws so far: the index of the next */
  candidate *candidates;
};

st_status sampler_create(sampler **out, int vocab, const sampler_config *config) {
  *out = NULL;
  if (vocab < 1) return st_error(ST_ERR_INVALID_ARG, "sampler over %d tokens", vocab);
  if (!(config->temperature >= 0) || !isfinite(config->temperature)) {
    return st_error(ST_ERR_INVALID_ARG, "temperature %g: must be finite and >= 0",
                    config->temperature);
  }
  if (config->top_k < 0) {
    return st_error(ST_ERR_INVALID_ARG, "top-k %d: must be >= 0", config->top_k);
  }
  sampler *s = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&s, sizeof *s, MEM_HOST, MEM_WORKSPACE, NULL));
  *s = (sampler){.config = *config, .vocab = vocab, .stream = rng_stream_of("sample")};
  st_status status = mem_alloc((void **)&s->candidates, (size_t)vocab * sizeof *s->candidates,
                               MEM_HOST, MEM_WORKSPACE, NULL);
  if (status != ST_OK) {
    sampler_destroy(s);
    return status;
  }
  *out = s;
  return ST_OK;
}

void sampler_destroy(sampler *s) {
  if (!s) return;
  mem_free(s->candidates);
  mem_free(s);
}

/* Larger logit first, then lower id: a total order, so the result does not depend on qsort. */
static int by_logit(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Restores the heap below `i`: heap[0] is the last in by_logit's order of the k kept. */
static void sift_down(candidate *heap, int k, int i) {
  for (;;) {
    int child = 2 * i + 1, last = i;
    if (child < k && by_logit(&heap[child], &heap[last]) > 0) last = child;
    if (child + 1 < k && by_logit(&heap[child + 1], &heap[last]) > 0) last = child + 1;
    if (last == i) return;
    candidate t = heap[i];
    heap[i] = heap[last];
    heap[last] = t;
    i = last;
  }
}

/* The k first of the vocabulary in by_logit's order into c[0, k), sorted: a heap of the k best
 * so far (O(V log k), where sorting all of GPT-2's 50257 logits per token took as long as a
 * small model's forward). */
static void select_top_k(candidate *c, const float *logits, int vocab, int k) {
  for (int i = 0; i < k; i++) c[i] = (candidate){logits[i], i};
  for (int i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
  for (int i = k; i < vocab; i++) {
    candidate next = {logits[i], i};
    if (by_logit(&next, &c[0]) < 0) {
      c[0] = next;
      sift_down(c, k, 0);
    }
  }
  qsort(c, (size_t)k, sizeof *c, by_logit);
}

st_status sampler_pick(sampler *s, const float *logits, int32_t *token) {
  const uint64_t draw = s->draws++;
  int32_t best = 0;
  for (int i = 0; i < s->vocab; i++) {
    if (!isfinite(logits[i])) {
      return st_error(ST_ERR_INVALID_ARG, "logit of token %d is %g: the model is broken", i,
                      (double)logits[i]);
    }
    if (logits[i] > logits[best]) best = i;
  }
  const int k = s->config.top_k == 0 || s->config.top_k > s->vocab ? s->vocab : s->config.top_k;
  if (s->config.temperature == 0) {
    *token = best;
    return ST_OK;
  }
  candidate *c = s->candidates;
  if (k < s->vocab) {
    select_top_k(c, logits, s->vocab, k);
  } else {
    for (int i = 0; i < s->vocab; i++) c[i] = (candidate){logits[i], i};
  }
  /* Weights relative to the largest logit, so none overflows; summed in double. */
  const double max = logits[best], inv_t = 1.0 / s->config.temperature;
  double total = 0;
  for (int i = 0; i < k; i++) total += exp(((double)c[i].logit - max) * inv_t);
  const double target = rng_uniform_at(s->config.seed, s->stream, draw) * total;
  double sum = 0;
  for (int i = 0; i < k; i++) {
    sum += exp(((double)c[i].logit - max) * inv_t);
    if (target < sum) {
      *token = c[i].id;
      return ST_OK;
    }
  }
  /* Rounding left the target at the very top: the last candidate with any weight. */
  int last = k - 1;
  while (last > 0 && exp(((double)c[last].logit - max) * inv_t) == 0) last--;
  *token = c[last].id;
  return ST_OK;
}
