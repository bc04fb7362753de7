/* gpt_kv.h - the GPT forward for generation: one sequence on one rank, with a key/value cache.
 *
 * A gpt_kv holds, per layer, the keys and values of every position fed so far, so each call
 * runs only its new tokens through the blocks (a prompt at once, then one token at a time) and
 * the prefix is never recomputed. The logits it returns are those gpt_forward computes for the
 * same tokens at the same positions, up to fp32 rounding. Parameters are read through the
 * model's units (gathered on first use, released at destroy), ops through the kernel backend
 * and memory through core/alloc, so the same code runs on any device with kernels. It keeps
 * nothing for a backward and never touches the model's training activations, so a model may
 * be built with a micro-batch of 1 x 1 for it. */
#ifndef ST_ENGINE_MODEL_GPT_KV_H
#define ST_ENGINE_MODEL_GPT_KV_H

#include <stdint.h>

#include "engine/model/gpt.h"

typedef struct gpt_kv gpt_kv;

/* A cache for model's max_seq positions, taking up to max_tokens new tokens per call and
 * returning the logits of up to max_logits of them. The model must be on one tensor-parallel
 * rank (ST_ERR_UNSUPPORTED otherwise) and outlive the cache. */
st_status gpt_kv_create(gpt_kv **out, gpt_model *model, int max_tokens, int max_logits);
/* Releases the model's units and frees the cache; NULL is accepted. */
void gpt_kv_destroy(gpt_kv *kv);

/* The model's config, and the most new tokens a call takes. */
const gpt_config *gpt_kv_config(const gpt_kv *kv);
int gpt_kv_max_tokens(const gpt_kv *kv);

/* Positions cached so far (the next token's position). */
int gpt_kv_length(const gpt_kv *kv);
/* Forgets the sequence: the next call starts at position 0. */
void gpt_kv_clear(gpt_kv *kv);

/* Runs host tokens[0, n) at positions [length, length + n) and appends their keys and values.
 * Writes the logits of the last n_logits of them (1 <= n_logits <= n) to host `logits`,
 * n_logits rows of the real vocabulary (cfg.vocab columns; the padding rows of wte never take
 * part). A token outside [0, vocab), n above max_tokens, n_logits above max_logits, or a
 * sequence longer than max_seq is ST_ERR_INVALID_ARG naming the numbers, with nothing run. */
st_status gpt_kv_forward(gpt_kv *kv, const int32_t *tokens, int n, int n_logits, float *logits);

#endif /* ST_ENGINE_MODEL_GPT_KV_H */
