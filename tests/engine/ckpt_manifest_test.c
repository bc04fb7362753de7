/* ckpt_manifest_test.c - the piece table and manifest.json of a checkpoint (ckpt_manifest.h).
 *
 * Plan: for the tiny GPT on (S, T) = (1,1), (2,1), (3,2), (2,4), the parameters are the
 * model's in Hugging Face order with their shapes and splits, and the pieces equal a table
 * built here from DESIGN.md's layout rules alone (slices laid end to end at multiples of 16,
 * the unit padded to S x 16, shard s owning [s P / S, (s + 1) P / S), replicated tensors held
 * by tp rank 0 only). Independently of that table: the pieces are sorted by (param, t, begin),
 * and for each (param, t) they tile the TP slice exactly once, each inside one shard and in
 * file s * T + t.
 *
 * Files: writing then reading gives back every field; a manifest edited or damaged (a piece
 * changed, a field missing, a wrong version or format, a file name or count changed, not
 * JSON, a loss scaler counter that is not a whole number >= 0) is refused with ST_ERR_FORMAT
 * and a message naming the file and the problem, and leaves nothing allocated; a manifest
 * from before fp16, without the scaler's counters, reads them as 0; one from before the tokens
 * trained on were counted reads them as step x global batch. */
#include "engine/checkpoint/ckpt_manifest.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

/* ---- the expected parameter table, written out from the GPT-2 layout ---------------------- */

typedef struct expected_param {
  char name[CKPT_NAME_MAX];
  int unit, ndim;
  int64_t shape[2];
  tp_split split;
  int blocks;
} expected_param;

static int expected_params(const gpt_config *c, expected_param *out) {
  const int64_t C = c->n_embd;
  int n = 0;
  out[n++] = (expected_param){"wte.weight", 0, 2, {c->vocab_padded, C}, TP_REPLICATED, 1};
  out[n++] = (expected_param){"wpe.weight", 0, 2, {c->max_seq, C}, TP_REPLICATED, 1};
  static const struct {
    const char *name;
    int ndim;
    int64_t rows, cols; /* in units of C */
    tp_split split;
    int blocks;
  } block[12] = {
      {"ln_1.weight", 1, 1, 0, TP_REPLICATED, 1},
      {"ln_1.bias", 1, 1, 0, TP_REPLICATED, 1},
      {"attn.c_attn.weight", 2, 1, 3, TP_COLUMN, 3},
      {"attn.c_attn.bias", 1, 3, 0, TP_COLUMN, 3},
      {"attn.c_proj.weight", 2, 1, 1, TP_ROW, 1},
      {"attn.c_proj.bias", 1, 1, 0, TP_REPLICATED, 1},
      {"ln_2.weight", 1, 1, 0, TP_REPLICATED, 1},
      {"ln_2.bias", 1, 1, 0, TP_REPLICATED, 1},
      {"mlp.c_fc.weight", 2, 1, 4, TP_COLUMN, 1},
      {"mlp.c_fc.bias", 1, 4, 0, TP_COLUMN, 1},
      {"mlp.c_proj.weight", 2, 4, 1, TP_ROW, 1},
      {"mlp.c_proj.bias", 1, 1, 0, TP_REPLICATED, 1},
  };
  for (int layer = 0; layer < c->n_layer; layer++) {
    for (int k = 0; k < 12; k++) {
      expected_param *p = &out[n++];
      *p = (expected_param){.unit = 1 + layer,
                            .ndim = block[k].ndim,
                            .shape = {block[k].rows * C, block[k].cols * C},
                            .split = block[k].split,
                            .blocks = block[k].blocks};
      snprintf(p->name, sizeof p->name, "h.%d.%s", layer, block[k].name);
    }
  }
  out[n++] = (expected_param){"ln_f.weight", c->n_layer + 1, 1, {C, 0}, TP_REPLICATED, 1};
  out[n++] = (expected_param){"ln_f.bias", c->n_layer + 1, 1, {C, 0}, TP_REPLICATED, 1};
  return n;
}

