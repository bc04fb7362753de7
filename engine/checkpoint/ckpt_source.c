/* ckpt_source.c - see ckpt_source.h. */
#include "engine/checkpoint/ckpt_source.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ckpt_done.h"
#include "engine/io/file_io.h"
#include "engine/io/safetensors.h"

struct ckpt_source {
  char dir[4096];
  ckpt_manifest m;
  safetensors_reader **files; /* opened on first use */
};

const ckpt_manifest *ckpt_source_manifest(const ckpt_source *src) { return &src->m; }
const char *ckpt_source_dir(const ckpt_source *src) { return src->dir; }

static void path_in(const ckpt_source *src, const char *name, char *out, size_t size) {
  snprintf(out, size, "%s/%s", src->dir, name);
}

/* Why `dir`, a directory without DONE, is not a checkpoint: a save that did not finish left
 * the manifest or rank files (ST_ERR_FORMAT), or it holds none of them, which is a path the user
 * got wrong (ST_ERR_INVALID_ARG), most often the --ckpt-dir that holds the step_N directories. */
static st_status no_done_marker(const char *dir) {
  int partial = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && !partial && (e = readdir(d)) != NULL;) {
    partial = strcmp(e->d_name, "manifest.json") == 0 || strncmp(e->d_name, "rank_", 5) == 0;
  }
  if (d) closedir(d);
  if (partial) {
    return st_error(ST_ERR_FORMAT,
                    "%s: no DONE marker: the checkpoint is incomplete (a save that did not "
                    "finish)",
                    dir);
  }
  char latest[4200];
  int found = 0;
  if (ckpt_find_latest(dir, latest, sizeof latest, &found) == ST_OK && found) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s holds no checkpoint files: is it the --ckpt-dir? Its checkpoints are "
                    "step_N subdirectories; the newest complete one is %s",
                    dir, latest);
  }
  return st_error(ST_ERR_INVALID_ARG,
                  "%s holds no checkpoint files (a checkpoint is a step_N directory with "
                  "manifest.json and DONE)",
                  dir);
}

st_status ckpt_source_open(ckpt_source **out, const char *dir) {
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s: not a checkpoint directory (%s)", dir,
                    errno == ENOENT ? "no such directory" : strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s is a file, not a checkpoint directory (a step_N directory)", dir);
  }
  ckpt_source *src = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&src, sizeof *src, MEM_HOST, MEM_WORKSPACE, NULL));
  st_status status = file_path_trim_slashes(src->dir, sizeof src->dir, dir);
  char path[4200];
  path_in(src, "DONE", path, sizeof path);
  if (status == ST_OK && stat(path, &st) != 0) status = no_done_marker(src->dir);
  path_in(src, "manifest.json", path, sizeof path);
  if (status == ST_OK) status = ckpt_manifest_read(&src->m, path);
  if (status == ST_OK) status = ckpt_done_check(src->dir, &src->m);
  if (status == ST_OK) {
    status = mem_alloc_zeroed((void **)&src->files, (size_t)src->m.n_files * sizeof *src->files,
                              MEM_HOST, MEM_WORKSPACE, NULL);
  }
  if (status != ST_OK) {
    ckpt_source_close(src);
    return status;
  }
  *out = src;
  return ST_OK;
}

void ckpt_source_close(ckpt_source *src) {
  if (!src) return;
  for (int f = 0; src->files && f < src->m.n_files; f++) safetensors_reader_close(src->files[f]);
  mem_free(src->files);
  ckpt_manifest_free(&src->m);
  mem_free(src);
}

st_status ckpt_source_verify(const ckpt_source *src, int f) {
  const ckpt_file *file = &src->m.files[f];
  char path[4200], hex[SHA256_HEX_SIZE];
  path_in(src, file->name, path, sizeof path);
  uint64_t bytes = 0;
  ST_CHECK(sha256_file(path, hex, &bytes));
  if (bytes != file->bytes) {
    return st_error(ST_ERR_FORMAT, "%s: %llu bytes, the manifest says %llu (truncated or replaced)",
                    path, (unsigned long long)bytes, (unsigned long long)file->bytes);
  }
  if (strcmp(hex, file->sha256) != 0) {
    return st_error(ST_ERR_FORMAT, "%s: SHA-256 %s, the manifest says %s (the file is damaged)",
                    path, hex, file->sha256);
  }
  return ST_OK;
}

st_status ckpt_source_check_model(const ckpt_source *src, const gpt_config *cfg) {
  const gpt_config *c = &src->m.cfg;
  if (c->n_layer == cfg->n_layer && c->n_head == cfg->n_head && c->n_embd == cfg->n_embd &&
      c->vocab == cfg->vocab && c->max_seq == cfg->max_seq) {
    return ST_OK;
  }
  return st_error(ST_ERR_INVALID_ARG,
                  "%s/manifest.json: the checkpoint holds a model of n_layer %d, n_head %d, "
                  "n_embd %d, vocab %d, seq %d; this run's has %d, %d, %d, %d, %d",
                  src->dir, c->n_layer, c->n_head, c->n_embd, c->vocab, c->max_seq, cfg->n_layer,
                  cfg->n_head, cfg->n_embd, cfg->vocab, cfg->max_seq);
}

