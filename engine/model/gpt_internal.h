/* gpt_internal.h - what the GPT's files share and nothing outside engine/model/gpt*.c uses:
 * activation allocation (gpt_acts.c) and the descriptor shorthands the forward and backward
 * read (gpt_views.c). */
#ifndef ST_ENGINE_MODEL_GPT_INTERNAL_H
#define ST_ENGINE_MODEL_GPT_INTERNAL_H

#include "engine/model/gpt.h"

/* A walk over buffers carved from one arena: with a base, each buffer is placed in it; without,
 * only the total is counted, so one walk both measures and carves and the two cannot drift
 * apart. Every buffer starts 64-byte aligned. */
typedef struct gpt_carve {
  char *base;
  int64_t total; /* bytes */
} gpt_carve;

/* Adds a buffer of len elements of elem_bytes each: where it starts, or NULL while measuring. */
void *gpt_carve_add(gpt_carve *c, int64_t len, size_t elem_bytes);

st_status gpt_acts_allocate(gpt_model *m);
void gpt_acts_free(gpt_model *m);

/* The head and its loss over the final norm's output, chunk by chunk (gpt_head.c): losses,
 * and in training (dloss_scale > 0) d(lnf) into acts.dln and wte's gradient. */
st_status gpt_head_forward(gpt_model *m, float dloss_scale);

/* Elements of the model's largest logical tensor, and a host scratch buffer that holds it. */
int64_t gpt_largest_param(const gpt_model *m);
st_status gpt_param_scratch(const gpt_model *m, float **out);

/* The attention heads of this tp rank: n_head / tp. */
int64_t gpt_local_heads(const gpt_model *m);
/* Contiguous descriptors on the model's device. The extents come from a validated config, so
 * building them cannot fail. fp32 (statistics, host-facing buffers): [d0] or [d0, d1]. */
st_tensor gpt_t1(const gpt_model *m, float *data, int64_t d0);
st_tensor gpt_t2(const gpt_model *m, float *data, int64_t d0, int64_t d1);
/* Activations in the model's activation dtype: [d0, d1], or [B, T, width]. */
st_tensor gpt_a2(const gpt_model *m, void *data, int64_t d0, int64_t d1);
st_tensor gpt_a3(const gpt_model *m, void *data, int64_t width);

/* Descriptors of layer l's activations and of the backward's gradient buffers, on this tp rank
 * (the attention and MLP inner buffers are C/tp and 4C/tp wide); x is the block's input. The
 * "3" variants are the [B, T, width] views the attention kernel reads. */
typedef struct gpt_layer_views {
  st_tensor x, ln1, ln1_mean, ln1_rstd, qkv, qkv3, atty, atty3, att_state, attproj, res2;
  st_tensor ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, res3;
  st_tensor dres, dln, datty, datty3, dqkv, dqkv3, dfch_gelu;
} gpt_layer_views;

void gpt_layer_views_make(const gpt_model *m, int l, void *x_in, gpt_layer_views *v);

/* Block l's forward after its opening LayerNorm (v->ln1 and its statistics hold it; v->x is
 * the block's input): the attention, the second norm with the residual add, the MLP, and the
 * MLP's output projection only `with_output` (only the next norm reads it, so the backward's
 * recompute leaves it out). gpt_forward.c. */
st_status gpt_block_forward_from_ln1(gpt_model *m, int l, const gpt_layer_views *v,
                                     int with_output);

/* Recomputes what the mode of activation recompute did not keep of block l's activations
 * (gpt_recompute.h), from the block's input x_in, right before the block's backward.
 * gpt_recompute.c. */
st_status gpt_recompute_layer(gpt_model *m, int l, void *x_in);

/* Parameter and gradient descriptors of unit `u`'s parameter k. */
#define GPT_P(m, u, k) unit_param_tensor(&(m)->units[(u)], (k))
#define GPT_G(m, u, k) unit_grad_tensor(&(m)->units[(u)], (k))

#endif /* ST_ENGINE_MODEL_GPT_INTERNAL_H */
