/* gpt_io.c - import and export of Hugging Face GPT-2 parameter files. A parameter is read as
 * the whole logical tensor (converted to fp32 on the host) and its TP slice is picked out
 * element by element through the unit layout, so the same code serves any tp rank. */
#include "engine/model/gpt_io.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/io/job_agree.h"
#include "engine/io/safetensors.h"
#include "engine/model/gpt_internal.h"

static void hf_name(const gpt_model *m, int u, const unit_param *p, const char *prefix, char *out,
                    size_t size) {
  snprintf(out, size, "%s%s%s", prefix, m->prefixes[u], p->name);
}

static st_status check_dtype(const safetensors_entry *e, const char *path) {
  if (e->dtype == SAFETENSORS_F32 || e->dtype == SAFETENSORS_BF16 || e->dtype == SAFETENSORS_F16) {
    return ST_OK;
  }
  return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has dtype %s; F32, BF16 or F16 expected", path,
                  e->name, safetensors_dtype_name(e->dtype));
}

/* n elements of a checked dtype (at most 4 bytes each) to fp32. */
static void to_f32(safetensors_dtype dtype, const void *raw, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == SAFETENSORS_F32) {
      memcpy(&out[i], (const char *)raw + 4 * i, 4);
    } else if (dtype == SAFETENSORS_BF16) {
      out[i] = f32_from_bf16(((const uint16_t *)raw)[i]);
    } else {
      out[i] = f32_from_fp16(((const uint16_t *)raw)[i]);
    }
  }
}

/* Whether the file's shape can fill the parameter: equal, or more rows for wpe, or the real
 * vocabulary's rows for wte. */
static int shape_fits(const gpt_model *m, int u, int k, const safetensors_entry *e) {
  const unit_param *p = &m->units[u].layout.params[k];
  if (e->ndim != p->ndim) return 0;
  for (int d = 1; d < p->ndim; d++) {
    if (e->shape[d] != p->shape[d]) return 0;
  }
  if (u == 0 && k == GPT_WTE) return e->shape[0] == m->cfg.vocab || e->shape[0] == p->shape[0];
  if (u == 0 && k == GPT_WPE) return e->shape[0] >= p->shape[0];
  return e->shape[0] == p->shape[0];
}

/* Reads one parameter's logical tensor into `full` and hands the unit its TP slice, built in
 * `slice`. */
static st_status import_param(gpt_model *m, int u, int k, const safetensors_reader *r,
                              const char *path, const char *prefix, float *full, void *raw,
                              float *slice) {
  unit *un = &m->units[u];
  const unit_param *p = &un->layout.params[k];
  char name[UNIT_NAME_MAX + 64];
  hf_name(m, u, p, prefix, name, sizeof name);
  const safetensors_entry *e = safetensors_reader_find(r, name);
  if (!e) return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
  if (!shape_fits(m, u, k, e)) {
    char have[96], want[96];
    tensor_shape_text(have, sizeof have, e->ndim, e->shape);
    tensor_shape_text(want, sizeof want, p->ndim, p->shape);
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is %s, the model expects %s", path, name, have,
                    want);
  }
  ST_CHECK(check_dtype(e, path));
  /* The model needs at most its own logical size: wpe may have more rows in the file (the
   * first are taken) and wte fewer (the padding rows are zero). */
  int64_t logical = 1;
  for (int d = 0; d < p->ndim; d++) logical *= p->shape[d];
  int64_t file_elements = (int64_t)e->numel < logical ? (int64_t)e->numel : logical;
  ST_CHECK(safetensors_reader_read(r, e, 0, (uint64_t)file_elements, raw));
  to_f32(e->dtype, raw, full, file_elements);
  for (int64_t i = 0; i < p->numel; i++) {
    int64_t g = unit_param_global_index(p, un->layout.T, un->layout.t, i);
    slice[i] = g < file_elements ? full[g] : 0.0f;
  }
  return unit_set_params(un, p->offset, slice, p->numel);
}

/* Buffers some GPT-2 files carry beside the parameters (the causal mask) and the output head
 * tied to wte: not parameters, so their presence says nothing about the model's shape. */
static int is_buffer(const char *name) {
  const char *dot = strrchr(name, '.');
  return strcmp(name, "lm_head.weight") == 0 ||
         (dot && (strcmp(dot, ".bias") == 0 || strcmp(dot, ".masked_bias") == 0) &&
          strncmp(name, "h.", 2) == 0 && dot - name >= 5 && strncmp(dot - 5, ".attn", 5) == 0);
}

