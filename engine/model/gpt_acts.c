/* gpt_acts.c - the activation plan: one walk over the buffers both measures what
 * gpt_activation_bytes reports to the memory planner and carves the arenas, so the prediction
 * and the allocation cannot drift apart. Activations and their gradients are in the model's
 * activation dtype, statistics in fp32; also the descriptors the forward and backward read. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/model/gpt_internal.h"

void *gpt_carve_add(gpt_carve *c, int64_t len, size_t elem_bytes) {
  void *at = c->base ? c->base + c->total : NULL;
  c->total += ((int64_t)elem_bytes * len + 63) / 64 * 64;
  return at;
}

st_dtype gpt_activation_dtype(st_device_kind device, st_dtype param) {
  return kernel_kind_computes_in(device, param) ? param : ST_FP32;
}

/* Whether every op of the model whose backward writes parameter gradients writes them in
 * `grads` beside activations in `act` (kernel_kind_supports_grad_dtype). */
static int kernels_write_grads(st_device_kind device, st_dtype act, st_dtype grads) {
  static const kernel_op param_grad_ops[] = {KERNEL_OP_MATMUL, KERNEL_OP_MATMUL_GELU,
                                             KERNEL_OP_LAYERNORM, KERNEL_OP_EMBEDDING};
  int all = 1;
  for (size_t i = 0; all && i < sizeof param_grad_ops / sizeof *param_grad_ops; i++) {
    all = kernel_kind_supports_grad_dtype(device, param_grad_ops[i], act, grads);
  }
  return all;
}

st_status gpt_check_precision(st_device_kind device, unit_precision precision) {
  const st_dtype act = gpt_activation_dtype(device, precision.param);
  const st_dtype grads = gpt_activation_dtype(device, precision.reduce);
  if (grads == act || kernels_write_grads(device, act, grads)) return ST_OK;
  const int fp32_too = act != ST_FP32 && kernels_write_grads(device, act, ST_FP32);
  const char *or_fp32 = fp32_too ? " or fp32" : "";
  return st_error(ST_ERR_UNSUPPORTED,
                  "params in %s and gradients in %s: the %s kernels write a weight's gradient in "
                  "%s (the activations' dtype)%s; give --reduce-dtype %s%s",
                  dtype_name(precision.param), dtype_name(precision.reduce),
                  device == ST_DEVICE_CUDA ? "cuda" : "cpu", dtype_name(act), or_fp32,
                  dtype_name(act), or_fp32);
}

/* The sizes one walk needs: activation elements (act bytes) and fp32 statistics. */
typedef struct acts_shape {
  int64_t BT, C, CL, vocab_padded, att_state, head_rows;
  size_t act, f32;
  gpt_recompute recompute;
} acts_shape;

static acts_shape shape_of(const gpt_config *c, st_device_kind device, st_dtype param, int B, int T,
                           int tp, gpt_recompute recompute) {
  return (acts_shape){.recompute = recompute,
                      .BT = (int64_t)B * T,
                      .C = c->n_embd,
                      .CL = c->n_embd / tp,
                      .vocab_padded = c->vocab_padded,
                      .att_state = kernel_kind_attention_state_numel(device, B, c->n_head / tp, T),
                      .head_rows = gpt_head_rows(c, B, T, tp),
                      .act = dtype_size(gpt_activation_dtype(device, param)),
                      .f32 = sizeof(float)};
}

/* Carves `len` elements of `bytes` each for `field`; while measuring (a == NULL) only counts. */
#define CARVE(field, len, bytes)                  \
  do {                                            \
    void *at_ = gpt_carve_add(p, (len), (bytes)); \
    if (a) (field) = at_;                         \
  } while (0)

/* Layer l's forward buffers, on a tensor-parallel rank of tp: the attention and MLP inner
 * activations hold this rank's heads (C / tp wide) and MLP columns (4C / tp); the residual
 * stream is full width; the attention state has the size the device's kernels ask for. A buffer
 * the backward recomputes is carved for layer 0 alone and shared by every later layer: with
 * block recompute all but res3 (the block's output, which the next block reads), with GELU
 * recompute fch_gelu. */