static int64_t slice_numel(const expected_param *p, int T) {
  const int64_t all = p->ndim == 1 ? p->shape[0] : p->shape[0] * p->shape[1];
  return p->split == TP_REPLICATED ? all : all / T;
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* The pieces of DESIGN.md's layout, in (param, t, begin) order; returns their count. */
static int expected_pieces(const expected_param *params, int n_params, int S, int T,
                           ckpt_piece *out) {
  int n = 0;
  int64_t *offset = calloc((size_t)n_params, sizeof *offset);
  int64_t *unit_numel = calloc((size_t)n_params, sizeof *unit_numel); /* by unit index */
  int64_t end = 0; /* every tp rank's slices have the same sizes, hence the same offsets */
  for (int i = 0; i < n_params; i++) {
    if (i > 0 && params[i].unit != params[i - 1].unit) end = 0;
    offset[i] = round_up(end, 16);
    end = offset[i] + slice_numel(&params[i], T);
    unit_numel[params[i].unit] = round_up(end, (int64_t)S * 16);
  }
  for (int i = 0; i < n_params; i++) {
    const int64_t shard = unit_numel[params[i].unit] / S, numel = slice_numel(&params[i], T);
    for (int t = 0; t < T; t++) {
      if (params[i].split == TP_REPLICATED && t > 0) continue;
      for (int s = 0; s < S; s++) {
        int64_t lo = s * shard - offset[i], hi = (s + 1) * shard - offset[i];
        if (lo < 0) lo = 0;
        if (hi > numel) hi = numel;
        if (lo < hi) out[n++] = (ckpt_piece){i, s * T + t, t, lo, hi};
      }
    }
  }
  free(unit_numel);
  free(offset);
  return n;
}

static void init_manifest(ckpt_manifest *m, int S, int T) {
  memset(m, 0, sizeof *m);
  CHECK_OK(gpt_config_named("tiny", &m->cfg));
  CHECK_OK(gpt_config_finish(&m->cfg, T));
  m->R = 1;
  m->S = S;
  m->T = T;
}

static void test_plan(int S, int T) {
  ckpt_manifest m;
  init_manifest(&m, S, T);
  CHECK_OK(ckpt_manifest_plan(&m));
  expected_param params[64];
  const int n_params = expected_params(&m.cfg, params);
  CHECK_EQ_INT(m.n_params, n_params);
  for (int i = 0; i < n_params && i < m.n_params; i++) {
    const ckpt_param *p = &m.params[i];
    int same = strcmp(p->name, params[i].name) == 0 && p->ndim == params[i].ndim &&
               p->split == params[i].split && p->blocks == params[i].blocks;
    for (int d = 0; d < p->ndim; d++) same &= p->shape[d] == params[i].shape[d];
    CHECK_MSG(same, "S=%d T=%d: parameter %d is %s, expected %s", S, T, i, p->name, params[i].name);
  }
  CHECK_EQ_INT(m.n_files, S * T);
  for (int f = 0; f < m.n_files; f++) {
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.safetensors", f);
    CHECK_MSG(strcmp(m.files[f].name, name) == 0, "file %d is %s", f, m.files[f].name);
  }

  /* Exactly DESIGN.md's pieces. */
  ckpt_piece *want = calloc(4096, sizeof *want);
  const int n_want = expected_pieces(params, n_params, S, T, want);
  CHECK_MSG(m.n_pieces == n_want, "S=%d T=%d: %d pieces, expected %d", S, T, m.n_pieces, n_want);
  int differ = 0;
  for (int i = 0; i < n_want && i < m.n_pieces; i++) {
    const ckpt_piece *a = &m.pieces[i], *b = &want[i];
    if (a->param != b->param || a->file != b->file || a->t != b->t || a->begin != b->begin ||
        a->end != b->end) {
      if (differ++ < 3) {
        CHECK_MSG(0, "S=%d T=%d piece %d: (%d,%d,%d,%lld,%lld), expected (%d,%d,%d,%lld,%lld)", S,
                  T, i, a->param, a->file, a->t, (long long)a->begin, (long long)a->end, b->param,
                  b->file, b->t, (long long)b->begin, (long long)b->end);
      }
    }
  }
  CHECK_MSG(differ == 0, "S=%d T=%d: %d pieces differ from the layout's", S, T, differ);
  free(want);

  /* Sorted, and tiling each (param, t) slice once: checked on the plan itself. */
  int unsorted = 0, untiled = 0, misplaced = 0;
  for (int i = 1; i < m.n_pieces; i++) {
    const ckpt_piece *a = &m.pieces[i - 1], *b = &m.pieces[i];
    unsorted += !(a->param < b->param ||
                  (a->param == b->param && (a->t < b->t || (a->t == b->t && a->begin < b->begin))));
  }
  for (int i = 0; i < n_params && i < m.n_params; i++) {
    for (int t = 0; t < T; t++) {
      int64_t covered = 0;
      int pieces = 0, last_file = -1;
      for (int k = 0; k < m.n_pieces; k++) {
        const ckpt_piece *p = &m.pieces[k];
        if (p->param != i || p->t != t) continue;
        pieces++;
        untiled += p->begin != covered || p->end <= p->begin;
        covered = p->end;
        /* file s * T + t, a later shard than the previous piece's */
        misplaced += p->file % T != t || p->file <= last_file || p->file >= S * T;
        last_file = p->file;
      }
      const int held = params[i].split != TP_REPLICATED || t == 0;
      if (held) {
        untiled += covered != slice_numel(&params[i], T);
      } else {
        untiled += pieces != 0;
      }
    }
  }
  CHECK_MSG(unsorted == 0 && untiled == 0 && misplaced == 0,
            "S=%d T=%d: %d pieces out of order, %d slices not tiled once, %d pieces misplaced", S,
            T, unsorted, untiled, misplaced);
  ckpt_manifest_free(&m);
}

/* ---- files ---------------------------------------------------------------------------------- */

static void fill_run(ckpt_manifest *m) {
  m->step = 123456789012LL;
  m->tokens = 987654321098765LL;
  snprintf(m->model, sizeof m->model, "tiny");
  m->R = 2;
  m->zero = 3;
  m->param_dtype = ST_BF16;
  m->reduce_dtype = ST_FP32;
  m->scaler = (loss_scaler_state){1024.0, 1999, m->step}; /* every step skipped, the most */
  m->micro_batch = 3;
  m->h = (train_hparams){.schedule = {LR_COSINE, 3e-3, 3e-4, 7, 1000, 0},
                         .adam = {0.9f, 0.95f, 1e-8f},
                         .weight_decay = 0.1f,
                         .clip = 1.0f,
                         .grad_accum = 5,
                         .global_tokens = 3 * 5 * 64 * 4};
  m->seed = 9007199254740991ULL; /* 2^53 - 1: the largest the JSON numbers hold exactly */
  CHECK_OK(ckpt_manifest_set_data(m, m->R * m->S, (token_position){0, 0}));
  for (int d = 0; d < m->dp_size; d++) {
    m->data[d] = (token_position){(uint64_t)d, 1000003ULL * (uint64_t)(d + 1)};
  }
  for (int f = 0; f < m->n_files; f++) {
    for (int i = 0; i < 64; i++) m->files[f].sha256[i] = "0123456789abcdef"[(f * 7 + i) % 16];
    m->files[f].sha256[64] = '\0';
    m->files[f].bytes = 1000000007ULL + (uint64_t)f;
  }
}

static void check_same(const ckpt_manifest *a, const ckpt_manifest *b) {
  CHECK_EQ_INT(a->step, b->step);
  CHECK_EQ_INT(a->tokens, b->tokens);
  CHECK(strcmp(a->model, b->model) == 0);
  CHECK(a->cfg.n_layer == b->cfg.n_layer && a->cfg.n_head == b->cfg.n_head &&
        a->cfg.n_embd == b->cfg.n_embd && a->cfg.vocab == b->cfg.vocab &&
        a->cfg.vocab_padded == b->cfg.vocab_padded && a->cfg.max_seq == b->cfg.max_seq);
  CHECK(a->R == b->R && a->S == b->S && a->T == b->T && a->zero == b->zero);
  CHECK(a->param_dtype == b->param_dtype && a->reduce_dtype == b->reduce_dtype);
  CHECK(a->scaler.scale == b->scaler.scale && a->scaler.clean_steps == b->scaler.clean_steps &&
        a->scaler.skipped == b->scaler.skipped && a->micro_batch == b->micro_batch);
  const train_hparams *x = &a->h, *y = &b->h;
  CHECK(x->schedule.shape == y->schedule.shape && x->schedule.lr == y->schedule.lr &&
        x->schedule.min_lr == y->schedule.min_lr && x->schedule.warmup == y->schedule.warmup &&
        x->schedule.total_steps == y->schedule.total_steps &&
        x->schedule.decay_steps == y->schedule.decay_steps);
  CHECK(x->adam.beta1 == y->adam.beta1 && x->adam.beta2 == y->adam.beta2 &&
        x->adam.eps == y->adam.eps);
  CHECK(x->weight_decay == y->weight_decay && x->clip == y->clip &&
        x->grad_accum == y->grad_accum && x->global_tokens == y->global_tokens);
  CHECK(a->seed == b->seed);
  CHECK_EQ_INT(a->dp_size, b->dp_size);
  for (int d = 0; d < a->dp_size && d < b->dp_size; d++) {
    CHECK(a->data[d].shard == b->data[d].shard && a->data[d].offset == b->data[d].offset);
  }
  CHECK(a->n_params == b->n_params && a->n_files == b->n_files && a->n_pieces == b->n_pieces);
  for (int i = 0; i < a->n_params && i < b->n_params; i++) {
    const ckpt_param *p = &a->params[i], *q = &b->params[i];
    int same = strcmp(p->name, q->name) == 0 && p->ndim == q->ndim && p->split == q->split &&
               p->blocks == q->blocks;
    for (int d = 0; d < p->ndim; d++) same &= p->shape[d] == q->shape[d];
    CHECK_MSG(same, "parameter %d: %s read back as %s", i, p->name, q->name);
  }
  for (int f = 0; f < a->n_files && f < b->n_files; f++) {
    CHECK(strcmp(a->files[f].name, b->files[f].name) == 0);
    CHECK(strcmp(a->files[f].sha256, b->files[f].sha256) == 0);
    CHECK(a->files[f].bytes == b->files[f].bytes);
  }
  CHECK(a->n_pieces == b->n_pieces &&
        memcmp(a->pieces, b->pieces, (size_t)a->n_pieces * sizeof *a->pieces) == 0);
}

static void test_round_trip(int S, int T, lr_schedule schedule) {
  ckpt_manifest m, back;
  init_manifest(&m, S, T);
  CHECK_OK(ckpt_manifest_plan(&m));
  fill_run(&m);
  m.h.schedule = schedule;
  char path[4096];
  test_tmp_path(path, sizeof path, "manifest_round_trip.json");
  CHECK_OK(ckpt_manifest_write(&m, path));
  CHECK_OK(ckpt_manifest_read(&back, path));
  check_same(&m, &back);
  ckpt_manifest_free(&back);
  ckpt_manifest_free(&m);
}

/* ---- damaged manifests ------------------------------------------------------------------------
 */

/* Writes `root` to path as JSON text. */
static void write_json(const char *path, const cJSON *root) {
  char *text = cJSON_Print(root);
  test_write_file(path, text, strlen(text));
  cJSON_free(text);
}

typedef void (*edit_fn)(cJSON *root);

static void remove_key(cJSON *o, const char *key) {
  cJSON_DeleteItemFromObjectCaseSensitive(o, key);
}
static cJSON *obj(cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static void set_number(cJSON *o, const char *key, double v) {
  cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

static void edit_piece_end(cJSON *r) {
  cJSON *end = cJSON_GetArrayItem(cJSON_GetArrayItem(obj(r, "pieces"), 1), 4);
  cJSON_SetNumberValue(end, end->valuedouble - 1);
}
static void edit_piece_file(cJSON *r) {
  cJSON *file = cJSON_GetArrayItem(cJSON_GetArrayItem(obj(r, "pieces"), 0), 1);
  cJSON_SetNumberValue(file, file->valuedouble + 1);
}
static void edit_piece_dropped(cJSON *r) { cJSON_DeleteItemFromArray(obj(r, "pieces"), 2); }
static void edit_version(cJSON *r) { set_number(r, "version", CKPT_FORMAT_VERSION + 1); }
static void edit_format(cJSON *r) {
  cJSON_ReplaceItemInObjectCaseSensitive(r, "format", cJSON_CreateString("safetensors"));
}
static void edit_mesh(cJSON *r) { /* S 4: the listed pieces are no longer the mesh's */
  cJSON_SetNumberValue(cJSON_GetArrayItem(obj(r, "mesh"), 1), 4);
}
/* The plan of this model and mesh took 12 s and 3.6 GB before the lists were compared. */
static void edit_huge_plan(cJSON *r) {
  cJSON *model = obj(r, "model");
  set_number(model, "n_layer", 1024);
  set_number(model, "n_embd", 1024);
  set_number(model, "n_head", 16);
  enum { S = 131072 };
  cJSON_SetNumberValue(cJSON_GetArrayItem(obj(r, "mesh"), 0), 1);
  cJSON_SetNumberValue(cJSON_GetArrayItem(obj(r, "mesh"), 1), S);
  cJSON_SetNumberValue(cJSON_GetArrayItem(obj(r, "mesh"), 2), 1);
  cJSON *files = cJSON_CreateArray(), *file = cJSON_GetArrayItem(obj(r, "files"), 0);
  cJSON *data = cJSON_CreateArray(), *position = cJSON_GetArrayItem(obj(r, "data"), 0);
  for (int f = 0; f < S; f++) {
    cJSON_AddItemToArray(files, cJSON_Duplicate(file, 1));
    cJSON_AddItemToArray(data, cJSON_Duplicate(position, 1));
  }
  cJSON_ReplaceItemInObjectCaseSensitive(r, "files", files);
  cJSON_ReplaceItemInObjectCaseSensitive(r, "data", data);
  cJSON_ReplaceItemInObjectCaseSensitive(r, "params", cJSON_CreateArray());
  cJSON_ReplaceItemInObjectCaseSensitive(r, "pieces", cJSON_CreateArray());
}
static void edit_params_object(cJSON *r) {
  cJSON_ReplaceItemInObjectCaseSensitive(r, "params", cJSON_CreateObject());
}
static void edit_min_lr_above_lr(cJSON *r) { set_number(obj(r, "optimizer"), "min_lr", 1); }
static void edit_mesh_and_data(cJSON *r) { /* 2 x 4 dp ranks, each with a position */
  edit_mesh(r);
  cJSON *data = obj(r, "data");
  while (cJSON_GetArraySize(data) < 8) {
    cJSON_AddItemToArray(data, cJSON_Duplicate(cJSON_GetArrayItem(data, 0), 1));
  }
}
static void edit_file_name(cJSON *r) {
  cJSON *f = cJSON_GetArrayItem(obj(r, "files"), 1);
  cJSON_ReplaceItemInObjectCaseSensitive(f, "name", cJSON_CreateString("rank_00009.safetensors"));
}
static void edit_param_name(cJSON *r) {
  cJSON *p = cJSON_GetArrayItem(obj(r, "params"), 3);
  cJSON_ReplaceItemInObjectCaseSensitive(p, "name", cJSON_CreateString("h.0.ln_1.gamma"));
}
static void edit_zero(cJSON *r) { set_number(r, "zero", 4); }
static void edit_step_fraction(cJSON *r) { set_number(r, "step", 2.5); }
static void drop_step(cJSON *r) { remove_key(r, "step"); }
static void drop_version(cJSON *r) { remove_key(r, "version"); }
static void drop_model_n_head(cJSON *r) { remove_key(obj(r, "model"), "n_head"); }
static void drop_mesh(cJSON *r) { remove_key(r, "mesh"); }
static void drop_zero(cJSON *r) { remove_key(r, "zero"); }
static void drop_param_dtype(cJSON *r) { remove_key(obj(r, "dtypes"), "param"); }
static void drop_lr(cJSON *r) { remove_key(obj(r, "optimizer"), "lr"); }
static void drop_seed(cJSON *r) { remove_key(obj(r, "rng"), "init_seed"); }
static void drop_data(cJSON *r) { remove_key(r, "data"); }
static void drop_pieces(cJSON *r) { remove_key(r, "pieces"); }
static void drop_files(cJSON *r) { remove_key(r, "files"); }
static void drop_sha256(cJSON *r) { remove_key(cJSON_GetArrayItem(obj(r, "files"), 0), "sha256"); }
static void drop_bytes(cJSON *r) { remove_key(cJSON_GetArrayItem(obj(r, "files"), 1), "bytes"); }
static void edit_clean_fraction(cJSON *r) { set_number(r, "loss_scale_clean_steps", 0.5); }
static void edit_skipped_negative(cJSON *r) { set_number(r, "skipped_steps", -1); }
static void edit_skipped_past_step(cJSON *r) {
  set_number(r, "skipped_steps", cJSON_GetObjectItemCaseSensitive(r, "step")->valuedouble + 1);
}
static void edit_tokens_fraction(cJSON *r) { set_number(r, "tokens", 0.5); }
static void edit_decay_on_cosine(cJSON *r) {
  cJSON_AddNumberToObject(obj(r, "optimizer"), "decay_steps", 3);
}
static void edit_wsd_without_decay(cJSON *r) {
  cJSON_ReplaceItemInObjectCaseSensitive(obj(r, "optimizer"), "lr_schedule",
                                         cJSON_CreateString("wsd"));
}
static void drop_scaler_counters(cJSON *r) {
  remove_key(r, "loss_scale_clean_steps");
  remove_key(r, "skipped_steps");
}

static void test_refused(void) {
  ckpt_manifest m;
  init_manifest(&m, 3, 2);
  CHECK_OK(ckpt_manifest_plan(&m));
  fill_run(&m);
  char good[4096], bad[4096];
  test_tmp_path(good, sizeof good, "manifest_good.json");
  test_tmp_path(bad, sizeof bad, "manifest_bad.json");
  CHECK_OK(ckpt_manifest_write(&m, good));
  ckpt_manifest_free(&m);
  size_t size = 0;
  unsigned char *text = test_read_file(good, &size);
  CHECK(text != NULL);
  if (!text) return;
  text[size] = '\0';

  static const struct {
    const char *what;
    edit_fn edit;
    const char *message; /* what the error must say besides the file's path */
  } cases[] = {
      {"a piece's end edited", edit_piece_end, "piece 1 does not match"},
      {"a piece's file edited", edit_piece_file, "piece 0 does not match"},
      {"a piece removed", edit_piece_dropped, "pieces listed"},
      {"a newer version", edit_version, "format version 2"},
      {"another format", edit_format, "not a shardtrain checkpoint manifest"},
      {"the mesh edited", edit_mesh, "'data' is not an array of 8 positions (one per dp rank)"},
      {"the mesh edited, data positions added", edit_mesh_and_data,
       "6 files listed; mesh 2x4x2 writes 8"},
      {"a thousand layers on 131072 shards, only the files listed", edit_huge_plan,
       "0 params and 0 pieces listed; model and mesh give more than 0 and more than 0"},
      {"params an object", edit_params_object, "'params' is not an array"},
      {"min_lr above lr", edit_min_lr_above_lr, "optimizer: minimum learning rate 1 must lie in"},
      {"a file renamed", edit_file_name, "rank_00009.safetensors"},
      {"a parameter renamed", edit_param_name, "h.0.ln_1.gamma"},
      {"ZeRO stage 4", edit_zero, "'zero' 4"},
      {"a fractional step", edit_step_fraction, "'step' is not a whole number"},
      {"fractional tokens", edit_tokens_fraction, "'tokens' is not a whole number"},
      {"no step", drop_step, "field 'step' is missing"},
      {"no version", drop_version, "field 'version' is missing"},
      {"no model.n_head", drop_model_n_head, "field 'n_head' is missing"},
      {"no mesh", drop_mesh, "field 'mesh' is missing"},
      {"no zero", drop_zero, "field 'zero' is missing"},
      {"no dtypes.param", drop_param_dtype, "field 'param' is missing"},
      {"no optimizer.lr", drop_lr, "field 'lr' is missing"},
      {"no rng.init_seed", drop_seed, "field 'init_seed' is missing"},
      {"no data", drop_data, "field 'data' is missing"},
      {"no pieces", drop_pieces, "field 'pieces' is missing"},
      {"no files", drop_files, "field 'files' is missing"},
      {"no files[0].sha256", drop_sha256, "field 'sha256' is missing"},
      {"no files[1].bytes", drop_bytes, "field 'bytes' is missing"},
      {"half a clean step", edit_clean_fraction, "'loss_scale_clean_steps' is not a whole number"},
      {"-1 skipped steps", edit_skipped_negative, "'skipped_steps' is not a number in [0"},
      {"more skipped steps than steps", edit_skipped_past_step,
       "is more than the 123456789012 steps taken"},
      {"decay steps on a cosine", edit_decay_on_cosine, "decay_steps is for lr_schedule wsd"},
      {"wsd without decay steps", edit_wsd_without_decay, "field 'decay_steps' is missing"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cJSON *root = cJSON_Parse((const char *)text);
    cases[c].edit(root);
    write_json(bad, root);
    cJSON_Delete(root);
    const uint64_t live = test_live_blocks();
    ckpt_manifest back;
    st_status status = ckpt_manifest_read(&back, bad);
    const char *msg = st_last_error();
    CHECK_MSG(status == ST_ERR_FORMAT && strstr(msg, bad) && strstr(msg, cases[c].message),
              "%s: %s, '%s' (wanted ST_ERR_FORMAT naming the file and '%s')", cases[c].what,
              st_status_string(status), msg, cases[c].message);
    CHECK_MSG(test_live_blocks() == live, "%s: blocks left allocated", cases[c].what);
    if (status == ST_OK) ckpt_manifest_free(&back);
  }

  /* Texts that are not one JSON object with each key once, each refused naming the file: */
  static const char *const texts[][2] = {
      {"cut", "manifest is not valid JSON (error near byte"},
      {"{\"step\": 1, ", "the key \"step\" appears twice in one object"},
      {" this is not JSON {{{", "manifest has more than whitespace after its JSON object"},
      {"\0garbage", "manifest is not UTF-8 text without control bytes"},
      {"{\"name\": \"b\\u0000junk\", ", "manifest holds a string with a NUL"},
  };
  ckpt_manifest back;
  for (size_t c = 0; c < sizeof texts / sizeof texts[0]; c++) {
    const char *edit = texts[c][0];
    const size_t edit_bytes = edit[0] ? strlen(edit) : 8; /* "\0garbage" */
    char *changed = malloc(size + edit_bytes);
    size_t bytes = 0;
    if (strcmp(edit, "cut") == 0) { /* cut short in the middle */
      memcpy(changed, text, bytes = size / 2);
    } else if (edit[0] == '{') { /* the edit opens the object, before its first key */
      memcpy(changed, edit, edit_bytes);
      memcpy(changed + edit_bytes, (const char *)text + 1, size - 1);
      bytes = edit_bytes + size - 1;
    } else { /* after the object */
      memcpy(changed, text, size);
      memcpy(changed + size, edit, edit_bytes);
      bytes = size + edit_bytes;
    }
    test_write_file(bad, changed, bytes);
    free(changed);
    const st_status status = ckpt_manifest_read(&back, bad);
    CHECK_MSG(status == ST_ERR_FORMAT && strstr(st_last_error(), bad) &&
                  strstr(st_last_error(), texts[c][1]),
              "text %zu: %s, '%s' (wanted '%s')", c, st_status_string(status), st_last_error(),
              texts[c][1]);
  }
  /* And the untouched text still reads. */
  CHECK_OK(ckpt_manifest_read(&back, good));
  ckpt_manifest_free(&back);
  /* A manifest from before fp16 has the scale alone: its counters read as 0. */
  cJSON *root = cJSON_Parse((const char *)text);
  drop_scaler_counters(root);
  write_json(bad, root);
  cJSON_Delete(root);
  CHECK_OK(ckpt_manifest_read(&back, bad));
  CHECK_MSG(back.scaler.scale == 1024.0 && back.scaler.clean_steps == 0 && back.scaler.skipped == 0,
            "a manifest without the scaler's counters: scale %g, %lld clean, %lld skipped",
            back.scaler.scale, (long long)back.scaler.clean_steps, (long long)back.scaler.skipped);
  ckpt_manifest_free(&back);
  /* One from before the tokens were counted: every step at its own global batch (fill_run's). */
  root = cJSON_Parse((const char *)text);
  remove_key(root, "tokens");
  write_json(bad, root);
  cJSON_Delete(root);
  CHECK_OK(ckpt_manifest_read(&back, bad));
  CHECK_EQ_INT(back.tokens, 123456789012LL * (3 * 5 * 64 * 4));
  ckpt_manifest_free(&back);
  free(text);
}

int main(void) {
  const int meshes[4][2] = {{1, 1}, {2, 1}, {3, 2}, {2, 4}};
  for (int i = 0; i < 4; i++) {
    test_plan(meshes[i][0], meshes[i][1]);
    test_round_trip(meshes[i][0], meshes[i][1], (lr_schedule){LR_COSINE, 3e-3, 3e-4, 7, 1000, 0});
  }
  test_round_trip(2, 1, (lr_schedule){LR_WSD, 3e-3, 3e-4, 7, 1000, 200});
  test_round_trip(2, 1, (lr_schedule){LR_LINEAR, 3e-3, 0, 0, 1000, 0});
  test_refused();
  CHECK_EQ_INT(test_live_blocks(), 0);
  return test_finish("ckpt_manifest_test");
}
