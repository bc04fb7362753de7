/* ckpt_offline.c - reshard, export and inspect on one process (see ckpt_offline.h). Every
 * tensor is copied through one buffer of CKPT_CHUNK_ELEMENTS floats, through
 * ckpt_source_read, which maps any layout to the pieces that hold it. */
#include "engine/checkpoint/ckpt_offline.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/checkpoint/ckpt_dirs.h"
#include "engine/checkpoint/ckpt_done.h"
#include "engine/io/file_io.h"
#include "engine/io/safetensors.h"
#include "engine/model/gpt_io.h"

#define PATH_BYTES 4200

st_status ckpt_verify_all(const ckpt_source *src) {
  const ckpt_manifest *m = ckpt_source_manifest(src);
  for (int f = 0; f < m->n_files; f++) ST_CHECK(ckpt_source_verify(src, f));
  return ST_OK;
}

/* Copies elements [begin, end) of `state` of a parameter, laid out as `p` on tp rank t of T,
 * into tensor `index` of the stream, chunk by chunk. */
static st_status copy_range(ckpt_source *src, ckpt_state state, const char *name,
                            const unit_param *p, int T, int t, int64_t begin, int64_t end,
                            safetensors_stream *out, size_t index, float *buf) {
  for (int64_t at = begin; at < end; at += CKPT_CHUNK_ELEMENTS) {
    const int64_t n = end - at < CKPT_CHUNK_ELEMENTS ? end - at : CKPT_CHUNK_ELEMENTS;
    ST_CHECK(ckpt_source_read(src, state, name, p, T, t, at, n, buf));
    ST_CHECK(safetensors_stream_put(out, index, (uint64_t)(at - begin) * sizeof(float), buf,
                                    (size_t)n * sizeof(float)));
  }
  return ST_OK;
}

static st_status chunk_buffer(float **buf) {
  return mem_alloc((void **)buf, (size_t)CKPT_CHUNK_ELEMENTS * sizeof(float), MEM_HOST,
                   MEM_WORKSPACE, NULL);
}

/* ---- reshard ------------------------------------------------------------------------------ */

/* Writes the target's file f: its pieces' three states, described as a training save would. */
static st_status reshard_file(ckpt_source *src, const ckpt_manifest *m, int f, const char *path,
                              float *buf) {
  ckpt_file_layout fl;
  safetensors_stream *out = NULL;
  ST_CHECK(ckpt_file_layout_make(m, f, &fl));
  st_status status =
      safetensors_stream_open(&out, path, fl.tensors, 3 * (size_t)fl.n, fl.meta, (size_t)fl.n + 1);
  for (int i = 0; i < fl.n && status == ST_OK; i++) {
    const ckpt_piece *piece = fl.pieces[i];
    const ckpt_param *c = &m->params[piece->param];
    unit_param p;
    status = unit_param_init(&p, c->name, c->ndim, c->shape, c->split, c->blocks, m->T);
    for (int st = 0; st < CKPT_STATE_COUNT && status == ST_OK; st++) {
      status = copy_range(src, (ckpt_state)st, c->name, &p, m->T, piece->t, piece->begin,
                          piece->end, out, 3 * (size_t)i + st, buf);
    }
  }
  status = safetensors_stream_finish(out, status);
  ckpt_file_layout_free(&fl);
  return status;
}

/* The batch a run on the target mesh takes for the source's global batch: a step's sequences
 * over its dp ranks, in the source's grad_accum micro-batches where that divides them, else in
 * one. Where the dp ranks do not divide the sequences, no run on the mesh takes that global
 * batch, and the source's numbers stay (inspect says so). */
static void target_batch(const ckpt_manifest *from, ckpt_manifest *to) {
  const int64_t sequences = from->h.global_tokens / from->cfg.max_seq, dp = (int64_t)to->R * to->S;
  if (sequences % dp != 0) return;
  const int64_t per_rank = sequences / dp;
  if (per_rank < 1 || per_rank > INT_MAX) return;
  to->h.grad_accum = per_rank % from->h.grad_accum == 0 ? from->h.grad_accum : 1;
  to->micro_batch = (int)(per_rank / to->h.grad_accum);
}

/* The manifest of src moved to another mesh: same run, new piece table. */
static st_status target_manifest(const ckpt_manifest *from, int R, int S, int T, int zero,
                                 ckpt_manifest *to) {
  *to = *from;
  to->params = NULL;
  to->files = NULL;
  to->pieces = NULL;
  to->data = NULL;
  to->R = R;
  to->S = S;
  to->T = T;
  to->zero = zero;
  target_batch(from, to);
  ST_CHECK(gpt_config_finish(&to->cfg, T)); /* ckpt_reshard_check passed it */
  ST_CHECK(ckpt_manifest_set_data(to, R * S, from->data[0]));
  return ckpt_manifest_plan(to);
}