/* A 2-D tensor the config is read from. */
static st_status config_tensor(const safetensors_reader *r, const char *path, const char *name,
                               const safetensors_entry **out) {
  *out = safetensors_reader_find(r, name);
  if (!*out) return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
  if ((*out)->ndim != 2 || (*out)->shape[0] > INT32_MAX || (*out)->shape[1] > INT32_MAX) {
    char shape[96];
    tensor_shape_text(shape, sizeof shape, (*out)->ndim, (*out)->shape);
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is %s, not a [rows, n_embd] table", path, name,
                    shape);
  }
  return ST_OK;
}

/* 1 + the largest l of the "h.<l>." names (0 without any). */
static int count_layers(const safetensors_reader *r) {
  long most = -1;
  for (size_t i = 0; i < safetensors_reader_count(r); i++) {
    const char *name = safetensors_reader_entry(r, i)->name;
    if (strncmp(name, "h.", 2) != 0) continue;
    char *end = NULL;
    errno = 0;
    long l = strtol(name + 2, &end, 10);
    if (end != name + 2 && *end == '.' && errno == 0 && l > most) most = l;
  }
  return most >= GPT_MAX_LAYERS ? GPT_MAX_LAYERS + 1 : (int)(most + 1);
}

/* The n_head the file's metadata records in *out (0 when it records none). */
static st_status recorded_heads(const safetensors_reader *r, const char *path, int *out) {
  *out = 0;
  const char *recorded = safetensors_reader_metadata(r, GPT_META_N_HEAD);
  if (!recorded) return ST_OK;
  char *end = NULL;
  errno = 0;
  long v = strtol(recorded, &end, 10);
  if (end == recorded || *end || errno || v < 1 || v > INT32_MAX) {
    return st_error(ST_ERR_FORMAT, "%s: metadata %s is '%s', not a positive integer", path,
                    GPT_META_N_HEAD, recorded);
  }
  *out = (int)v;
  return ST_OK;
}

/* A head count that contradicts the file's record would load the same tensors into another
 * model (other text, silently): refused, naming both. */
static st_status check_heads(const safetensors_reader *r, const char *path, int n_head) {
  int recorded = 0;
  ST_CHECK(recorded_heads(r, path, &recorded));
  if (recorded && n_head != recorded) {
    return st_error(
        ST_ERR_INVALID_ARG,
        "%s records n_head %d (metadata %s) and the model asks for n_head %d (--n-head)", path,
        recorded, GPT_META_N_HEAD, n_head);
  }
  return ST_OK;
}

static st_status config_heads(const safetensors_reader *r, const char *path, int n_head,
                              gpt_config *c) {
  if (n_head > 0) {
    ST_CHECK(check_heads(r, path, n_head));
    c->n_head = n_head;
    return ST_OK;
  }
  int recorded = 0;
  ST_CHECK(recorded_heads(r, path, &recorded));
  if (recorded) {
    c->n_head = recorded;
    return ST_OK;
  }
  gpt_config named;
  if (gpt_config_named_shape(c->n_layer, c->n_embd, &named)) {
    c->n_head = named.n_head;
    return ST_OK;
  }
  return st_error(
      ST_ERR_INVALID_ARG,
      "%s: the number of attention heads is not recorded (no %s metadata) and "
      "n_layer %d, n_embd %d is not a named config's shape: it must be given (--n-head)",
      path, GPT_META_N_HEAD, c->n_layer, c->n_embd);
}

/* The model a file's names and shapes describe is allocated before its tensors are read one by
 * one: the tensors must hold at least its parameters, else a file of a few bytes (an empty
 * "h.47.x", a wide wte of one row) could describe gigabytes. */
static st_status check_holds_model(const safetensors_reader *r, const char *path,
                                   const gpt_config *c, const safetensors_entry *wte,
                                   const safetensors_entry *wpe) {
  if (wpe->shape[1] != wte->shape[1]) {
    return st_error(ST_ERR_FORMAT,
                    "%s: wpe.weight has %lld columns and wte.weight %lld: both are n_embd wide",
                    path, (long long)wpe->shape[1], (long long)wte->shape[1]);
  }
  uint64_t held = 0;
  for (size_t i = 0; i < safetensors_reader_count(r); i++) {
    const safetensors_entry *e = safetensors_reader_entry(r, i);
    if (!is_buffer(e->name)) held += e->numel;
  }
  const int64_t needed = gpt_config_trained_params(c);
  if (held < (uint64_t)needed) {
    return st_error(ST_ERR_FORMAT,
                    "%s: its tensors hold %llu values, fewer than the %lld parameters of the model "
                    "its names and shapes describe (n_layer %d, n_embd %d, vocab %d, %d "
                    "positions): tensors are missing",
                    path, (unsigned long long)held, (long long)needed, c->n_layer, c->n_embd,
                    c->vocab, c->max_seq);
  }
  return ST_OK;
}

