/* ckpt_manifest.c - the piece table of a mesh, and manifest.json through cJSON. Integers are
 * written as their decimal digits (cJSON would print a large one with 15 significant digits,
 * since it deems that "equal" within DBL_EPSILON) and read back as doubles: exact below 2^53,
 * which bounds offsets, sizes and token positions far beyond any real checkpoint. */
#include "engine/checkpoint/ckpt_manifest.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/io/file_io.h"
#include "engine/io/json_check.h"
#include "engine/model/gpt.h"

const char *ckpt_state_name(ckpt_state state) {
  static const char *names[CKPT_STATE_COUNT] = {"master", "adam_m", "adam_v"};
  return (unsigned)state < CKPT_STATE_COUNT ? names[state] : "invalid";
}

int ckpt_piece_range(const unit_layout *l, int k, int s, int64_t *begin, int64_t *end) {
  const unit_param *p = &l->params[k];
  if (p->split == TP_REPLICATED && l->t > 0) return 0;
  const int64_t lo = (int64_t)s * l->shard_numel, hi = lo + l->shard_numel;
  const int64_t from = p->offset > lo ? p->offset : lo;
  const int64_t to = p->offset + p->numel < hi ? p->offset + p->numel : hi;
  if (from >= to) return 0;
  *begin = from - p->offset;
  *end = to - p->offset;
  return 1;
}

/* Counts (m->pieces NULL) or records the pieces of unit `index` (and its parameters, when
 * m->params is set) in the order the readers' binary search needs: by parameter, then tp
 * rank, then shard. Every tp rank's slices have the sizes of tp rank 0's, so the same offsets:
 * tp rank 0's layout serves them all, and the shards a parameter spans are found by division
 * (a large shard group's shards mostly hold other parameters). Counting stops once the pieces
 * exceed `most_pieces`. */
static st_status plan_unit(ckpt_manifest *m, int index, int64_t most_pieces, int64_t *n_params,
                           int64_t *n_pieces) {
  unit_layout l;
  ST_CHECK(unit_layout_init(&l, m->S, m->T, 0));
  st_status status = gpt_declare_unit(&m->cfg, index, &l);
  char prefix[16];
  gpt_unit_prefix(&m->cfg, index, prefix, sizeof prefix);
  for (int k = 0; status == ST_OK && k < l.count && *n_pieces <= most_pieces; k++) {
    const unit_param *p = &l.params[k];
    const int param = (int)(*n_params + k);
    if (m->params) {
      ckpt_param *c = &m->params[param];
      snprintf(c->name, sizeof c->name, "%s%s", prefix, p->name);
      c->ndim = p->ndim;
      memcpy(c->shape, p->shape, sizeof c->shape);
      c->split = p->split;
      c->blocks = p->blocks;
    }
    const int64_t first = p->offset / l.shard_numel,
                  last = (p->offset + p->numel - 1) / l.shard_numel;
    const int holders = p->split == TP_REPLICATED ? 1 : m->T; /* tp rank 0 saves a replica */
    for (int t = 0; t < holders; t++) {
      if (!m->pieces) {
        *n_pieces += last - first + 1;
        continue;
      }
      for (int64_t s = first; s <= last; s++) {
        int64_t begin = 0, end = 0;
        ckpt_piece_range(&l, k, (int)s, &begin, &end); /* not empty: s is one it spans */
        m->pieces[(*n_pieces)++] = (ckpt_piece){param, (int)s * m->T + t, t, begin, end};
      }
    }
  }
  if (status == ST_OK) *n_params += l.count;
  unit_layout_free(&l);
  return status;
}

/* Walks every unit in model order, so the pieces come out sorted by (param, t, begin); a count
 * stops once the params or pieces exceed `most_params` or `most_pieces`, so that its time is
 * bounded by what a manifest lists (check_plan). */
static st_status plan_walk(ckpt_manifest *m, int64_t most_params, int64_t most_pieces,
                           int64_t *n_params, int64_t *n_pieces) {
  *n_params = *n_pieces = 0;
  for (int u = 0; u < m->cfg.n_layer + 2 && *n_params <= most_params && *n_pieces <= most_pieces;
       u++) {
    ST_CHECK(plan_unit(m, u, most_pieces, n_params, n_pieces));
  }
  return ST_OK;
}