static st_status reshard_into(ckpt_source *src, ckpt_manifest *m, const char *temp, float *buf) {
  char path[PATH_BYTES];
  for (int f = 0; f < m->n_files; f++) {
    ST_CHECK(file_path_join(path, sizeof path, temp, m->files[f].name));
    ST_CHECK(reshard_file(src, m, f, path, buf));
    ST_CHECK(sha256_file(path, m->files[f].sha256, &m->files[f].bytes));
  }
  ST_CHECK(ckpt_done_write(temp, m));
  return file_sync_directory(temp, temp);
}

st_status ckpt_reshard_check(const ckpt_source *src, const char *dst, int R, int S, int T,
                             int zero) {
  const ckpt_manifest *m = ckpt_source_manifest(src);
  ST_CHECK(ckpt_mesh_check(&m->cfg, R, S, T, zero));
  const long long named = ckpt_step_of_dir(dst);
  if (named >= 0 && named != (long long)m->step) {
    return st_error(ST_ERR_INVALID_ARG,
                    "DST %s is named for step %lld, the checkpoint is of step %lld: --resume "
                    "would take it for the other step",
                    dst, named, (long long)m->step);
  }
  return ST_OK;
}

st_status ckpt_reshard(ckpt_source *src, const char *dst_given, int R, int S, int T, int zero) {
  char dst[PATH_BYTES]; /* "out/step_3/" names out/step_3, written beside it as a temporary */
  ST_CHECK(file_path_trim_slashes(dst, sizeof dst, dst_given));
  ST_CHECK(ckpt_reshard_check(src, dst, R, S, T, zero));
  struct stat st;
  if (stat(dst, &st) == 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s exists: reshard writes a new directory", dst);
  }
  ST_CHECK(ckpt_verify_all(src));
  ckpt_manifest m;
  st_status planned = target_manifest(ckpt_source_manifest(src), R, S, T, zero, &m);
  if (planned != ST_OK) {
    ckpt_manifest_free(&m);
    return planned;
  }
  char temp[PATH_BYTES];
  const st_status named = atomic_file_temp_name(dst, temp, sizeof temp);
  if (named != ST_OK) {
    ckpt_manifest_free(&m);
    return named;
  }
  float *buf = NULL;
  st_status status = chunk_buffer(&buf);
  if (status == ST_OK && mkdir(temp, 0777) != 0) {
    status = st_error(ST_ERR_IO, "%s: cannot create: %s", temp, strerror(errno));
  } else if (status == ST_OK) {
    status = reshard_into(src, &m, temp, buf);
    if (status == ST_OK && rename(temp, dst) != 0) {
      status = st_error(ST_ERR_IO, "%s: cannot rename into place: %s", dst, strerror(errno));
    }
    if (status != ST_OK) file_remove_flat_dir(temp); /* nothing half-written is left */
  }
  mem_free(buf);
  ckpt_manifest_free(&m);
  return status;
}

/* ---- export ------------------------------------------------------------------------------- */

st_status ckpt_export_hf(ckpt_source *src, const char *out) {
  ST_CHECK(ckpt_verify_all(src));
  const ckpt_manifest *m = ckpt_source_manifest(src);
  safetensors_tensor *tensors = NULL;
  safetensors_stream *stream = NULL;
  float *buf = NULL;
  st_status status;
  ST_CHECK_GOTO(mem_alloc((void **)&tensors, (size_t)m->n_params * sizeof *tensors, MEM_HOST,
                          MEM_WORKSPACE, NULL),
                status, done);
  ST_CHECK_GOTO(chunk_buffer(&buf), status, done);
  for (int i = 0; i < m->n_params; i++) {
    const ckpt_param *c = &m->params[i];
    tensors[i] = (safetensors_tensor){.name = c->name, .dtype = SAFETENSORS_F32, .ndim = c->ndim};
    memcpy(tensors[i].shape, c->shape, sizeof c->shape);
    if (strcmp(c->name, "wte.weight") == 0) tensors[i].shape[0] = m->cfg.vocab; /* no padding */
  }
  char n_head[16];
  snprintf(n_head, sizeof n_head, "%d", m->cfg.n_head);
  const safetensors_metadata meta[] = {{"format", "pt"}, {GPT_META_N_HEAD, n_head}};
  ST_CHECK_GOTO(safetensors_stream_open(&stream, out, tensors, (size_t)m->n_params, meta, 2),
                status, done);
  for (int i = 0; i < m->n_params && status == ST_OK; i++) {
    const ckpt_param *c = &m->params[i];
    unit_param whole;
    status = unit_param_init(&whole, c->name, c->ndim, c->shape, c->split, c->blocks, 1);
    int64_t numel = 1;
    for (int d = 0; d < tensors[i].ndim; d++) numel *= tensors[i].shape[d];
    if (status == ST_OK) {
      status =
          copy_range(src, CKPT_MASTER, c->name, &whole, 1, 0, 0, numel, stream, (size_t)i, buf);
    }
  }
  status = safetensors_stream_finish(stream, status);
done:
  mem_free(buf);
  mem_free(tensors);
  return status;
}

