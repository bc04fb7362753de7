/* gpt_params.c - the GPT's units: declaring its parameters (with their TP splits), creating
 * and destroying the model, initialisation, and lookup by Hugging Face name. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_internal.h"

static st_status declare_embedding(unit_layout *l, const gpt_config *c) {
  const int64_t wte[2] = {c->vocab_padded, c->n_embd}, wpe[2] = {c->max_seq, c->n_embd};
  ST_CHECK(unit_layout_add(l, "wte.weight", 2, wte, TP_REPLICATED, 1));
  return unit_layout_add(l, "wpe.weight", 2, wpe, TP_REPLICATED, 1);
}

/* Megatron's split: qkv and MLP-up are column-parallel (qkv as three fused blocks, so a tp
 * rank holds whole heads), attention-out and MLP-down are row-parallel with replicated biases
 * (added once, after the all-reduce), norms replicated. */
static st_status declare_block(unit_layout *l, const gpt_config *c) {
  const int64_t C = c->n_embd;
  const int64_t vec[1] = {C}, qkv_w[2] = {C, 3 * C}, qkv_b[1] = {3 * C}, proj_w[2] = {C, C},
                fc_w[2] = {C, 4 * C}, fc_b[1] = {4 * C}, fcproj_w[2] = {4 * C, C};
  ST_CHECK(unit_layout_add(l, "ln_1.weight", 1, vec, TP_REPLICATED, 1));
  ST_CHECK(unit_layout_add(l, "ln_1.bias", 1, vec, TP_REPLICATED, 1));
  ST_CHECK(unit_layout_add(l, "attn.c_attn.weight", 2, qkv_w, TP_COLUMN, 3));
  ST_CHECK(unit_layout_add(l, "attn.c_attn.bias", 1, qkv_b, TP_COLUMN, 3));
  ST_CHECK(unit_layout_add(l, "attn.c_proj.weight", 2, proj_w, TP_ROW, 1));
  ST_CHECK(unit_layout_add(l, "attn.c_proj.bias", 1, vec, TP_REPLICATED, 1));
  ST_CHECK(unit_layout_add(l, "ln_2.weight", 1, vec, TP_REPLICATED, 1));
  ST_CHECK(unit_layout_add(l, "ln_2.bias", 1, vec, TP_REPLICATED, 1));
  ST_CHECK(unit_layout_add(l, "mlp.c_fc.weight", 2, fc_w, TP_COLUMN, 1));
  ST_CHECK(unit_layout_add(l, "mlp.c_fc.bias", 1, fc_b, TP_COLUMN, 1));
  ST_CHECK(unit_layout_add(l, "mlp.c_proj.weight", 2, fcproj_w, TP_ROW, 1));
  return unit_layout_add(l, "mlp.c_proj.bias", 1, vec, TP_REPLICATED, 1);
}

static st_status declare_final(unit_layout *l, const gpt_config *c) {
  const int64_t vec[1] = {c->n_embd};
  ST_CHECK(unit_layout_add(l, "ln_f.weight", 1, vec, TP_REPLICATED, 1));
  return unit_layout_add(l, "ln_f.bias", 1, vec, TP_REPLICATED, 1);
}

st_status gpt_declare_unit(const gpt_config *c, int index, unit_layout *layout) {
  if (index == 0) return declare_embedding(layout, c);
  if (index == c->n_layer + 1) return declare_final(layout, c);
  return declare_block(layout, c);
}

void gpt_unit_prefix(const gpt_config *cfg, int index, char *out, size_t size) {
  if (index == 0 || index == cfg->n_layer + 1) {
    snprintf(out, size, "%s", "");
  } else {
    snprintf(out, size, "h.%d.", index - 1);
  }
}

int64_t gpt_table_bytes(const gpt_config *cfg) {
  const gpt_model *m = NULL; /* for the element sizes only */
  return (int64_t)sizeof *m + (int64_t)GPT_SCALARS * (int64_t)sizeof *m->acts.scalars_host +
         (int64_t)(cfg->n_layer + 2) * (int64_t)(sizeof *m->units + sizeof *m->prefixes) +
         (int64_t)cfg->n_layer * (int64_t)sizeof *m->acts.layers;
}

