/* gpt_recompute.c - activation recompute (gpt_recompute.h): the modes' names, and what the
 * backward computes again before a block's backward. The forward is unchanged by the mode: the
 * activation plan (gpt_acts.c) points every layer at the shared buffers, so each layer's
 * forward overwrites the previous one's there, and this file restores block l's. */
#include "engine/model/gpt_recompute.h"

#include <string.h>

#include "core/error.h"
#include "engine/model/gpt_internal.h"

static const char *const names[GPT_RECOMPUTE_COUNT] = {"none", "gelu", "block"};

const char *gpt_recompute_name(gpt_recompute mode) {
  return mode >= 0 && mode < GPT_RECOMPUTE_COUNT ? names[mode] : "?";
}

int gpt_recompute_parse(const char *name) {
  for (int i = 0; i < GPT_RECOMPUTE_COUNT; i++) {
    if (name && strcmp(name, names[i]) == 0) return i;
  }
  return -1;
}

/* Block l's forward again from its input into the shared buffers, up to the MLP's GELU. The
 * opening norm is a plain LayerNorm of the kept input: in the forward it was fused with the
 * residual add that wrote that input (res3), and both compute the norm from the stored sum, so
 * they give the same bits. */
static st_status recompute_block(gpt_model *m, int l, const gpt_layer_views *v) {
  st_tensor w = GPT_P(m, 1 + l, GPT_LN1_W), b = GPT_P(m, 1 + l, GPT_LN1_B);
  ST_CHECK(kernel_layernorm_forward(m->kb, &v->ln1, &v->ln1_mean, &v->ln1_rstd, &v->x, &w, &b,
                                    &m->stream));
  return gpt_block_forward_from_ln1(m, l, v, 0);
}

st_status gpt_recompute_layer(gpt_model *m, int l, void *x_in) {
  /* The last block's activations are still in the shared buffers: the forward ended with it. */
  if (m->par.recompute == GPT_RECOMPUTE_NONE || l == m->cfg.n_layer - 1) return ST_OK;
  gpt_layer_views v;
  gpt_layer_views_make(m, l, x_in, &v);
  if (m->par.recompute == GPT_RECOMPUTE_GELU) {
    return kernel_gelu_forward(m->kb, &v.fch_gelu, &v.fch, &m->stream);
  }
  return recompute_block(m, l, &v);
}
