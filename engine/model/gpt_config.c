/* gpt_config.c - named configs and validation. */
#include "engine/model/gpt_config.h"

#include <limits.h>
#include <string.h>

#include "core/error.h"
#include "engine/model/gpt.h"

typedef struct named_config {
  const char *name;
  gpt_config config;
} named_config;

/* tiny is the test model; d-configs are GPT-2 small/medium/large/XL and llm.c's d6. */
static const named_config named[] = {
    {"tiny", {2, 4, 64, 256, 0, 64}},        {"d6", {6, 6, 384, 50257, 0, 1024}},
    {"d12", {12, 12, 768, 50257, 0, 1024}},  {"d24", {24, 16, 1024, 50257, 0, 1024}},
    {"d36", {36, 20, 1280, 50257, 0, 1024}}, {"d48", {48, 25, 1600, 50257, 0, 1024}},
};

st_status gpt_config_named(const char *name, gpt_config *out) {
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
    if (strcmp(name, named[i].name) == 0) {
      *out = named[i].config;
      return ST_OK;
    }
  }
  return st_error(ST_ERR_INVALID_ARG, "model '%s' is not one of tiny, d6, d12, d24, d36, d48",
                  name);
}

const char *gpt_config_named_shape(int n_layer, int n_embd, gpt_config *out) {
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
    if (named[i].config.n_layer == n_layer && named[i].config.n_embd == n_embd) {
      *out = named[i].config;
      return named[i].name;
    }
  }
  return NULL;
}

st_status gpt_config_finish(gpt_config *cfg, int tp) {
  if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->n_embd < 1 || cfg->vocab < 1 ||
      cfg->max_seq < 1) {
    return st_error(ST_ERR_INVALID_ARG,
                    "model shape n_layer=%d n_head=%d n_embd=%d vocab=%d seq_len=%d: every value "
                    "must be >= 1",
                    cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->vocab, cfg->max_seq);
  }
  if (cfg->n_layer > GPT_MAX_LAYERS) {
    return st_error(ST_ERR_INVALID_ARG, "n_layer %d: at most %d layers", cfg->n_layer,
                    GPT_MAX_LAYERS);
  }
  if (cfg->n_embd % cfg->n_head != 0) {
    return st_error(ST_ERR_INVALID_ARG, "n_embd %d is not divisible by n_head %d", cfg->n_embd,
                    cfg->n_head);
  }
  if (tp < 1 || cfg->n_head % tp != 0) {
    return st_error(ST_ERR_INVALID_ARG, "tp %d does not divide n_head %d", tp, cfg->n_head);
  }
  const int64_t multiple = 128 * (int64_t)tp;
  const int64_t padded = (cfg->vocab + multiple - 1) / multiple * multiple;
  if (padded > INT_MAX) {
    return st_error(ST_ERR_INVALID_ARG,
                    "vocab %d padded to a multiple of 128 x tp %d is %lld rows: more than an int "
                    "counts",
                    cfg->vocab, tp, (long long)padded);
  }
  cfg->vocab_padded = (int)padded;
  return ST_OK;
}

int64_t gpt_config_num_params(const gpt_config *cfg) {
  int64_t C = cfg->n_embd;
  int64_t per_block =
      2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return (int64_t)cfg->vocab_padded * C + (int64_t)cfg->max_seq * C + cfg->n_layer * per_block +
         2 * C;
}

int64_t gpt_config_trained_params(const gpt_config *cfg) {
  return gpt_config_num_params(cfg) - (int64_t)(cfg->vocab_padded - cfg->vocab) * cfg->n_embd;
}

double gpt_config_flops_per_token(const gpt_config *cfg, int seq_len) {
  const double N = (double)gpt_config_trained_params(cfg);
  return 6.0 * N + 6.0 * cfg->n_layer * (double)cfg->n_embd * seq_len;
}
