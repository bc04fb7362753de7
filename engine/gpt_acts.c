/* gpt_acts.c - the activation plan: one walk over the buffers both measures what
 * gpt_activation_bytes reports to the memory planner and carves the arenas, so the prediction
 * and the allocation cannot drift apart. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/gpt_internal.h"

void gpt_carve_add(gpt_carve *c, float **slot, int64_t len) {
  if (c->base) *slot = c->base + c->total;
  c->total += (len + 15) / 16 * 16;
}

/* Forward buffers kept for backward, on a tensor-parallel rank of tp: the attention and MLP
 * inner activations hold this rank's heads (C / tp wide) and MLP columns (4C / tp); the
 * residual stream is full width. With a == NULL (measuring) there are no slots. */
static void plan_forward(gpt_carve *p, gpt_acts *a, const gpt_config *c, int B, int T, int tp) {
  const int64_t BT = (int64_t)B * T, C = c->n_embd, NH = c->n_head / tp, CL = C / tp;
#define SLOT(field) (a ? &(field) : NULL)
  gpt_carve_add(p, SLOT(a->encoded), BT * C);
  for (int l = 0; l < c->n_layer; l++) {
    gpt_layer_acts *L = a ? &a->layers[l] : NULL;
    gpt_carve_add(p, L ? &L->ln1 : NULL, BT * C);
    gpt_carve_add(p, L ? &L->ln1_mean : NULL, BT);
    gpt_carve_add(p, L ? &L->ln1_rstd : NULL, BT);
    gpt_carve_add(p, L ? &L->qkv : NULL, BT * 3 * CL);
    gpt_carve_add(p, L ? &L->atty : NULL, BT * CL);
    gpt_carve_add(p, L ? &L->probs : NULL, (int64_t)B * NH * T * T);
    gpt_carve_add(p, L ? &L->attproj : NULL, BT * C);
    gpt_carve_add(p, L ? &L->res2 : NULL, BT * C);
    gpt_carve_add(p, L ? &L->ln2 : NULL, BT * C);
    gpt_carve_add(p, L ? &L->ln2_mean : NULL, BT);
    gpt_carve_add(p, L ? &L->ln2_rstd : NULL, BT);
    gpt_carve_add(p, L ? &L->fch : NULL, BT * 4 * CL);
    gpt_carve_add(p, L ? &L->fch_gelu : NULL, BT * 4 * CL);
    gpt_carve_add(p, L ? &L->fcproj : NULL, BT * C);
    gpt_carve_add(p, L ? &L->res3 : NULL, BT * C);
  }
  gpt_carve_add(p, SLOT(a->lnf), BT * C);
  gpt_carve_add(p, SLOT(a->lnf_mean), BT);
  gpt_carve_add(p, SLOT(a->lnf_rstd), BT);
  gpt_carve_add(p, SLOT(a->logits), BT * c->vocab_padded);
  gpt_carve_add(p, SLOT(a->losses), BT);
}

/* Backward gradient buffers, and the device copies of the tokens (int32, same size as fp32). */
static void plan_scratch(gpt_carve *p, gpt_acts *a, const gpt_config *c, int B, int T, int tp) {
  const int64_t BT = (int64_t)B * T, C = c->n_embd, CL = C / tp;
  gpt_carve_add(p, SLOT(a->dres), BT * C);
  gpt_carve_add(p, SLOT(a->dln), BT * C);
  gpt_carve_add(p, SLOT(a->datty), BT * CL);
  gpt_carve_add(p, SLOT(a->dqkv), BT * 3 * CL);
  gpt_carve_add(p, SLOT(a->dfch), BT * 4 * CL);
  gpt_carve_add(p, SLOT(a->dfch_gelu), BT * 4 * CL);
  gpt_carve_add(p, a ? (float **)&a->inputs : NULL, BT);
  gpt_carve_add(p, a ? (float **)&a->targets : NULL, BT);
#undef SLOT
}

void gpt_activation_bytes(const gpt_config *cfg, int B, int T, int tp, int64_t *activations,
                          int64_t *scratch) {
  gpt_carve fwd = {0}, bwd = {0};
  plan_forward(&fwd, NULL, cfg, B, T, tp);
  plan_scratch(&bwd, NULL, cfg, B, T, tp);
  *activations = fwd.total * (int64_t)sizeof(float);
  *scratch = bwd.total * (int64_t)sizeof(float);
}

st_status gpt_acts_allocate(gpt_model *m) {
  gpt_acts *a = &m->acts;
  ST_CHECK(mem_alloc_zeroed((void **)&a->layers, (size_t)m->cfg.n_layer * sizeof *a->layers,
                            MEM_HOST, MEM_WORKSPACE, NULL));
  int64_t activations = 0, scratch = 0;
  gpt_activation_bytes(&m->cfg, m->B, m->T, m->tp_size, &activations, &scratch);
  ST_CHECK(mem_alloc((void **)&a->arena, (size_t)activations, MEM_DEVICE, MEM_ACTIVATIONS, m->dev));
  ST_CHECK(mem_alloc((void **)&a->scratch, (size_t)scratch, MEM_DEVICE, MEM_WORKSPACE, m->dev));
  gpt_carve fwd = {.base = a->arena}, bwd = {.base = a->scratch};
  plan_forward(&fwd, a, &m->cfg, m->B, m->T, m->tp_size);
  plan_scratch(&bwd, a, &m->cfg, m->B, m->T, m->tp_size);
  return ST_OK;
}

void gpt_acts_free(gpt_model *m) {
  mem_free(m->acts.scratch);
  mem_free(m->acts.arena);
  mem_free(m->acts.layers);
  memset(&m->acts, 0, sizeof m->acts);
}

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

st_status gpt_tp_sum(gpt_model *m, float *buf) {
  if (m->tp_size == 1) return ST_OK;
  /* On the tp stream after C's work so far (buf's producers); C goes on after the sum. */
  ST_CHECK(event_record(&m->tp_ready, &m->stream));
  ST_CHECK(stream_wait_event(&m->tp_stream, &m->tp_ready));
  comm_work work;
  ST_CHECK(comm_all_reduce_on(m->tp, &m->tp_stream, buf, buf, (size_t)m->B * m->T * m->cfg.n_embd,
                              ST_FP32, COMM_SUM, &work));
  return comm_order_after(&work, &m->stream);
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
