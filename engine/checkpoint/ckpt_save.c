/* ckpt_save.c - the phases of a save (ckpt_save.h) and the blocking save of checkpoint.h. */
#include "engine/checkpoint/ckpt_save.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ckpt_dirs.h"
#include "engine/checkpoint/ckpt_done.h"
#include "engine/io/file_io.h"
#include "engine/io/job_agree.h"
#include "engine/plan/planner.h"

/* The memory planner, a layer below that cannot include this package, counts
 * write_rank_file's staging as PLAN_CKPT_STAGING_BYTES. */
_Static_assert((int64_t)sizeof(float) * CKPT_CHUNK_ELEMENTS == PLAN_CKPT_STAGING_BYTES,
               "a save's staging is not what the memory planner counts (PLAN_CKPT_STAGING_BYTES)");

double ckpt_seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0's account of its own file while it is written: a line every few seconds, so a long
 * save shows how far it is and how fast it goes. */
typedef struct save_progress {
  deadline *stall; /* the write's ST_IO_TIMEOUT deadline, extended with each chunk */
  int report;
  const char *path;
  uint64_t total, written;
  double start, last;
} save_progress;

#define PROGRESS_EVERY_S 2.0

static void progress_add(save_progress *p, size_t bytes) {
  deadline_extend(p->stall);
  p->written += bytes;
  const double now = ckpt_seconds_now();
  if (!p->report || now - p->last < PROGRESS_EVERY_S) return;
  p->last = now;
  st_log(ST_LOG_INFO, "checkpoint %s: %.1f of %.1f MB written (%.1f MB/s)", p->path,
         (double)p->written / 1e6, (double)p->total / 1e6,
         (double)p->written / 1e6 / (now - p->start));
}

/* Where the writer reads the owned states: a host snapshot, or the units' own buffers through
 * `staging` on the model's stream. */
typedef struct state_source {
  gpt_model *model;
  const ckpt_unit_snapshot *snapshot;
  float *staging;
} state_source;

/* Unit u's owned state `st` in the source. */
static const float *owned_state(const state_source *src, int u, int st) {
  if (src->snapshot) return src->snapshot[u].state[st];
  const unit *un = &src->model->units[u];
  const float *own[CKPT_STATE_COUNT] = {un->master, un->adam_m, un->adam_v};
  return own[st];
}

/* Streams `count` floats from `from` into tensor `index`, chunk by chunk. */
static st_status put_state(const state_source *src, safetensors_stream *stream, size_t index,
                           const float *from, int64_t count, save_progress *p) {
  for (int64_t done = 0; done < count; done += CKPT_CHUNK_ELEMENTS) {
    const int64_t n = count - done < CKPT_CHUNK_ELEMENTS ? count - done : CKPT_CHUNK_ELEMENTS;
    const size_t bytes = (size_t)n * sizeof(float);
    const float *chunk = from + done;
    if (src->staging) {
      ST_CHECK(stream_memcpy(&src->model->stream, src->staging, chunk, bytes));
      ST_CHECK(stream_sync(&src->model->stream));
      chunk = src->staging;
    }
    ST_CHECK(safetensors_stream_put(stream, index, (uint64_t)done * sizeof(float), chunk, bytes));
    progress_add(p, bytes);
  }
  return ST_OK;
}

/* Writes file f (this rank's): each piece's master, m and v. Pieces come sorted by parameter,
 * and the plan's parameters are the units' in order, so one cursor walks the units alongside. */