st_status gpt_config_from_file(const char *path, int n_head, gpt_config *out) {
  safetensors_reader *r = NULL;
  ST_CHECK(safetensors_reader_open(&r, path));
  const safetensors_entry *wte = NULL, *wpe = NULL;
  gpt_config c = {0};
  st_status status;
  ST_CHECK_GOTO(config_tensor(r, path, "wte.weight", &wte), status, done);
  ST_CHECK_GOTO(config_tensor(r, path, "wpe.weight", &wpe), status, done);
  c = (gpt_config){.n_layer = count_layers(r),
                   .n_embd = (int)wte->shape[1],
                   .vocab = (int)wte->shape[0],
                   .max_seq = (int)wpe->shape[0]};
  if (c.n_layer == 0) {
    status = st_error(ST_ERR_FORMAT, "%s: no transformer blocks (tensors 'h.<l>.*')", path);
    goto done;
  }
  ST_CHECK_GOTO(config_heads(r, path, n_head, &c), status, done);
  status = gpt_config_finish(&c, 1);
  if (status != ST_OK) status = st_error(status, "%s: %s", path, st_last_error());
  if (status == ST_OK) status = check_holds_model(r, path, &c, wte, wpe);
done:
  safetensors_reader_close(r);
  if (status == ST_OK) *out = c;
  return status;
}

/* Every tensor of the file under `prefix` is one of the model's parameters: a file with more
 * (a model of more layers) would otherwise be loaded in part, silently. */
static st_status check_unused(const gpt_model *m, const safetensors_reader *r, const char *path,
                              const char *prefix) {
  const size_t plen = strlen(prefix);
  char name[UNIT_NAME_MAX + 64];
  for (size_t i = 0; i < safetensors_reader_count(r); i++) {
    const char *have = safetensors_reader_entry(r, i)->name;
    if (strncmp(have, prefix, plen) != 0 || is_buffer(have + plen)) continue;
    int used = 0;
    for (int u = 0; u < m->n_units && !used; u++) {
      for (int k = 0; k < m->units[u].layout.count && !used; k++) {
        hf_name(m, u, &m->units[u].layout.params[k], prefix, name, sizeof name);
        used = strcmp(name, have) == 0;
      }
    }
    if (!used) {
      return st_error(ST_ERR_INVALID_ARG,
                      "%s holds tensor '%s', which the model (n_layer %d) does not have: the file "
                      "holds another model",
                      path, have, m->cfg.n_layer);
    }
  }
  return ST_OK;
}

st_status gpt_import(gpt_model *m, const char *path, const char *prefix) {
  safetensors_reader *r = NULL;
  ST_CHECK(safetensors_reader_open(&r, path));
  int64_t most = gpt_largest_param(m);
  float *full = NULL, *slice = NULL;
  void *raw = NULL;
  st_status status;
  ST_CHECK_GOTO(
      mem_alloc((void **)&full, (size_t)most * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL),
      status, done);
  ST_CHECK_GOTO(mem_alloc(&raw, (size_t)most * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL),
                status, done);
  ST_CHECK_GOTO(gpt_param_scratch(m, &slice), status, done);
  ST_CHECK_GOTO(check_heads(r, path, m->cfg.n_head), status, done);
  ST_CHECK_GOTO(check_unused(m, r, path, prefix), status, done);
  for (int u = 0; u < m->n_units; u++) {
    for (int k = 0; k < m->units[u].layout.count; k++) {
      ST_CHECK_GOTO(import_param(m, u, k, r, path, prefix, full, raw, slice), status, done);
    }
  }
done:
  mem_free(slice);
  mem_free(raw);
  mem_free(full);
  safetensors_reader_close(r);
  return status;
}

/* Elements of a parameter's logical tensor. */
static int64_t logical_numel(const unit_param *p) {
  int64_t n = 1;
  for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
  return n;
}

/* The scratch of an export: one unit's full master weights on the device, the tp slices of one
 * parameter on the device (collectives take device memory) and their copy on the host, and the
 * whole model's tensors. */
typedef struct export_buffers {
  float *unit_master, *device_slices, *slices, *all;
  safetensors_tensor *tensors;
  char (*names)[UNIT_NAME_MAX + 16];
} export_buffers;

static void export_buffers_free(export_buffers *b) {
  mem_free(b->names);
  mem_free(b->tensors);
  mem_free(b->all);
  mem_free(b->slices);
  mem_free(b->device_slices);
  mem_free(b->unit_master);
}

/* Writes parameter p's logical tensor into `full` (host) from this tp rank's slice `local` (device
 * memory): the slice itself when the parameter is replicated or on one tp rank, else every tp
 * rank's slice gathered over the tp group into b->device_slices (tp x numel), read back and placed
 * by global index. Collective over the tp group for split parameters. */
