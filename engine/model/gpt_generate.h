/* gpt_generate.h - the generation loop: a prompt through a gpt_kv, then one sampled token at a
 * time fed back, until the requested count or the model's last position. */
#ifndef ST_ENGINE_MODEL_GPT_GENERATE_H
#define ST_ENGINE_MODEL_GPT_GENERATE_H

#include <stdint.h>

#include "engine/model/gpt_kv.h"
#include "engine/model/sampler.h"

/* Called with each new token as soon as it is chosen (to print it as it comes); a status other
 * than ST_OK ends the generation with that status. */
typedef st_status (*gpt_token_fn)(void *ctx, int32_t token);

typedef struct gpt_generation {
  int generated; /* tokens written to `out` */
  int full;      /* 1 when it stopped early because the sequence filled the model's positions */
} gpt_generation;

/* Clears `kv`, feeds prompt[0, n_prompt) (in pieces of the cache's max_tokens), then samples up
 * to n_new tokens into out[], each fed back before the next is chosen. The sequence (prompt and
 * new tokens) never passes the model's max_seq positions: generation stops there with
 * result->full set. on_token may be NULL. A prompt longer than max_seq, an empty one, or a token
 * outside the vocabulary is ST_ERR_INVALID_ARG before anything runs. */
st_status gpt_generate(gpt_kv *kv, sampler *s, const int32_t *prompt, int n_prompt, int n_new,
                       int32_t *out, gpt_token_fn on_token, void *ctx, gpt_generation *result);

#endif /* ST_ENGINE_MODEL_GPT_GENERATE_H */
