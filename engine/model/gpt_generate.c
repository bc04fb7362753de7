/* gpt_generate.c - the generation loop (gpt_generate.h). Owns one host row of logits
 * (MEM_WORKSPACE) for the length of a call. */
#include "engine/model/gpt_generate.h"

#include "core/alloc.h"
#include "core/error.h"

static st_status check_prompt(const gpt_config *c, const int32_t *prompt, int n_prompt, int n_new) {
  if (n_prompt < 1) return st_error(ST_ERR_INVALID_ARG, "the prompt is empty");
  if (n_prompt > c->max_seq) {
    return st_error(ST_ERR_INVALID_ARG, "the prompt has %d tokens, the model has only %d positions",
                    n_prompt, c->max_seq);
  }
  if (n_new < 1) return st_error(ST_ERR_INVALID_ARG, "%d new tokens asked for: need >= 1", n_new);
  for (int i = 0; i < n_prompt; i++) {
    if (prompt[i] < 0 || prompt[i] >= c->vocab) {
      return st_error(ST_ERR_INVALID_ARG,
                      "prompt token %d (at %d) is outside the model's vocabulary [0, %d)",
                      (int)prompt[i], i, c->vocab);
    }
  }
  return ST_OK;
}

/* Feeds the prompt in pieces the cache takes; the logits of its last token land in `logits`. */
static st_status prefill(gpt_kv *kv, const int32_t *prompt, int n_prompt, float *logits) {
  const int piece = gpt_kv_max_tokens(kv);
  for (int at = 0; at < n_prompt; at += piece) {
    int n = n_prompt - at < piece ? n_prompt - at : piece;
    ST_CHECK(gpt_kv_forward(kv, prompt + at, n, 1, logits));
  }
  return ST_OK;
}

static st_status run(gpt_kv *kv, sampler *s, const int32_t *prompt, int n_prompt, int n_new,
                     int32_t *out, gpt_token_fn on_token, void *ctx, gpt_generation *result,
                     float *logits) {
  const int max_seq = gpt_kv_config(kv)->max_seq;
  ST_CHECK(prefill(kv, prompt, n_prompt, logits));
  /* The logits are for the token at position gpt_kv_length(kv): none when the prompt filled
   * the cache, and a picked token at the last position is not fed (nothing could follow it). */
  result->full = n_new > 0 && gpt_kv_length(kv) == max_seq;
  while (result->generated < n_new && !result->full) {
    int32_t token;
    ST_CHECK(sampler_pick(s, logits, &token));
    out[result->generated++] = token;
    if (on_token) ST_CHECK(on_token(ctx, token));
    if (result->generated == n_new) break;
    result->full = gpt_kv_length(kv) + 1 == max_seq;
    if (!result->full) ST_CHECK(gpt_kv_forward(kv, &token, 1, 1, logits));
  }
  return ST_OK;
}

st_status gpt_generate(gpt_kv *kv, sampler *s, const int32_t *prompt, int n_prompt, int n_new,
                       int32_t *out, gpt_token_fn on_token, void *ctx, gpt_generation *result) {
  *result = (gpt_generation){0};
  const gpt_config *c = gpt_kv_config(kv);
  ST_CHECK(check_prompt(c, prompt, n_prompt, n_new));
  gpt_kv_clear(kv);
  float *logits = NULL;
  ST_CHECK(mem_alloc((void **)&logits, (size_t)c->vocab * sizeof *logits, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  st_status status = run(kv, s, prompt, n_prompt, n_new, out, on_token, ctx, result, logits);
  mem_free(logits);
  return status;
}