static st_status write_rank_file(state_source *src, const ckpt_manifest *plan, int f,
                                 const char *path, int report, deadline *stall) {
  gpt_model *m = src->model;
  ckpt_file_layout fl;
  safetensors_stream *stream = NULL;
  save_progress progress = {
      .stall = stall, .report = report, .path = path, .start = ckpt_seconds_now()};
  progress.last = progress.start;
  ST_CHECK(ckpt_file_layout_make(plan, f, &fl));
  st_status status = ST_OK;
  if (!src->snapshot) {
    status = mem_alloc((void **)&src->staging, (size_t)CKPT_CHUNK_ELEMENTS * sizeof(float),
                       MEM_HOST, MEM_WORKSPACE, NULL);
  }
  if (status == ST_OK) {
    status = safetensors_stream_open(&stream, path, fl.tensors, 3 * (size_t)fl.n, fl.meta,
                                     (size_t)fl.n + 1);
  }
  for (int i = 0; i < fl.n; i++) {
    progress.total += 3 * (uint64_t)(fl.pieces[i]->end - fl.pieces[i]->begin) * sizeof(float);
  }
  int u = 0, first = 0; /* unit u holds the plan's parameters [first, first + its count) */
  for (int i = 0; status == ST_OK && i < fl.n; i++) {
    const ckpt_piece *piece = fl.pieces[i];
    while (piece->param >= first + m->units[u].layout.count) first += m->units[u++].layout.count;
    const unit *un = &m->units[u];
    const int64_t at =
        un->layout.params[piece->param - first].offset + piece->begin - un->owned_begin;
    for (int st = 0; status == ST_OK && st < CKPT_STATE_COUNT; st++) {
      status = put_state(src, stream, 3 * (size_t)i + st, owned_state(src, u, st) + at,
                         piece->end - piece->begin, &progress);
    }
  }
  status = safetensors_stream_finish(stream, status);
  mem_free(src->staging);
  src->staging = NULL;
  ckpt_file_layout_free(&fl);
  return status;
}

st_status ckpt_save_begin(ckpt_save_job *job, const gpt_model *model, const ckpt_manifest *run,
                          const char *ckpt_dir, int keep) {
  int rank, size;
  job_world(&rank, &size);
  st_mesh_coords c = {.world_size = 1, .R = 1, .S = 1, .T = 1};
  if (model->par.mesh) ST_CHECK(st_mesh_get_coords(model->par.mesh, &c));
  memset(job, 0, sizeof *job);
  job->start = ckpt_seconds_now();
  job->keep = keep;
  job->report = rank == 0;
  job->mine.file = c.r == 0 ? c.s * c.T + c.t : -1;
  snprintf(job->dir, sizeof job->dir, "%s", ckpt_dir);
  snprintf(job->temp, sizeof job->temp, "%s/.step_%lld.tmp", ckpt_dir, (long long)run->step);
  snprintf(job->final, sizeof job->final, "%s/step_%lld", ckpt_dir, (long long)run->step);
  job->m = *run;
  job->m.params = NULL;
  job->m.files = NULL;
  job->m.pieces = NULL;
  job->m.data = NULL;
  st_status status = ckpt_manifest_plan(&job->m);
  if (status == ST_OK) status = ckpt_manifest_set_data(&job->m, run->dp_size, run->data[0]);
  if (rank == 0 && status == ST_OK) status = ckpt_dirs_prepare(ckpt_dir, job->temp);
  status = job_agree(status);
  if (status != ST_OK) {
    ckpt_manifest_free(&job->m);
    return status;
  }
  if (job->mine.file >= 0) {
    snprintf(job->path, sizeof job->path, "%s/%s", job->temp, job->m.files[job->mine.file].name);
  }
  return ST_OK;
}

void ckpt_save_write(ckpt_save_job *job, gpt_model *model, const ckpt_unit_snapshot *snapshot) {
  state_source src = {.model = model, .snapshot = snapshot};
  char what[CKPT_PATH_BYTES + 96];
  if (job->mine.file >= 0) {
    snprintf(what, sizeof what, "writing the checkpoint file %s", job->path);
  } else {
    snprintf(what, sizeof what, "this rank's part of the checkpoint of step %lld",
             (long long)job->m.step);
  }
  deadline d; /* a write stalled on a hung file system ends the rank, and so the job */
  st_status status = job_file_deadline_arm(&d, what);
  const int armed = status == ST_OK;
  const int delay_ms = atoi(env_get_string(ENV_CKPT_TEST_DELAY_MS));
  if (armed && job->delay_first) job_test_sleep_ms(delay_ms);
  if (armed && job->mine.file >= 0) {
    status = write_rank_file(&src, &job->m, job->mine.file, job->path, job->report, &d);
    deadline_extend(&d); /* the checksum reads the file back: as long again at most */
    if (status == ST_OK) status = sha256_file(job->path, job->mine.sha256, &job->mine.bytes);
  }
  if (!job->delay_first && status == ST_OK) job_test_sleep_ms(delay_ms);
  if (armed) deadline_disarm(&d);
  job->written = status;
  snprintf(job->written_error, sizeof job->written_error, "%s",
           status == ST_OK ? "" : st_last_error());
}

