/* gpt_acts.c - the activation plan: one walk over the buffers both measures what
 * gpt_activation_bytes reports to the memory planner and carves the arenas, so the prediction
 * and the allocation cannot drift apart. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_internal.h"

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