/* ---- inspect ------------------------------------------------------------------------------ */

st_status ckpt_describe(const ckpt_source *src, FILE *out) {
  const ckpt_manifest *m = ckpt_source_manifest(src);
  const gpt_config *c = &m->cfg;
  int64_t params = gpt_config_num_params(c);
  fprintf(out, "checkpoint %s\n", ckpt_source_dir(src));
  fprintf(out, "  step        %lld (%lld tokens trained on)\n", (long long)m->step,
          (long long)m->tokens);
  fprintf(out, "  model       %s: %d layers, %d heads, %d wide, vocab %d, seq %d (%.2fM params)\n",
          m->model, c->n_layer, c->n_head, c->n_embd, c->vocab, c->max_seq, (double)params / 1e6);
  fprintf(out, "  mesh        dp_replicate %d x dp_shard %d x tp %d, ZeRO-%d\n", m->R, m->S, m->T,
          m->zero);
  fprintf(out, "  dtypes      param %s, reduce %s, loss scale %g\n", dtype_name(m->param_dtype),
          dtype_name(m->reduce_dtype), m->scaler.scale);
  if (m->scaler.scale != 1.0 || m->scaler.skipped) {
    fprintf(out, "  loss scale  %g, %lld clean step%s since it last changed, %lld step%s skipped\n",
            m->scaler.scale, (long long)m->scaler.clean_steps,
            m->scaler.clean_steps == 1 ? "" : "s", (long long)m->scaler.skipped,
            m->scaler.skipped == 1 ? "" : "s");
  }
  char schedule[128];
  lr_schedule_describe(&m->h.schedule, schedule, sizeof schedule);
  fprintf(out,
          "  optimizer   AdamW lr %g (%s; %d step%s), betas %g %g, eps %g, "
          "weight decay %g, clip %g\n",
          m->h.schedule.lr, schedule, m->h.schedule.total_steps,
          m->h.schedule.total_steps == 1 ? "" : "s", (double)m->h.adam.beta1,
          (double)m->h.adam.beta2, (double)m->h.adam.eps, (double)m->h.weight_decay,
          (double)m->h.clip);
  const int64_t sequences = m->h.global_tokens / c->max_seq;
  if ((int64_t)m->micro_batch * m->h.grad_accum * m->dp_size == sequences) {
    fprintf(out, "  batch       micro-batch %d x grad-accum %d, %lld tokens per step\n",
            m->micro_batch, m->h.grad_accum, (long long)m->h.global_tokens);
  } else { /* resharded onto a mesh whose dp ranks do not divide the batch (target_batch) */
    fprintf(out,
            "  batch       %lld tokens per step: %lld sequences, which the %d dp rank%s of this "
            "mesh do not divide\n",
            (long long)m->h.global_tokens, (long long)sequences, m->dp_size,
            m->dp_size == 1 ? "" : "s");
  }
  fprintf(out, "  data        next batch at shard %llu, token %llu (%d dp rank%s)\n",
          (unsigned long long)m->data[0].shard, (unsigned long long)m->data[0].offset, m->dp_size,
          m->dp_size == 1 ? "" : "s");
  fprintf(out, "  init seed   %llu\n", (unsigned long long)m->seed);
  fprintf(out, "  files       %d, %d pieces of %d tensors\n", m->n_files, m->n_pieces, m->n_params);
  int damaged = -1;
  uint64_t total = 0;
  for (int f = 0; f < m->n_files; f++) {
    st_status status = ckpt_source_verify(src, f);
    total += m->files[f].bytes;
    fprintf(out, "    %-24s %12llu bytes  sha256 %.16s...  %s\n", m->files[f].name,
            (unsigned long long)m->files[f].bytes, m->files[f].sha256,
            status == ST_OK ? "ok" : "DAMAGED");
    if (status != ST_OK && damaged < 0) damaged = f;
  }
  fprintf(out, "  total       %.1f MB\n", (double)total / 1e6);
  /* The first damaged file's verdict again, so its message is the one reported. */
  return damaged < 0 ? ST_OK : ckpt_source_verify(src, damaged);
}
