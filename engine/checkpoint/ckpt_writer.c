/* ckpt_writer.c - see ckpt_writer.h. */
#include "engine/checkpoint/ckpt_writer.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ckpt_save.h"
#include "engine/io/job_agree.h"

struct ckpt_writer {
  gpt_model *model;
  int background;
  /* Background, on a writer rank: every unit's owned master, m and v, in one buffer. */
  float *snapshot_data;
  ckpt_unit_snapshot *snapshot; /* per unit, its three arrays in snapshot_data */
  ckpt_save_job *job;           /* the save in flight, or NULL */
  pthread_t thread;
  int threaded;       /* job's write runs in `thread` (else it ran inline) */
  atomic_int written; /* job's write has finished */
  double begin_s;     /* what the save in flight held the steps up to begin, snapshot included */
  double write_s;     /* how long this rank's write took */
  char saved[CKPT_PATH_BYTES];
};

/* Allocates the snapshot: each unit's master, m and v in turn, owned_numel floats each. Zeroed,
 * so that its pages are in place before the first save needs them (on the CPU, faulting in a
 * d12's 1.5 GB took that save 3 s; copying into them then takes 0.3 s). */
static st_status allocate_snapshot(ckpt_writer *w) {
  const gpt_model *m = w->model;
  int64_t numel = 0;
  for (int u = 0; u < m->n_units; u++) numel += CKPT_STATE_COUNT * m->units[u].owned_numel;
  ST_CHECK(mem_alloc((void **)&w->snapshot, (size_t)m->n_units * sizeof *w->snapshot, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc_zeroed((void **)&w->snapshot_data, (size_t)numel * sizeof(float), MEM_PINNED,
                            MEM_WORKSPACE, m->dev));
  float *at = w->snapshot_data;
  for (int u = 0; u < m->n_units; u++) {
    for (int st = 0; st < CKPT_STATE_COUNT; st++, at += m->units[u].owned_numel) {
      w->snapshot[u].state[st] = at;
    }
  }
  return ST_OK;
}

st_status ckpt_writer_create(ckpt_writer **out, gpt_model *model, int background) {
  ckpt_writer *w = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&w, sizeof *w, MEM_HOST, MEM_WORKSPACE, NULL));
  w->model = model;
  w->background = background;
  /* Only the first replica's ranks write files (checkpoint.h). */
  st_mesh_coords c = {.r = 0};
  st_status status = model->par.mesh ? st_mesh_get_coords(model->par.mesh, &c) : ST_OK;
  if (status == ST_OK && background && c.r == 0) status = allocate_snapshot(w);
  if (status != ST_OK) {
    ckpt_writer_destroy(w);
    return status;
  }
  *out = w;
  return ST_OK;
}

const char *ckpt_writer_saved(const ckpt_writer *w) { return w->saved; }

static void *write_in_background(void *arg) {
  ckpt_writer *w = arg;
  const double start = ckpt_seconds_now();
  ckpt_save_write(w->job, w->model, w->snapshot);
  w->write_s = ckpt_seconds_now() - start;
  atomic_store(&w->written, 1);
  return NULL;
}

/* Starts the write in a thread that leaves the run's stop signals (stop_request.h) to the
 * main thread; where no thread can be started, writes inline. */
static void start_write(ckpt_writer *w) {
  atomic_store(&w->written, 0);
  sigset_t stop, previous;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop, &previous);
  w->threaded = pthread_create(&w->thread, NULL, write_in_background, w) == 0;
  pthread_sigmask(SIG_SETMASK, &previous, NULL);
  if (!w->threaded) write_in_background(w);
}

/* Copies every unit's owned master, m and v into the snapshot (a writer rank's), on the compute
 * stream: the step has ended (gpt_step_end), so no stream of the model still writes them. */
static st_status take_snapshot(ckpt_writer *w) {
  gpt_model *m = w->model;
  if (!w->snapshot) return ST_OK;
  for (int u = 0; u < m->n_units; u++) {
    const unit *un = &m->units[u];
    const float *own[CKPT_STATE_COUNT] = {un->master, un->adam_m, un->adam_v};
    for (int st = 0; st < CKPT_STATE_COUNT; st++) {
      ST_CHECK(stream_memcpy(&m->stream, w->snapshot[u].state[st], own[st],
                             (size_t)un->owned_numel * sizeof(float)));
    }
  }
  return stream_sync(&m->stream);
}

/* Every rank's write has finished (collective: one rank's verdict is not enough). */
static int every_write_done(ckpt_writer *w) {
  int done = atomic_load(&w->written), rank, size;
  job_world(&rank, &size);
  if (size > 1) MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return done;
}

static void drop_job(ckpt_writer *w) {
  mem_free(w->job);
  w->job = NULL;
}

st_status ckpt_writer_poll(ckpt_writer *w, int wait, long long steps_done) {
  if (!w->job || (!wait && !every_write_done(w))) return ST_OK;
  const double start = ckpt_seconds_now();
  if (w->threaded) pthread_join(w->thread, NULL);
  w->threaded = 0;
  ckpt_save_job *job = w->job;
  uint64_t total = 0;
  const st_status status = ckpt_save_commit(job, &total);
  const double held = w->begin_s + ckpt_seconds_now() - start;
  int rank, size;
  job_world(&rank, &size);
  if (status == ST_OK) snprintf(w->saved, sizeof w->saved, "%s", job->final);
  if (status == ST_OK && rank == 0) {
    const double mb = (double)job->mine.bytes / 1e6;
    st_log(ST_LOG_INFO,
           "checkpoint %s: %.1f MB in %d file%s, written in the background (rank 0's %.1f MB in "
           "%.2f s, %.1f MB/s), committed after step %lld; the steps waited %.2f s for it (%.2f "
           "s to begin it with the snapshot)",
           job->final, (double)total / 1e6, job->m.n_files, job->m.n_files == 1 ? "" : "s", mb,
           w->write_s, mb / (w->write_s > 0 ? w->write_s : 1e-9), steps_done, held, w->begin_s);
  }
  drop_job(w);
  return status;
}

st_status ckpt_writer_save(ckpt_writer *w, const ckpt_manifest *run, const char *ckpt_dir,
                           int keep) {
  ST_CHECK(ckpt_writer_poll(w, 1, (long long)run->step));
  if (!w->background) {
    return ckpt_save(w->model, run, ckpt_dir, keep, w->saved, sizeof w->saved);
  }
  st_status status =
      job_agree(mem_alloc((void **)&w->job, sizeof *w->job, MEM_HOST, MEM_WORKSPACE, NULL));
  if (status == ST_OK) status = ckpt_save_begin(w->job, w->model, run, ckpt_dir, keep);
  if (status != ST_OK) {
    drop_job(w);
    return status;
  }
  w->job->report = 0; /* the thread's lines would land among the steps' */
  w->job->delay_first = 1;
  status = job_agree(take_snapshot(w));
  if (status != ST_OK) {
    ckpt_manifest_free(&w->job->m);
    drop_job(w);
    return status;
  }
  w->begin_s = ckpt_seconds_now() - w->job->start;
  start_write(w);
  return ST_OK;
}

void ckpt_writer_destroy(ckpt_writer *w) {
  if (!w) return;
  if (w->threaded) pthread_join(w->thread, NULL);
  if (w->job) ckpt_manifest_free(&w->job->m);
  mem_free(w->job);
  mem_free(w->snapshot_data);
  mem_free(w->snapshot);
  mem_free(w);
}
