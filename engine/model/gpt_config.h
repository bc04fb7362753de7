/* gpt_config.h - the GPT-2 family's shapes: named configs (tiny for tests, d6 .. d48 as in
 * GPT-2 / llm.c) and explicit overrides, validated against a tensor-parallel size. */
#ifndef ST_ENGINE_MODEL_GPT_CONFIG_H
#define ST_ENGINE_MODEL_GPT_CONFIG_H

#include <stdint.h>

#include "shardtrain.h"

typedef struct gpt_config {
  int n_layer;
  int n_head;
  int n_embd;
  int vocab;        /* real vocabulary (256 bytes, or GPT-2's 50257) */
  int vocab_padded; /* vocab rounded up to a multiple of 128 (x tp): the wte rows */
  int max_seq;      /* positions: wpe rows */
} gpt_config;

/* The named config ("tiny", "d6", "d12", "d24", "d36", "d48"). */
st_status gpt_config_named(const char *name, gpt_config *out);

/* The named config of this depth and width, or NULL: how the number of heads, which no tensor
 * shape shows, is found for a file that does not record it (GPT-2's released sizes are all
 * named). */
const char *gpt_config_named_shape(int n_layer, int n_embd, gpt_config *out);

/* Checks every dimension (positive, heads divide n_embd, tp divides heads) and sets
 * vocab_padded. Messages name the numbers. */
st_status gpt_config_finish(gpt_config *cfg, int tp);

/* Parameters of the model (logical, before any split; padded vocabulary rows included). */
int64_t gpt_config_num_params(const gpt_config *cfg);

/* The parameters that are trained and exported: gpt_config_num_params without the vocabulary's
 * padding rows of wte. The count `shardtrain train` reports, and the N of every MFU. */
int64_t gpt_config_trained_params(const gpt_config *cfg);

/* The model FLOPs of one trained token in sequences of `seq_len` tokens: 6 N + 6 L C T, with N
 * = gpt_config_trained_params (each parameter's multiply-add once in the forward and twice in
 * the backward: embeddings, biases and norms counted like the matmul weights they sit beside,
 * the padding rows of the vocabulary not) and 6 L C T for causal attention's two T x T
 * products, forward and backward (half of 12 L C T: the masked half is not counted). The one
 * numerator of MFU: the trainer's (engine/train/step_mfu.h) and the simulator's. */
double gpt_config_flops_per_token(const gpt_config *cfg, int seq_len);

#endif /* ST_ENGINE_MODEL_GPT_CONFIG_H */