static st_status file_reader(ckpt_source *src, int f, safetensors_reader **out) {
  if (!src->files[f]) {
    char path[4200];
    path_in(src, src->m.files[f].name, path, sizeof path);
    ST_CHECK(safetensors_reader_open(&src->files[f], path));
  }
  *out = src->files[f];
  return ST_OK;
}

/* The piece of param `param` on tp rank t holding slice element `local`, or NULL. Pieces are
 * sorted by (param, t, begin) and few per parameter: a binary search over the whole table. */
static const ckpt_piece *find_piece(const ckpt_manifest *m, int param, int t, int64_t local) {
  int lo = 0, hi = m->n_pieces;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    const ckpt_piece *p = &m->pieces[mid];
    int before =
        p->param < param || (p->param == param && (p->t < t || (p->t == t && p->end <= local)));
    if (before) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == m->n_pieces) return NULL;
  const ckpt_piece *p = &m->pieces[lo];
  return p->param == param && p->t == t && p->begin <= local && local < p->end ? p : NULL;
}

/* Reads n elements of piece `piece` from its element `at`. */
static st_status read_piece(ckpt_source *src, const ckpt_piece *piece, ckpt_state state, int64_t at,
                            int64_t n, float *dst) {
  safetensors_reader *r;
  ST_CHECK(file_reader(src, piece->file, &r));
  char name[CKPT_NAME_MAX + 16];
  snprintf(name, sizeof name, "%s/%s", ckpt_state_name(state), src->m.params[piece->param].name);
  const safetensors_entry *e = safetensors_reader_find(r, name);
  if (!e || e->dtype != SAFETENSORS_F32 || e->numel != (uint64_t)(piece->end - piece->begin)) {
    return st_error(ST_ERR_FORMAT, "%s/%s: tensor '%s' is missing or is not F32 [%lld]", src->dir,
                    src->m.files[piece->file].name, name, (long long)(piece->end - piece->begin));
  }
  return safetensors_reader_read(r, e, (uint64_t)at, (uint64_t)n, dst);
}

/* The checkpoint's parameter for the reader's `p`, with the reader's shape checked. */
static st_status source_param(const ckpt_source *src, const char *name, const unit_param *p,
                              int *index, unit_param *out) {
  const ckpt_manifest *m = &src->m;
  *index = ckpt_manifest_find(m, name);
  if (*index < 0) {
    return st_error(ST_ERR_FORMAT, "%s: the checkpoint has no parameter '%s'", src->dir, name);
  }
  const ckpt_param *c = &m->params[*index];
  int same = c->ndim == p->ndim && c->split == p->split;
  for (int d = 0; same && d < p->ndim; d++) {
    same = c->shape[d] == p->shape[d] || (d == 0 && p->split == TP_REPLICATED);
  }
  if (!same) {
    return st_error(ST_ERR_FORMAT, "%s: parameter '%s' has another shape or split than the model's",
                    src->dir, name);
  }
  return unit_param_init(out, c->name, c->ndim, c->shape, c->split, c->blocks, m->T);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

st_status ckpt_source_read(ckpt_source *src, ckpt_state state, const char *name,
                           const unit_param *p, int T, int t, int64_t first, int64_t count,
                           float *dst) {
  int index;
  unit_param held;
  ST_CHECK(source_param(src, name, p, &index, &held));
  int64_t held_numel = 1; /* the checkpoint's logical elements */
  for (int d = 0; d < held.ndim; d++) held_numel *= held.shape[d];
  for (int64_t i = first; i < first + count;) {
    int64_t global, local;
    int held_t;
    int64_t n = min64(unit_param_global_run(p, T, t, i, &global), first + count - i);
    if (global >= held_numel) { /* a padding row the checkpoint does not have */
      memset(dst + (i - first), 0, (size_t)n * sizeof *dst);
      i += n;
      continue;
    }
    n = min64(n, min64(held_numel - global,
                       unit_param_local_run(&held, src->m.T, global, &held_t, &local)));
    const ckpt_piece *piece = find_piece(&src->m, index, held_t, local);
    if (!piece) {
      return st_error(ST_ERR_FORMAT, "%s: no piece holds element %lld of '%s' (tp rank %d)",
                      src->dir, (long long)local, name, held_t);
    }
    n = min64(n, piece->end - local);
    ST_CHECK(read_piece(src, piece, state, local - piece->begin, n, dst + (i - first)));
    i += n;
  }
  return ST_OK;
}