static st_status create_units(gpt_model *m) {
  const gpt_config *c = &m->cfg;
  const st_mesh *mesh = m->par.mesh;
  unit_groups groups = {0};
  if (mesh) {
    groups = (unit_groups){mesh_comm(mesh, ST_GROUP_SHARD), mesh_comm(mesh, ST_GROUP_REPLICATE)};
  }
  ST_CHECK(unit_streams_create(&m->streams, m->dev, &m->stream, mesh ? &groups : NULL));
  m->n_units = c->n_layer + 2;
  ST_CHECK(mem_alloc_zeroed((void **)&m->units, (size_t)m->n_units * sizeof *m->units, MEM_HOST,
                            MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc_zeroed((void **)&m->prefixes, (size_t)m->n_units * sizeof *m->prefixes,
                            MEM_HOST, MEM_WORKSPACE, NULL));
  for (int i = 0; i < m->n_units; i++) {
    char name[32];
    int layer = i - 1;
    if (i == 0) {
      snprintf(name, sizeof name, "embedding");
    } else if (i == m->n_units - 1) {
      snprintf(name, sizeof name, "final");
    } else {
      snprintf(name, sizeof name, "h.%d", layer);
    }
    gpt_unit_prefix(c, i, m->prefixes[i], sizeof m->prefixes[i]);
    unit *u = &m->units[i];
    ST_CHECK(unit_init(u, name, m->dev, m->par.stage, &m->par.precision, mesh ? &groups : NULL,
                       m->tp_size, m->tp_rank));
    unit_use_kernels(u, m->kb);
    ST_CHECK(unit_share_streams(u, &m->streams));
    ST_CHECK(gpt_declare_unit(c, i, &u->layout));
    if (m->par.offload_optimizer) ST_CHECK(unit_offload_optimizer(u));
    ST_CHECK(unit_allocate(u));
  }
  return ST_OK;
}

st_status gpt_create(gpt_model **out, const gpt_config *cfg, const st_device *dev, int B, int T,
                     const gpt_parallel *par) {
  *out = NULL;
  if (B < 1 || T < 1 || T > cfg->max_seq) {
    return st_error(ST_ERR_INVALID_ARG, "micro-batch %d x %d tokens: need B >= 1 and 1 <= T <= %d",
                    B, T, cfg->max_seq);
  }
  gpt_model *m = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&m, sizeof *m, MEM_HOST, MEM_WORKSPACE, NULL));
  m->cfg = *cfg;
  m->par = par ? *par : (gpt_parallel){0};
  m->dp = m->par.mesh ? mesh_comm(m->par.mesh, ST_GROUP_DP) : NULL;
  m->tp = m->par.mesh ? mesh_comm(m->par.mesh, ST_GROUP_TP) : NULL;
  m->tp_size = m->tp ? comm_size(m->tp) : 1;
  m->tp_rank = m->tp ? comm_rank(m->tp) : 0;
  if (m->cfg.n_head % m->tp_size != 0) {
    st_status status =
        st_error(ST_ERR_INVALID_ARG, "tp %d does not divide n_head %d", m->tp_size, m->cfg.n_head);
    mem_free(m);
    return status;
  }
  if (m->par.recompute < GPT_RECOMPUTE_NONE || m->par.recompute >= GPT_RECOMPUTE_COUNT) {
    st_status status = st_error(ST_ERR_INVALID_ARG, "recompute mode %d is not none, gelu or block",
                                (int)m->par.recompute);
    mem_free(m);
    return status;
  }
  m->dev = dev;
  m->B = B;
  m->T = T;
  st_status status;
  m->act = gpt_activation_dtype(dev->backend->kind, m->par.precision.param);
  ST_CHECK_GOTO(gpt_check_precision(dev->backend->kind, m->par.precision), status, fail);
  ST_CHECK_GOTO(kernel_backend_create(dev, &m->kb), status, fail);
  ST_CHECK_GOTO(stream_create(dev, &m->stream), status, fail);
  ST_CHECK_GOTO(stream_create(dev, &m->tp_stream), status, fail);
  ST_CHECK_GOTO(event_create(dev, &m->tp_ready), status, fail);
  ST_CHECK_GOTO(create_units(m), status, fail);
  ST_CHECK_GOTO(gpt_acts_allocate(m), status, fail);
  *out = m;
  return ST_OK;
fail:
  gpt_destroy(m);
  return status;
}

void gpt_destroy(gpt_model *m) {
  if (!m) return;
  gpt_acts_free(m);
  for (int i = m->n_units - 1; i >= 0 && m->units; i--) unit_free(&m->units[i]);
  mem_free(m->prefixes);
  mem_free(m->units);
  unit_streams_destroy(&m->streams);
  event_destroy(&m->tp_ready);
  stream_destroy(&m->tp_stream);
  stream_destroy(&m->stream);
  kernel_backend_destroy(m->kb);
  mem_free(m);
}

/* Standard deviation of a parameter's initial values (0: constant). */
static double init_std(const gpt_config *c, const char *name, float *constant) {
  *constant = 0.0f;
  size_t n = strlen(name);
  int is_bias = n > 5 && strcmp(name + n - 5, ".bias") == 0;
  if (is_bias) return 0;
  if (strncmp(name, "ln_", 3) == 0) {
    *constant = 1.0f;
    return 0;
  }
  if (strstr(name, "c_proj.weight")) return 0.02 / sqrt(2.0 * c->n_layer);
  return 0.02;
}