static void plan_layer(gpt_carve *p, gpt_acts *a, int l, const acts_shape *s) {
  const int64_t BT = s->BT, C = s->C, CL = s->CL;
  const int share_block = l > 0 && s->recompute == GPT_RECOMPUTE_BLOCK;
  const int share_gelu = l > 0 && s->recompute != GPT_RECOMPUTE_NONE;
  if (a && l > 0) a->layers[l] = a->layers[0]; /* the shared buffers; the rest is carved below */
  if (!share_block) {
    CARVE(a->layers[l].ln1, BT * C, s->act);
    CARVE(a->layers[l].ln1_mean, BT, s->f32);
    CARVE(a->layers[l].ln1_rstd, BT, s->f32);
    CARVE(a->layers[l].qkv, BT * 3 * CL, s->act);
    CARVE(a->layers[l].atty, BT * CL, s->act);
    CARVE(a->layers[l].att_state, s->att_state, s->f32);
    CARVE(a->layers[l].attproj, BT * C, s->act);
    CARVE(a->layers[l].res2, BT * C, s->act);
    CARVE(a->layers[l].ln2, BT * C, s->act);
    CARVE(a->layers[l].ln2_mean, BT, s->f32);
    CARVE(a->layers[l].ln2_rstd, BT, s->f32);
    CARVE(a->layers[l].fch, BT * 4 * CL, s->act);
    CARVE(a->layers[l].fcproj, BT * C, s->act);
  }
  if (!share_gelu) CARVE(a->layers[l].fch_gelu, BT * 4 * CL, s->act);
  CARVE(a->layers[l].res3, BT * C, s->act);
}

/* Forward buffers kept for backward: the embedding's output, the layers', the final norm's and
 * the head's. */
static void plan_forward(gpt_carve *p, gpt_acts *a, int n_layer, const acts_shape *s) {
  const int64_t BT = s->BT, C = s->C;
  CARVE(a->encoded, BT * C, s->act);
  for (int l = 0; l < n_layer; l++) plan_layer(p, a, l, s);
  CARVE(a->lnf, BT * C, s->act);
  CARVE(a->lnf_mean, BT, s->f32);
  CARVE(a->lnf_rstd, BT, s->f32);
  CARVE(a->losses, BT, s->f32);
}

/* The head's one chunk of logits (and of their gradient, in place: gpt_head.c), the backward
 * gradient buffers (the MLP's pre-activation gradient overwrites dfch_gelu in place; dln also
 * carries d(lnf) from the training forward's head), the device copies of the tokens and the
 * step's scalars. */
static void plan_scratch(gpt_carve *p, gpt_acts *a, const acts_shape *s) {
  const int64_t BT = s->BT, C = s->C, CL = s->CL;
  CARVE(a->logits, s->head_rows * s->vocab_padded, s->act);
  CARVE(a->dres, BT * C, s->act);
  CARVE(a->dln, BT * C, s->act);
  CARVE(a->datty, BT * CL, s->act);
  CARVE(a->dqkv, BT * 3 * CL, s->act);
  CARVE(a->dfch_gelu, BT * 4 * CL, s->act);
  CARVE(a->inputs, BT, sizeof(int32_t));
  CARVE(a->targets, BT, sizeof(int32_t));
  CARVE(a->scalars, GPT_SCALARS, s->f32);
}
#undef CARVE

void gpt_activation_bytes(const gpt_config *cfg, st_device_kind device, st_dtype param, int B,
                          int T, int tp, gpt_recompute recompute, int64_t *activations,
                          int64_t *scratch) {
  const acts_shape s = shape_of(cfg, device, param, B, T, tp, recompute);
  gpt_carve fwd = {0}, bwd = {0};
  plan_forward(&fwd, NULL, cfg->n_layer, &s);
  plan_scratch(&bwd, NULL, &s);
  *activations = fwd.total;
  *scratch = bwd.total;
}

st_status gpt_acts_allocate(gpt_model *m) {
  gpt_acts *a = &m->acts;
  ST_CHECK(mem_alloc_zeroed((void **)&a->layers, (size_t)m->cfg.n_layer * sizeof *a->layers,
                            MEM_HOST, MEM_WORKSPACE, NULL));
  const acts_shape s = shape_of(&m->cfg, m->dev->backend->kind, m->par.precision.param, m->B, m->T,
                                m->tp_size, m->par.recompute);
  gpt_carve fwd = {0}, bwd = {0};
  plan_forward(&fwd, NULL, m->cfg.n_layer, &s);
  plan_scratch(&bwd, NULL, &s);
  ST_CHECK(mem_alloc(&a->arena, (size_t)fwd.total, MEM_DEVICE, MEM_ACTIVATIONS, m->dev));
  ST_CHECK(mem_alloc(&a->scratch, (size_t)bwd.total, MEM_DEVICE, MEM_WORKSPACE, m->dev));
  /* Pinned, so that the step's one copy of its scalars to the host is asynchronous. */
  ST_CHECK(mem_alloc((void **)&a->scalars_host, GPT_SCALARS * sizeof(float), MEM_PINNED,
                     MEM_WORKSPACE, m->dev));
  fwd = (gpt_carve){.base = a->arena};
  bwd = (gpt_carve){.base = a->scratch};
  plan_forward(&fwd, a, m->cfg.n_layer, &s);
  plan_scratch(&bwd, a, &s);
  a->head_rows = s.head_rows;
  return ST_OK;
}

void gpt_acts_free(gpt_model *m) {
  mem_free(m->acts.scalars_host);
  mem_free(m->acts.scratch);
  mem_free(m->acts.arena);
  mem_free(m->acts.layers);
  memset(&m->acts, 0, sizeof m->acts);
}