/* Rank 0, after every file is in the temporary directory: manifest, DONE, rename into place. */
static st_status finish_save(const ckpt_save_job *job) {
  ST_CHECK(ckpt_done_write(job->temp, &job->m));
  ST_CHECK(ckpt_dirs_publish(job->dir, job->temp, job->final, (long long)job->m.step));
  return ckpt_dirs_tidy(job->dir, job->keep, (long long)job->m.step);
}

st_status ckpt_save_commit(ckpt_save_job *job, uint64_t *total) {
  int rank, size;
  job_world(&rank, &size);
  *total = 0;
  ckpt_file_record *records = NULL; /* rank 0: every rank's file */
  st_status status = job->written;
  if (status != ST_OK) status = st_error(status, "%s", job->written_error);
  ST_CHECK_GOTO(job_agree(status), status, done);
  if (rank == 0) {
    status =
        mem_alloc((void **)&records, (size_t)size * sizeof *records, MEM_HOST, MEM_WORKSPACE, NULL);
  }
  ST_CHECK_GOTO(job_agree(status), status, done);
  if (size > 1) {
    MPI_Gather(&job->mine, (int)sizeof job->mine, MPI_BYTE, records, (int)sizeof job->mine,
               MPI_BYTE, 0, MPI_COMM_WORLD);
  } else {
    records[0] = job->mine;
  }
  if (rank == 0) {
    for (int i = 0; i < size; i++) {
      if (records[i].file < 0) continue;
      ckpt_file *f = &job->m.files[records[i].file];
      memcpy(f->sha256, records[i].sha256, sizeof f->sha256);
      f->bytes = records[i].bytes;
      *total += f->bytes;
    }
    char what[CKPT_PATH_BYTES + 32];
    snprintf(what, sizeof what, "completing the checkpoint %s", job->final);
    deadline d;
    status = job_file_deadline_arm(&d, what);
    if (status == ST_OK) {
      status = finish_save(job);
      deadline_disarm(&d);
    }
  }
  status = job_agree(status);
done:
  mem_free(records);
  ckpt_manifest_free(&job->m);
  return status;
}

st_status ckpt_save(gpt_model *model, const ckpt_manifest *run, const char *ckpt_dir, int keep,
                    char *saved, size_t saved_size) {
  ckpt_save_job *job = NULL; /* paths of 4 KiB each: not on the stack */
  st_status status =
      job_agree(mem_alloc((void **)&job, sizeof *job, MEM_HOST, MEM_WORKSPACE, NULL));
  if (status == ST_OK) status = ckpt_save_begin(job, model, run, ckpt_dir, keep);
  uint64_t total = 0;
  if (status == ST_OK) {
    ckpt_save_write(job, model, NULL);
    status = ckpt_save_commit(job, &total);
  }
  if (status == ST_OK && job->report) {
    const double seconds = ckpt_seconds_now() - job->start;
    st_log(ST_LOG_INFO, "checkpoint %s: %.1f MB in %d file%s, %.2f s (%.1f MB/s)", job->final,
           (double)total / 1e6, job->m.n_files, job->m.n_files == 1 ? "" : "s", seconds,
           (double)total / 1e6 / (seconds > 0 ? seconds : 1e-9));
  }
  if (status == ST_OK && saved) snprintf(saved, saved_size, "%s", job->final);
  mem_free(job);
  return status;
}