static st_status assemble(gpt_model *m, const unit_param *p, const float *local, float *full,
                          export_buffers *b) {
  const size_t bytes = (size_t)p->numel * sizeof(float);
  if (m->tp_size == 1 || p->split == TP_REPLICATED) {
    ST_CHECK(stream_memcpy(&m->stream, full, local, bytes));
    return stream_sync(&m->stream);
  }
  ST_CHECK(comm_all_gather(m->tp, local, b->device_slices, (size_t)p->numel, ST_FP32, NULL));
  ST_CHECK(stream_memcpy(&m->stream, b->slices, b->device_slices, (size_t)m->tp_size * bytes));
  ST_CHECK(stream_sync(&m->stream));
  for (int t = 0; t < m->tp_size; t++) {
    for (int64_t e = 0; e < p->numel; e++) {
      full[unit_param_global_index(p, m->tp_size, t, e)] = b->slices[(int64_t)t * p->numel + e];
    }
  }
  return ST_OK;
}

static st_status export_buffers_alloc(const gpt_model *m, int count, int64_t total,
                                      export_buffers *b) {
  int64_t largest_unit = 0;
  for (int u = 0; u < m->n_units; u++) {
    if (m->units[u].layout.numel > largest_unit) largest_unit = m->units[u].layout.numel;
  }
  ST_CHECK(mem_alloc((void **)&b->unit_master, (size_t)largest_unit * sizeof(float), MEM_DEVICE,
                     MEM_WORKSPACE, m->dev));
  ST_CHECK(mem_alloc((void **)&b->device_slices, (size_t)gpt_largest_param(m) * sizeof(float),
                     MEM_DEVICE, MEM_WORKSPACE, m->dev));
  ST_CHECK(gpt_param_scratch(m, &b->slices));
  ST_CHECK(
      mem_alloc((void **)&b->all, (size_t)total * sizeof(float), MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc((void **)&b->tensors, (size_t)count * sizeof *b->tensors, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  return mem_alloc((void **)&b->names, (size_t)count * sizeof *b->names, MEM_HOST, MEM_WORKSPACE,
                   NULL);
}

/* Assembles unit u's parameters at `at` from its fp32 master weights, describing each tensor. */
static st_status export_unit(gpt_model *m, int u, export_buffers *b, float **at, int *i) {
  unit *un = &m->units[u];
  ST_CHECK(unit_gather_master(un, b->unit_master));
  for (int k = 0; k < un->layout.count; k++, (*i)++) {
    const unit_param *p = &un->layout.params[k];
    ST_CHECK(assemble(m, p, b->unit_master + p->offset, *at, b));
    hf_name(m, u, p, "", b->names[*i], sizeof b->names[*i]);
    b->tensors[*i] = (safetensors_tensor){
        .name = b->names[*i], .dtype = SAFETENSORS_F32, .ndim = p->ndim, .data = *at};
    memcpy(b->tensors[*i].shape, p->shape, sizeof p->shape);
    if (u == 0 && k == GPT_WTE) b->tensors[*i].shape[0] = m->cfg.vocab; /* no padding rows */
    *at += logical_numel(p);
  }
  return ST_OK;
}

/* The writing rank's file under ST_IO_TIMEOUT's deadline, extended as it is written: a file
 * system that hangs ends this rank (and so the job) with one line naming the file, instead of
 * holding it, and every rank waiting for its verdict, for ever. */
static st_status write_export(const char *path, const safetensors_tensor *tensors, size_t count,
                              const safetensors_metadata *meta, size_t meta_count) {
  char what[PATH_MAX + 32];
  snprintf(what, sizeof what, "writing %s", path);
  deadline d;
  ST_CHECK(job_file_deadline_arm(&d, what));
  job_file_test_delay();
  st_status status = safetensors_write_extending(path, tensors, count, meta, meta_count, &d);
  deadline_disarm(&d);
  return status;
}

st_status gpt_export(gpt_model *m, const char *path, int write_file) {
  int64_t total = 0;
  int count = 0;
  for (int u = 0; u < m->n_units; u++) {
    count += m->units[u].layout.count;
    for (int k = 0; k < m->units[u].layout.count; k++) {
      total += logical_numel(&m->units[u].layout.params[k]);
    }
  }
  export_buffers b = {0};
  st_status status;
  ST_CHECK_GOTO(export_buffers_alloc(m, count, total, &b), status, done);
  float *at = b.all;
  int i = 0;
  for (int u = 0; u < m->n_units; u++) ST_CHECK_GOTO(export_unit(m, u, &b, &at, &i), status, done);
  char n_head[16];
  snprintf(n_head, sizeof n_head, "%d", m->cfg.n_head);
  const safetensors_metadata meta[] = {{"format", "pt"}, {GPT_META_N_HEAD, n_head}};
  status = write_file ? write_export(path, b.tensors, (size_t)count, meta, 2) : ST_OK;
done:
  export_buffers_free(&b);
  return status;
}
