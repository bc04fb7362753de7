/* gpt_views.c - the fp32 tensor descriptors the forward, backward and key/value-cache forward
 * read the model's buffers through: shorthands by rank, and one layer's activations and
 * gradient buffers on this tp rank. Building a descriptor allocates nothing and cannot fail:
 * the extents come from a validated config and the buffers from the activation plan
 * (gpt_acts.c). */
#include "engine/model/gpt_internal.h"

int64_t gpt_local_heads(const gpt_model *m) { return m->cfg.n_head / m->tp_size; }

st_tensor gpt_t1(const gpt_model *m, float *data, int64_t d0) {
  st_tensor t;
  tensor_make(&t, data, ST_FP32, m->dev->backend->kind, 1, &d0);
  return t;
}

st_tensor gpt_t2(const gpt_model *m, float *data, int64_t d0, int64_t d1) {
  const int64_t shape[2] = {d0, d1};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, m->dev->backend->kind, 2, shape);
  return t;
}

st_tensor gpt_t4(const gpt_model *m, float *data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t shape[4] = {d0, d1, d2, d3};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, m->dev->backend->kind, 4, shape);
  return t;
}

static st_tensor t3(const gpt_model *m, float *data, int64_t width) {
  const int64_t shape[3] = {m->B, m->T, width};
  st_tensor t;
  tensor_make(&t, data, ST_FP32, m->dev->backend->kind, 3, shape);
  return t;
}

void gpt_layer_views_make(const gpt_model *m, int l, float *x_in, gpt_layer_views *v) {
  const int64_t BT = (int64_t)m->B * m->T, C = m->cfg.n_embd, CL = C / m->tp_size;
  const gpt_layer_acts *a = &m->acts.layers[l];
  const gpt_acts *g = &m->acts;
  *v = (gpt_layer_views){
      .x = gpt_t2(m, x_in, BT, C),
      .ln1 = gpt_t2(m, a->ln1, BT, C),
      .ln1_mean = gpt_t1(m, a->ln1_mean, BT),
      .ln1_rstd = gpt_t1(m, a->ln1_rstd, BT),
      .qkv = gpt_t2(m, a->qkv, BT, 3 * CL),
      .qkv3 = t3(m, a->qkv, 3 * CL),
      .atty = gpt_t2(m, a->atty, BT, CL),
      .atty3 = t3(m, a->atty, CL),
      .probs = gpt_t4(m, a->probs, m->B, gpt_local_heads(m), m->T, m->T),
      .attproj = gpt_t2(m, a->attproj, BT, C),
      .res2 = gpt_t2(m, a->res2, BT, C),
      .ln2 = gpt_t2(m, a->ln2, BT, C),
      .ln2_mean = gpt_t1(m, a->ln2_mean, BT),
      .ln2_rstd = gpt_t1(m, a->ln2_rstd, BT),
      .fch = gpt_t2(m, a->fch, BT, 4 * CL),
      .fch_gelu = gpt_t2(m, a->fch_gelu, BT, 4 * CL),
      .fcproj = gpt_t2(m, a->fcproj, BT, C),
      .res3 = gpt_t2(m, a->res3, BT, C),
      .dres = gpt_t2(m, g->dres, BT, C),
      .dln = gpt_t2(m, g->dln, BT, C),
      .datty = gpt_t2(m, g->datty, BT, CL),
      .datty3 = t3(m, g->datty, CL),
      .dqkv = gpt_t2(m, g->dqkv, BT, 3 * CL),
      .dqkv3 = t3(m, g->dqkv, 3 * CL),
      .dfch = gpt_t2(m, g->dfch, BT, 4 * CL),
      .dfch_gelu = gpt_t2(m, g->dfch_gelu, BT, 4 * CL),
  };
}