st_status ckpt_mesh_check(const gpt_config *cfg, int R, int S, int T, int zero) {
  const int64_t world = (int64_t)R * S * T, files = (int64_t)S * T;
  if (R < 1 || S < 1 || T < 1 || zero < 0 || zero > 3) {
    return st_error(ST_ERR_INVALID_ARG,
                    "mesh %dx%dx%d at ZeRO-%d: extents must be >= 1, stage 0..3", R, S, T, zero);
  }
  if (world > CKPT_MAX_WORLD || files > CKPT_MAX_FILES) {
    return st_error(
        ST_ERR_INVALID_ARG,
        "mesh %dx%dx%d: %lld ranks and %lld files; a checkpoint holds at most %d and %d", R, S, T,
        (long long)world, (long long)files, CKPT_MAX_WORLD, CKPT_MAX_FILES);
  }
  gpt_config split = *cfg;
  if (gpt_config_finish(&split, T) != ST_OK) {
    return st_error(ST_ERR_INVALID_ARG, "mesh %dx%dx%d: %s", R, S, T, st_last_error());
  }
  return ST_OK;
}

/* Allocates the tables for the n_params and n_pieces a count gave and records the plan. */
static st_status plan_record(ckpt_manifest *m, int64_t n_params, int64_t n_pieces) {
  m->n_files = m->S * m->T;
  ST_CHECK(mem_alloc_zeroed((void **)&m->params, (size_t)n_params * sizeof *m->params, MEM_HOST,
                            MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc_zeroed((void **)&m->pieces,
                            (size_t)(n_pieces ? n_pieces : 1) * sizeof *m->pieces, MEM_HOST,
                            MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc_zeroed((void **)&m->files, (size_t)m->n_files * sizeof *m->files, MEM_HOST,
                            MEM_WORKSPACE, NULL));
  ST_CHECK(plan_walk(m, INT_MAX, INT_MAX, &n_params, &n_pieces));
  m->n_params = (int)n_params;
  m->n_pieces = (int)n_pieces;
  for (int f = 0; f < m->n_files; f++) {
    snprintf(m->files[f].name, sizeof m->files[f].name, "rank_%05d.safetensors", f);
  }
  return ST_OK;
}

st_status ckpt_manifest_plan(ckpt_manifest *m) {
  int64_t n_params, n_pieces;
  ST_CHECK(plan_walk(m, INT_MAX, INT_MAX, &n_params, &n_pieces));
  if (n_params > INT_MAX || n_pieces > INT_MAX) {
    return st_error(ST_ERR_INVALID_ARG, "mesh %dx%dx%d: the checkpoint would hold over %d pieces",
                    m->R, m->S, m->T, INT_MAX);
  }
  return plan_record(m, n_params, n_pieces);
}

st_status ckpt_manifest_set_data(ckpt_manifest *m, int dp_size, token_position position) {
  mem_free(m->data);
  m->data = NULL;
  ST_CHECK(mem_alloc((void **)&m->data, (size_t)dp_size * sizeof *m->data, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  m->dp_size = dp_size;
  for (int d = 0; d < dp_size; d++) m->data[d] = position;
  return ST_OK;
}

void ckpt_manifest_free(ckpt_manifest *m) {
  mem_free(m->pieces);
  mem_free(m->files);
  mem_free(m->params);
  mem_free(m->data);
  m->pieces = NULL;
  m->files = NULL;
  m->params = NULL;
  m->data = NULL;
}

int ckpt_manifest_find(const ckpt_manifest *m, const char *name) {
  for (int i = 0; i < m->n_params; i++) {
    if (strcmp(m->params[i].name, name) == 0) return i;
  }
  return -1;
}

static void shape_json(char *out, size_t size, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(out, size, "[");
  for (int d = 0; d < ndim && at < size; d++) {
    at += (size_t)snprintf(out + at, size - at, "%s%lld", d ? "," : "", (long long)shape[d]);
  }
  if (at < size) snprintf(out + at, size - at, "]");
}

void ckpt_piece_describe(const ckpt_manifest *m, const ckpt_piece *piece, char *out, size_t size) {
  const ckpt_param *p = &m->params[piece->param];
  char shape[128];
  shape_json(shape, sizeof shape, p->ndim, p->shape);
  snprintf(out, size,
           "{\"shape\":%s,\"split\":\"%s\",\"blocks\":%d,\"tp\":%d,\"tp_rank\":%d,"
           "\"begin\":%lld,\"end\":%lld}",
           shape, tp_split_name(p->split), p->blocks, m->T, piece->t, (long long)piece->begin,
           (long long)piece->end);
}

void ckpt_file_layout_free(ckpt_file_layout *l) {
  mem_free(l->values);
  mem_free(l->names);
  mem_free(l->meta);
  mem_free(l->tensors);
  mem_free(l->pieces);
  *l = (ckpt_file_layout){0};
}

static st_status file_layout_alloc(ckpt_file_layout *l, size_t n) {
  ST_CHECK(mem_alloc((void **)&l->pieces, n * sizeof *l->pieces, MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(
      mem_alloc((void **)&l->tensors, 3 * n * sizeof *l->tensors, MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc((void **)&l->meta, (n + 1) * sizeof *l->meta, MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc((void **)&l->names, 3 * n * sizeof *l->names, MEM_HOST, MEM_WORKSPACE, NULL));
  return mem_alloc((void **)&l->values, n * sizeof *l->values, MEM_HOST, MEM_WORKSPACE, NULL);
}

st_status ckpt_file_layout_make(const ckpt_manifest *m, int f, ckpt_file_layout *out) {
  *out = (ckpt_file_layout){0};
  int count = 0;
  for (int i = 0; i < m->n_pieces; i++) count += m->pieces[i].file == f;
  st_status status = file_layout_alloc(out, (size_t)(count ? count : 1));
  if (status != ST_OK) {
    ckpt_file_layout_free(out);
    return status;
  }
  for (int i = 0; i < m->n_pieces; i++) {
    const ckpt_piece *piece = &m->pieces[i];
    if (piece->file != f) continue;
    const int n = out->n++;
    const char *name = m->params[piece->param].name;
    out->pieces[n] = piece;
    ckpt_piece_describe(m, piece, out->values[n], sizeof out->values[n]);
    out->meta[n] = (safetensors_metadata){name, out->values[n]};
    for (int st = 0; st < CKPT_STATE_COUNT; st++) {
      char *tensor = out->names[3 * n + st];
      snprintf(tensor, sizeof out->names[0], "%s/%s", ckpt_state_name((ckpt_state)st), name);
      out->tensors[3 * n + st] = (safetensors_tensor){.name = tensor,
                                                      .dtype = SAFETENSORS_F32,
                                                      .ndim = 1,
                                                      .shape = {piece->end - piece->begin}};
    }
  }
  out->meta[out->n] = (safetensors_metadata){"format", "shardtrain-checkpoint-pieces"};
  return ST_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

static cJSON *exact_integer(int64_t value) {
  char text[24];
  snprintf(text, sizeof text, "%lld", (long long)value);
  return cJSON_CreateRaw(text);
}

static cJSON *int_array(const int64_t *values, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, exact_integer(values[i]));
  return a;
}

static cJSON *run_json(const ckpt_manifest *m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "micro_batch", m->micro_batch);
  cJSON_AddNumberToObject(o, "grad_accum", m->h.grad_accum);
  cJSON_AddItemToObject(o, "global_tokens", exact_integer(m->h.global_tokens));
  cJSON_AddStringToObject(o, "lr_schedule", lr_shape_name(m->h.schedule.shape));
  if (m->h.schedule.shape == LR_WSD) {
    cJSON_AddNumberToObject(o, "decay_steps", m->h.schedule.decay_steps);
  }
  cJSON_AddNumberToObject(o, "lr", m->h.schedule.lr);
  cJSON_AddNumberToObject(o, "min_lr", m->h.schedule.min_lr);
  cJSON_AddNumberToObject(o, "warmup", m->h.schedule.warmup);
  cJSON_AddNumberToObject(o, "total_steps", m->h.schedule.total_steps);
  cJSON_AddNumberToObject(o, "beta1", m->h.adam.beta1);
  cJSON_AddNumberToObject(o, "beta2", m->h.adam.beta2);
  cJSON_AddNumberToObject(o, "eps", m->h.adam.eps);
  cJSON_AddNumberToObject(o, "weight_decay", m->h.weight_decay);
  cJSON_AddNumberToObject(o, "clip", m->h.clip);
  return o;
}

static cJSON *manifest_json(const ckpt_manifest *m) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "shardtrain-checkpoint");
  cJSON_AddNumberToObject(root, "version", CKPT_FORMAT_VERSION);
  cJSON_AddItemToObject(root, "step", exact_integer(m->step));
  cJSON_AddItemToObject(root, "tokens", exact_integer(m->tokens));
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "name", m->model);
  cJSON_AddNumberToObject(model, "n_layer", m->cfg.n_layer);
  cJSON_AddNumberToObject(model, "n_head", m->cfg.n_head);
  cJSON_AddNumberToObject(model, "n_embd", m->cfg.n_embd);
  cJSON_AddNumberToObject(model, "vocab", m->cfg.vocab);
  cJSON_AddNumberToObject(model, "max_seq", m->cfg.max_seq);
  const int64_t mesh[3] = {m->R, m->S, m->T};
  cJSON_AddItemToObject(root, "mesh", int_array(mesh, 3));
  cJSON_AddNumberToObject(root, "zero", m->zero);
  cJSON *dtypes = cJSON_AddObjectToObject(root, "dtypes");
  cJSON_AddStringToObject(dtypes, "param", dtype_name(m->param_dtype));
  cJSON_AddStringToObject(dtypes, "reduce", dtype_name(m->reduce_dtype));
  cJSON_AddNumberToObject(root, "loss_scale", m->scaler.scale);
  cJSON_AddItemToObject(root, "loss_scale_clean_steps", exact_integer(m->scaler.clean_steps));
  cJSON_AddItemToObject(root, "skipped_steps", exact_integer(m->scaler.skipped));
  cJSON_AddItemToObject(root, "optimizer", run_json(m));
  cJSON *rng = cJSON_AddObjectToObject(root, "rng");
  cJSON_AddItemToObject(rng, "init_seed", exact_integer((int64_t)m->seed));
  cJSON *data = cJSON_AddArrayToObject(root, "data");
  for (int d = 0; d < m->dp_size; d++) {
    const int64_t at[2] = {(int64_t)m->data[d].shard, (int64_t)m->data[d].offset};
    cJSON_AddItemToArray(data, int_array(at, 2));
  }
  cJSON *params = cJSON_AddArrayToObject(root, "params");
  for (int i = 0; i < m->n_params; i++) {
    const ckpt_param *p = &m->params[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddItemToObject(o, "shape", int_array(p->shape, p->ndim));
    cJSON_AddStringToObject(o, "split", tp_split_name(p->split));
    cJSON_AddNumberToObject(o, "blocks", p->blocks);
    cJSON_AddItemToArray(params, o);
  }
  cJSON *files = cJSON_AddArrayToObject(root, "files");
  for (int f = 0; f < m->n_files; f++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->files[f].name);
    cJSON_AddItemToObject(o, "bytes", exact_integer((int64_t)m->files[f].bytes));
    cJSON_AddStringToObject(o, "sha256", m->files[f].sha256);
    cJSON_AddItemToArray(files, o);
  }
  cJSON *pieces = cJSON_AddArrayToObject(root, "pieces");
  for (int i = 0; i < m->n_pieces; i++) {
    const ckpt_piece *p = &m->pieces[i];
    const int64_t row[5] = {p->param, p->file, p->t, p->begin, p->end};
    cJSON_AddItemToArray(pieces, int_array(row, 5));
  }
  return root;
}

st_status ckpt_manifest_write(const ckpt_manifest *m, const char *path) {
  cJSON *root = manifest_json(m);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return st_error(ST_ERR_OOM, "%s: out of memory printing the manifest", path);
  atomic_file file;
  st_status status = atomic_file_create(&file, path);
  if (status == ST_OK) {
    status = atomic_file_write(&file, text, strlen(text));
    if (status == ST_OK) status = atomic_file_write(&file, "\n", 1);
    status = atomic_file_finish(&file, status);
  }
  cJSON_free(text);
  return status;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Reading context: the file's name for messages. */
typedef struct reader {
  const char *path;
} reader;

static st_status field(const reader *r, const cJSON *o, const char *key, const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!*out) return st_error(ST_ERR_FORMAT, "%s: field '%s' is missing", r->path, key);
  return ST_OK;
}

static st_status number(const reader *r, const cJSON *o, const char *key, double lo, double hi,
                        double *out) {
  const cJSON *v;
  ST_CHECK(field(r, o, key, &v));
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi) {
    return st_error(ST_ERR_FORMAT, "%s: field '%s' is not a number in [%g, %g]", r->path, key, lo,
                    hi);
  }
  *out = v->valuedouble;
  return ST_OK;
}

static st_status integer(const reader *r, const cJSON *o, const char *key, double lo, double hi,
                         int64_t *out) {
  double v = 0;
  ST_CHECK(number(r, o, key, lo, hi, &v));
  if (v != (double)(int64_t)v) {
    return st_error(ST_ERR_FORMAT, "%s: field '%s' is not a whole number", r->path, key);
  }
  *out = (int64_t)v;
  return ST_OK;
}

static st_status int_field(const reader *r, const cJSON *o, const char *key, int lo, int *out) {
  int64_t v = 0;
  ST_CHECK(integer(r, o, key, lo, 2147483647.0, &v));
  *out = (int)v;
  return ST_OK;
}

static st_status string(const reader *r, const cJSON *o, const char *key, char *out, size_t size) {
  const cJSON *v;
  ST_CHECK(field(r, o, key, &v));
  if (!cJSON_IsString(v) || strlen(v->valuestring) >= size) {
    return st_error(ST_ERR_FORMAT, "%s: field '%s' is not a string of fewer than %zu characters",
                    r->path, key, size);
  }
  strcpy(out, v->valuestring);
  return ST_OK;
}

/* An array of exactly n numbers in [lo, hi] (n < 0: any length up to -n, *count set). */
static st_status int_list(const reader *r, const cJSON *a, const char *what, int n, double lo,
                          double hi, int64_t *out, int *count) {
  const int size = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
  if (size < 0 || (n >= 0 && size != n) || (n < 0 && (size < 1 || size > -n))) {
    return st_error(ST_ERR_FORMAT, "%s: %s is not an array of %d numbers", r->path, what,
                    n >= 0 ? n : -n);
  }
  const cJSON *v = a->child;
  for (int i = 0; i < size; i++, v = v->next) {
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
        v->valuedouble != (double)(int64_t)v->valuedouble) {
      return st_error(ST_ERR_FORMAT, "%s: %s holds a value that is not a whole number in [%g, %g]",
                      r->path, what, lo, hi);
    }
    out[i] = (int64_t)v->valuedouble;
  }
  if (count) *count = size;
  return ST_OK;
}

static const double most = 9007199254740992.0; /* 2^53 */

/* A whole number in [0, 2^53] that may be absent (then 0). */
static st_status optional_integer(const reader *r, const cJSON *o, const char *key, int64_t *out) {
  *out = 0;
  if (!cJSON_GetObjectItemCaseSensitive(o, key)) return ST_OK;
  return integer(r, o, key, 0, most, out);
}

static st_status read_model(const reader *r, const cJSON *root, ckpt_manifest *m) {
  const cJSON *model;
  ST_CHECK(field(r, root, "model", &model));
  ST_CHECK(string(r, model, "name", m->model, sizeof m->model));
  ST_CHECK(int_field(r, model, "n_layer", 1, &m->cfg.n_layer));
  ST_CHECK(int_field(r, model, "n_head", 1, &m->cfg.n_head));
  ST_CHECK(int_field(r, model, "n_embd", 1, &m->cfg.n_embd));
  ST_CHECK(int_field(r, model, "vocab", 1, &m->cfg.vocab));
  ST_CHECK(int_field(r, model, "max_seq", 1, &m->cfg.max_seq));
  const cJSON *mesh;
  int64_t rst[3];
  ST_CHECK(field(r, root, "mesh", &mesh));
  ST_CHECK(int_list(r, mesh, "'mesh'", 3, 1, CKPT_MAX_WORLD, rst, NULL));
  m->R = (int)rst[0];
  m->S = (int)rst[1];
  m->T = (int)rst[2];
  ST_CHECK(int_field(r, root, "zero", 0, &m->zero));
  if (m->zero > 3) return st_error(ST_ERR_FORMAT, "%s: 'zero' %d is not 0..3", r->path, m->zero);
  st_status status = ckpt_mesh_check(&m->cfg, m->R, m->S, m->T, m->zero);
  if (status == ST_OK) status = gpt_config_finish(&m->cfg, m->T);
  if (status != ST_OK) return st_error(ST_ERR_FORMAT, "%s: %s", r->path, st_last_error());
  const cJSON *dtypes;
  char param[16], reduce[16];
  ST_CHECK(field(r, root, "dtypes", &dtypes));
  ST_CHECK(string(r, dtypes, "param", param, sizeof param));
  ST_CHECK(string(r, dtypes, "reduce", reduce, sizeof reduce));
  const int p = dtype_parse(param), g = dtype_parse(reduce);
  if (p < 0 || g < 0)
    return st_error(ST_ERR_FORMAT, "%s: unknown dtypes %s, %s", r->path, param, reduce);
  m->param_dtype = (st_dtype)p;
  m->reduce_dtype = (st_dtype)g;
  ST_CHECK(number(r, root, "loss_scale", 1e-38, 1e38, &m->scaler.scale)); /* > 0 */
  /* The loss scaler's counters came with fp16: a manifest without them had no loss scaling. */
  ST_CHECK(optional_integer(r, root, "loss_scale_clean_steps", &m->scaler.clean_steps));
  ST_CHECK(optional_integer(r, root, "skipped_steps", &m->scaler.skipped));
  /* Every skipped step is one of the steps taken: AdamW's step count, the steps less those
   * skipped, goes on from here ("step" is read before). */
  if (m->scaler.skipped > m->step) {
    return st_error(ST_ERR_FORMAT, "%s: 'skipped_steps' %lld is more than the %lld steps taken",
                    r->path, (long long)m->scaler.skipped, (long long)m->step);
  }
  return ST_OK;
}

static st_status read_run(const reader *r, const cJSON *root, ckpt_manifest *m) {
  const cJSON *o, *rng;
  ST_CHECK(field(r, root, "optimizer", &o));
  char shape[16];
  double lr, min_lr, beta1, beta2, eps, wd, clip;
  int64_t tokens;
  ST_CHECK(int_field(r, o, "micro_batch", 1, &m->micro_batch));
  ST_CHECK(int_field(r, o, "grad_accum", 1, &m->h.grad_accum));
  ST_CHECK(integer(r, o, "global_tokens", 1, most, &tokens));
  ST_CHECK(string(r, o, "lr_schedule", shape, sizeof shape));
  ST_CHECK(number(r, o, "lr", 0, TRAIN_MAX_LR, &lr));
  ST_CHECK(number(r, o, "min_lr", 0, TRAIN_MAX_LR, &min_lr));
  ST_CHECK(int_field(r, o, "warmup", 0, &m->h.schedule.warmup));
  ST_CHECK(int_field(r, o, "total_steps", 1, &m->h.schedule.total_steps));
  ST_CHECK(number(r, o, "beta1", 0, 1, &beta1));
  ST_CHECK(number(r, o, "beta2", 0, 1, &beta2));
  ST_CHECK(number(r, o, "eps", 0, TRAIN_MAX_EPS, &eps));
  ST_CHECK(number(r, o, "weight_decay", 0, TRAIN_MAX_WEIGHT_DECAY, &wd));
  ST_CHECK(number(r, o, "clip", 0, TRAIN_MAX_CLIP, &clip));
  const int parsed = lr_shape_parse(shape);
  if (parsed < 0) return st_error(ST_ERR_FORMAT, "%s: unknown lr_schedule '%s'", r->path, shape);
  m->h.schedule.shape = (lr_shape)parsed;
  m->h.schedule.decay_steps = 0;
  if (parsed == LR_WSD) {
    ST_CHECK(int_field(r, o, "decay_steps", 1, &m->h.schedule.decay_steps));
  } else if (cJSON_GetObjectItemCaseSensitive(o, "decay_steps")) {
    return st_error(ST_ERR_FORMAT, "%s: decay_steps is for lr_schedule wsd, not %s", r->path,
                    shape);
  }
  m->h.schedule.lr = lr;
  m->h.schedule.min_lr = min_lr;
  if (lr_schedule_check(&m->h.schedule) != ST_OK) { /* as train's flags are checked */
    return st_error(ST_ERR_FORMAT, "%s: optimizer: %s", r->path, st_last_error());
  }
  m->h.global_tokens = tokens;
  m->h.adam = (adamw_hparams){(float)beta1, (float)beta2, (float)eps};
  m->h.weight_decay = (float)wd;
  m->h.clip = (float)clip;
  int64_t seed;
  ST_CHECK(field(r, root, "rng", &rng));
  ST_CHECK(integer(r, rng, "init_seed", 0, most, &seed));
  m->seed = (uint64_t)seed;
  const cJSON *data;
  ST_CHECK(field(r, root, "data", &data));
  const int dp = cJSON_IsArray(data) ? cJSON_GetArraySize(data) : 0;
  if (dp != m->R * m->S) { /* a position per dp rank of the mesh */
    return st_error(ST_ERR_FORMAT, "%s: 'data' is not an array of %d positions (one per dp rank)",
                    r->path, m->R * m->S);
  }
  ST_CHECK(ckpt_manifest_set_data(m, dp, (token_position){0, 0}));
  /* Lists are walked, not indexed: cJSON_GetArrayItem walks from the first item each time. */
  const cJSON *position = data->child;
  for (int d = 0; d < dp; d++, position = position->next) {
    int64_t at[2];
    ST_CHECK(int_list(r, position, "a 'data' position", 2, 0, most, at, NULL));
    m->data[d] = (token_position){(uint64_t)at[0], (uint64_t)at[1]};
  }
  return ST_OK;
}

/* A count plan_walk made up to the lists' lengths: past its list it stopped there ("more
 * than"); below it, where the walk stopped for the other list, it is a lower bound. */
static void count_text(char *out, size_t size, int64_t counted, int listed, int stopped) {
  if (counted > listed) {
    snprintf(out, size, "more than %d", listed);
  } else {
    snprintf(out, size, "%s%lld", stopped ? "at least " : "", (long long)counted);
  }
}

static st_status array_field(const reader *r, const cJSON *root, const char *name,
                             const cJSON **out) {
  ST_CHECK(field(r, root, name, out));
  if (!cJSON_IsArray(*out))
    return st_error(ST_ERR_FORMAT, "%s: '%s' is not an array", r->path, name);
  return ST_OK;
}

/* The params, files and pieces must be those the mesh's plan gives: a manifest that disagrees
 * was edited or damaged, and its pieces cannot be trusted. Their numbers are compared first,
 * counting the plan only as far as the lists go: a model and mesh of a few bytes (a thousand
 * layers on 131072 shards) would otherwise take minutes and gigabytes to plan. */
static st_status check_plan(const reader *r, const cJSON *root, ckpt_manifest *m) {
  const cJSON *params, *files, *pieces;
  ST_CHECK(array_field(r, root, "params", &params));
  ST_CHECK(array_field(r, root, "files", &files));
  ST_CHECK(array_field(r, root, "pieces", &pieces));
  const int listed_params = cJSON_GetArraySize(params), listed_files = cJSON_GetArraySize(files),
            listed_pieces = cJSON_GetArraySize(pieces);
  if (listed_files != m->S * m->T) { /* S x T entries of ~100 bytes: the file bounds the mesh */
    return st_error(ST_ERR_FORMAT, "%s: %d files listed; mesh %dx%dx%d writes %d", r->path,
                    listed_files, m->R, m->S, m->T, m->S * m->T);
  }
  int64_t n_params = 0, n_pieces = 0;
  if (plan_walk(m, listed_params, listed_pieces, &n_params, &n_pieces) != ST_OK) {
    return st_error(ST_ERR_FORMAT, "%s: %s", r->path, st_last_error()); /* a damaged model */
  }
  if (n_params != listed_params || n_pieces != listed_pieces) {
    char params_text[32], pieces_text[32]; /* a count stopped past the list says "more than" */
    const int stopped = n_params > listed_params || n_pieces > listed_pieces;
    count_text(params_text, sizeof params_text, n_params, listed_params, stopped);
    count_text(pieces_text, sizeof pieces_text, n_pieces, listed_pieces, stopped);
    return st_error(ST_ERR_FORMAT,
                    "%s: %d params and %d pieces listed; model and mesh give %s and %s", r->path,
                    listed_params, listed_pieces, params_text, pieces_text);
  }
  /* Counted already, to the lists' exact lengths */
  if (plan_record(m, n_params, n_pieces) != ST_OK) {
    return st_error(ST_ERR_FORMAT, "%s: %s", r->path, st_last_error());
  }
  const cJSON *param = params->child, *piece = pieces->child, *file = files->child;
  for (int i = 0; i < m->n_params; i++, param = param->next) {
    char name[CKPT_NAME_MAX];
    ST_CHECK(string(r, param, "name", name, sizeof name));
    if (strcmp(name, m->params[i].name) != 0) {
      return st_error(ST_ERR_FORMAT, "%s: parameter %d is '%s', the model's is '%s'", r->path, i,
                      name, m->params[i].name);
    }
  }
  for (int i = 0; i < m->n_pieces; i++, piece = piece->next) {
    int64_t row[5];
    const ckpt_piece *p = &m->pieces[i];
    ST_CHECK(int_list(r, piece, "a piece", 5, 0, most, row, NULL));
    if (row[0] != p->param || row[1] != p->file || row[2] != p->t || row[3] != p->begin ||
        row[4] != p->end) {
      return st_error(ST_ERR_FORMAT, "%s: piece %d does not match the mesh's layout", r->path, i);
    }
  }
  for (int f = 0; f < m->n_files; f++, file = file->next) {
    const cJSON *o = file;
    char name[sizeof m->files[f].name];
    int64_t bytes;
    ST_CHECK(string(r, o, "name", name, sizeof name));
    ST_CHECK(string(r, o, "sha256", m->files[f].sha256, sizeof m->files[f].sha256));
    ST_CHECK(integer(r, o, "bytes", 0, most, &bytes));
    if (strcmp(name, m->files[f].name) != 0) {
      return st_error(ST_ERR_FORMAT, "%s: file %d is '%s', expected '%s'", r->path, f, name,
                      m->files[f].name);
    }
    m->files[f].bytes = (uint64_t)bytes;
  }
  return ST_OK;
}

static st_status read_text(const char *path, char **out, size_t *bytes) {
  int fd;
  uint64_t size;
  ST_CHECK(file_open_read(path, &fd, &size));
  st_status status = size > ((uint64_t)1 << 30)
                         ? st_error(ST_ERR_FORMAT, "%s: %llu bytes is too large for a manifest",
                                    path, (unsigned long long)size)
                         : mem_alloc((void **)out, (size_t)size + 1, MEM_HOST, MEM_WORKSPACE, NULL);
  if (status == ST_OK) {
    status = file_read_at(fd, path, *out, (size_t)size, 0);
    (*out)[size] = '\0';
    *bytes = (size_t)size;
    if (status != ST_OK) {
      mem_free(*out);
      *out = NULL;
    }
  }
  close(fd);
  return status;
}

/* The tokens trained on; a checkpoint written before they were counted took every step at its
 * own global batch, as far as it can tell. */
static st_status read_tokens(const reader *r, const cJSON *root, ckpt_manifest *m) {
  if (cJSON_GetObjectItemCaseSensitive(root, "tokens")) {
    return integer(r, root, "tokens", 0, most, &m->tokens);
  }
  const double tokens = (double)m->step * (double)m->h.global_tokens;
  m->tokens = tokens < most ? m->step * m->h.global_tokens : (int64_t)most;
  return ST_OK;
}

st_status ckpt_manifest_read(ckpt_manifest *m, const char *path) {
  memset(m, 0, sizeof *m);
  char *text = NULL;
  size_t bytes = 0;
  ST_CHECK(read_text(path, &text, &bytes));
  cJSON *root = NULL;
  st_status status = json_read_object(text, bytes, path, "manifest", &root);
  mem_free(text);
  const reader r = {path};
  const char *twice = NULL;
  if (status == ST_OK) status = json_find_duplicate_key(root, &twice);
  if (status == ST_OK && twice) {
    status = st_error(ST_ERR_FORMAT, "%s: the key \"%s\" appears twice in one object", path, twice);
  }
  const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
  int64_t version = 0;
  if (status == ST_OK &&
      (!cJSON_IsString(format) || strcmp(format->valuestring, "shardtrain-checkpoint"))) {
    status = st_error(ST_ERR_FORMAT, "%s: not a shardtrain checkpoint manifest", path);
  }
  if (status == ST_OK) status = integer(&r, root, "version", 0, most, &version);
  if (status == ST_OK && version != CKPT_FORMAT_VERSION) {
    status = st_error(ST_ERR_FORMAT, "%s: format version %lld; this build reads %d", path,
                      (long long)version, CKPT_FORMAT_VERSION);
  }
  if (status == ST_OK) status = integer(&r, root, "step", 0, most, &m->step);
  if (status == ST_OK) status = read_model(&r, root, m);
  if (status == ST_OK) status = read_run(&r, root, m);
  if (status == ST_OK) status = check_plan(&r, root, m);
  if (status == ST_OK) status = read_tokens(&r, root, m);
  cJSON_Delete(root);
  if (status != ST_OK) ckpt_manifest_free(m);
  return status;
}
