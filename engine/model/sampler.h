/* sampler.h - choosing the next token from logits: greedy (temperature 0), or a draw from
 * softmax(logits / temperature) over the top_k largest (0: all of them). Draws are a pure
 * function of (seed, draw number) through core/rng, so a run is reproducible from its seed
 * whatever else happens in the process. Ties go to the lower token id. */
#ifndef ST_ENGINE_MODEL_SAMPLER_H
#define ST_ENGINE_MODEL_SAMPLER_H

#include <stdint.h>

#include "shardtrain.h"

typedef struct sampler_config {
  double temperature; /* >= 0; 0 picks the most likely token */
  int top_k;          /* >= 0; 0 keeps the whole vocabulary */
  uint64_t seed;
} sampler_config;

typedef struct sampler sampler;

/* A sampler over `vocab` logits. A negative or non-finite temperature or a negative top_k is
 * ST_ERR_INVALID_ARG naming the value. */
st_status sampler_create(sampler **out, int vocab, const sampler_config *config);
/* NULL is accepted. */
void sampler_destroy(sampler *s);

/* Picks a token id in [0, vocab) from host logits[vocab]; each call is the next draw. A
 * non-finite logit is ST_ERR_INVALID_ARG (the model is broken; no choice would mean anything). */
st_status sampler_pick(sampler *s, const float *logits, int32_t *token);

#endif /* ST_ENGINE_MODEL_SAMPLER_H */