/* Fills elements [lo, hi) of one parameter's local slice into values[0, hi - lo) (host
 * scratch). Each value is a pure function of the seed, the parameter's name and the element's
 * global index (core/rng.h), so the threads give the same bits as one, and a rank that keeps
 * only its shard (stage 3) the same bits as one that keeps it all. One thread takes about 42 ns
 * a value here (a log and a cos in double): about a minute for d48's 1.5 B on one rank, start-up
 * a GPU run waits for; at stage 3 each rank computes only its shard. */
static void init_param(const gpt_model *m, int u, int k, uint64_t seed, int64_t lo, int64_t hi,
                       float *values) {
  const unit *un = &m->units[u];
  const unit_param *p = &un->layout.params[k];
  char full[UNIT_NAME_MAX + 16];
  snprintf(full, sizeof full, "%s%s", m->prefixes[u], p->name);
  float constant;
  double std = init_std(&m->cfg, p->name, &constant);
  uint64_t stream = rng_stream_of(full);
  int64_t real_end = (int64_t)m->cfg.vocab * m->cfg.n_embd; /* wte's padding rows stay 0 */
#pragma omp parallel for schedule(static)
  for (int64_t e = lo; e < hi; e++) {
    int64_t g = unit_param_global_index(p, un->layout.T, un->layout.t, e);
    int padding = u == 0 && k == GPT_WTE && g >= real_end;
    values[e - lo] = padding   ? 0.0f
                     : std > 0 ? (float)(std * rng_normal_at(seed, stream, (uint64_t)g))
                               : constant;
  }
}

/* The most initial values held on the host at once: set-up's scratch (outside the planner's
 * count, which starts at the first step) stays 6 MiB whatever the model, not 6 bytes per
 * element of its largest parameter (fp32 values and their 16-bit upload). */
enum { INIT_CHUNK = 1 << 20 };

st_status gpt_init_params(gpt_model *m, uint64_t seed) {
  const int64_t largest = gpt_largest_param(m);
  const int64_t chunk = largest < INIT_CHUNK ? largest : INIT_CHUNK;
  float *values = NULL;
  ST_CHECK(mem_alloc((void **)&values, (size_t)(chunk > 0 ? chunk : 1) * sizeof(float), MEM_HOST,
                     MEM_WORKSPACE, NULL));
  st_status status = ST_OK;
  for (int u = 0; u < m->n_units && status == ST_OK; u++) {
    unit *un = &m->units[u];
    int64_t keep_begin, keep_end;
    unit_kept_range(un, &keep_begin, &keep_end);
    for (int k = 0; k < un->layout.count && status == ST_OK; k++) {
      const unit_param *p = &un->layout.params[k];
      /* The parameter's elements this rank keeps, from its start (none: an empty range). */
      const int64_t lo = keep_begin > p->offset ? keep_begin - p->offset : 0;
      const int64_t hi = keep_end - p->offset < p->numel ? keep_end - p->offset : p->numel;
      for (int64_t at = lo; at < hi && status == ST_OK; at += chunk) {
        const int64_t end = hi - at < chunk ? hi : at + chunk;
        init_param(m, u, k, seed, at, end, values);
        status = unit_set_params(un, p->offset + at, values, end - at);
      }
    }
  }
  mem_free(values);
  return status;
}

int64_t gpt_largest_param(const gpt_model *m) {
  int64_t most = 0;
  for (int u = 0; u < m->n_units; u++) {
    const unit_layout *l = &m->units[u].layout;
    for (int k = 0; k < l->count; k++) {
      int64_t n = 1;
      for (int d = 0; d < l->params[k].ndim; d++) n *= l->params[k].shape[d];
      if (n > most) most = n;
    }
  }
  return most;
}

st_status gpt_param_scratch(const gpt_model *m, float **out) {
  return mem_alloc((void **)out, (size_t)gpt_largest_param(m) * sizeof(float), MEM_HOST,
                   MEM_WORKSPACE, NULL);
}

st_status gpt_step_end(gpt_model *m) {
  /* The collectives ordered on C and the tp stream: the tp sums, and the step's scalars over
   * the tp, dp, shard and replicate groups (train_step). */
  comm *watched[4] = {m->tp, m->dp, m->units[0].groups.shard, m->units[0].groups.replicate};
  for (int i = 0; i < 4; i++) {
    if (watched[i]) ST_CHECK(comm_drain(watched[i]));
  }
  ST_CHECK(unit_streams_step_end(&m->streams));
  return stream_sync(&m->tp_stream);
}

st_status gpt_zero_grads(gpt_model *m) {
  for (int i = 0; i < m->n_units; i++) ST_CHECK(unit_grads_zero(&m->units[i]));
  return ST_OK;
}
