/* checkpoint.c - the collective save and restore of checkpoint.h. */
#include "engine/checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/io/file_io.h"
#include "engine/io/job_agree.h"
#include "engine/io/safetensors.h"
#include "engine/plan/planner.h"

#define PATH_BYTES 4200

/* The memory planner, a layer below that cannot include this package, counts
 * write_rank_file's staging as PLAN_CKPT_STAGING_BYTES. */
_Static_assert((int64_t)sizeof(float) * CKPT_CHUNK_ELEMENTS == PLAN_CKPT_STAGING_BYTES,
               "a save's staging is not what the memory planner counts (PLAN_CKPT_STAGING_BYTES)");

static void world(int *rank, int *size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  *rank = 0;
  *size = 1;
  if (!initialized) return;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

static st_status model_coords(const gpt_model *m, st_mesh_coords *c) {
  if (m->par.mesh) return st_mesh_get_coords(m->par.mesh, c);
  *c = (st_mesh_coords){.world_size = 1, .R = 1, .S = 1, .T = 1};
  return ST_OK;
}

/* ---- directories -------------------------------------------------------------------------- */

static int is_complete(const char *ckpt_dir, const char *name) {
  char path[PATH_BYTES];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s/DONE", ckpt_dir, name);
  return stat(path, &st) == 0;
}

/* The step of a directory entry named step_<N>, or -1. */
static long long step_of(const char *name) {
  if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
  char *end;
  errno = 0;
  long long step = strtoll(name + 5, &end, 10);
  return *end || errno || step < 0 ? -1 : step;
}

/* The complete checkpoints' steps, ascending (at most `capacity`); returns the count. */
static int complete_steps(const char *ckpt_dir, long long *steps, int capacity) {
  DIR *d = opendir(ckpt_dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < capacity) {
    long long step = step_of(e->d_name);
    if (step >= 0 && is_complete(ckpt_dir, e->d_name)) steps[n++] = step;
  }
  closedir(d);
  for (int i = 1; i < n; i++) { /* insertion sort: a directory holds few checkpoints */
    long long x = steps[i];
    int j = i;
    for (; j > 0 && steps[j - 1] > x; j--) steps[j] = steps[j - 1];
    steps[j] = x;
  }
  return n;
}

#define MAX_LISTED 4096

st_status ckpt_find_latest(const char *ckpt_dir, char *out, size_t size, int *found) {
  struct stat st;
  if (stat(ckpt_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: no such directory", ckpt_dir);
  }
  long long *steps = NULL;
  ST_CHECK(mem_alloc((void **)&steps, MAX_LISTED * sizeof *steps, MEM_HOST, MEM_WORKSPACE, NULL));
  int n = complete_steps(ckpt_dir, steps, MAX_LISTED);
  *found = n > 0;
  if (n) snprintf(out, size, "%s/step_%lld", ckpt_dir, steps[n - 1]);
  mem_free(steps);
  return ST_OK;
}

/* After step `saved` is in place: deletes the oldest complete checkpoints until `keep` remain
 * (keep 0: none), counting only those up to `saved`. Checkpoints of later steps are left from a
 * run that this one, resumed from an earlier step, has branched off: they are not this run's to
 * delete (counting them would delete the one just written), but --resume would pick the newest,
 * so a warning says so. */
static st_status tidy_after_save(const char *ckpt_dir, int keep, long long saved) {
  long long *steps = NULL;
  ST_CHECK(mem_alloc((void **)&steps, MAX_LISTED * sizeof *steps, MEM_HOST, MEM_WORKSPACE, NULL));
  const int listed = complete_steps(ckpt_dir, steps, MAX_LISTED);
  if (listed > 0 && steps[listed - 1] > saved) {
    st_log(ST_LOG_WARN,
           "%s/step_%lld is newer than the step_%lld just saved (another run's): --resume "
           "continues from the newest; remove it, or use --resume-from",
           ckpt_dir, steps[listed - 1], saved);
  }
  int n = listed;
  while (n > 0 && steps[n - 1] > saved) n--;
  st_status status = ST_OK;
  char path[PATH_BYTES];
  int removed = 0;
  for (int i = 0; keep > 0 && status == ST_OK && i + keep < n; i++, removed++) {
    snprintf(path, sizeof path, "%s/step_%lld", ckpt_dir, steps[i]);
    status = file_remove_flat_dir(path);
  }
  mem_free(steps);
  return status == ST_OK && removed ? file_sync_directory(ckpt_dir, ckpt_dir) : status;
}

/* Removes what crashed saves left (.step_*.tmp) and creates this save's temporary directory. */
static st_status prepare_dirs(const char *ckpt_dir, const char *temp) {
  if (mkdir(ckpt_dir, 0777) != 0 && errno != EEXIST) {
    return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot create: %s", ckpt_dir, strerror(errno));
  }
  DIR *d = opendir(ckpt_dir);
  if (!d) return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot open: %s", ckpt_dir, strerror(errno));
  struct dirent *e;
  char path[PATH_BYTES];
  st_status status = ST_OK;
  while ((e = readdir(d)) != NULL && status == ST_OK) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, ".step_", 6) == 0 && len > 4 &&
        strcmp(e->d_name + len - 4, ".tmp") == 0) {
      snprintf(path, sizeof path, "%s/%s", ckpt_dir, e->d_name);
      status = file_remove_flat_dir(path);
    }
  }
  closedir(d);
  ST_CHECK(status);
  if (mkdir(temp, 0777) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot create: %s", temp, strerror(errno));
  }
  return ST_OK;
}

/* ---- saving ------------------------------------------------------------------------------- */

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0's account of its own file while it is written: a line every few seconds, so a long
 * save shows how far it is and how fast it goes. */
typedef struct save_progress {
  int report;
  const char *path;
  uint64_t total, written;
  double start, last;
} save_progress;

#define PROGRESS_EVERY_S 2.0

static void progress_add(save_progress *p, size_t bytes) {
  p->written += bytes;
  const double now = seconds_now();
  if (!p->report || now - p->last < PROGRESS_EVERY_S) return;
  p->last = now;
  st_log(ST_LOG_INFO, "checkpoint %s: %.1f of %.1f MB written (%.1f MB/s)", p->path,
         (double)p->written / 1e6, (double)p->total / 1e6,
         (double)p->written / 1e6 / (now - p->start));
}

/* Streams `count` floats of device memory `from` into tensor `index`, chunk by chunk. */
static st_status put_state(gpt_model *m, safetensors_stream *stream, size_t index,
                           const float *from, int64_t count, float *staging, save_progress *p) {
  for (int64_t done = 0; done < count; done += CKPT_CHUNK_ELEMENTS) {
    const int64_t n = count - done < CKPT_CHUNK_ELEMENTS ? count - done : CKPT_CHUNK_ELEMENTS;
    const size_t bytes = (size_t)n * sizeof(float);
    ST_CHECK(stream_memcpy(&m->stream, staging, from + done, bytes));
    ST_CHECK(stream_sync(&m->stream));
    ST_CHECK(safetensors_stream_put(stream, index, (uint64_t)done * sizeof(float), staging, bytes));
    progress_add(p, bytes);
  }
  return ST_OK;
}

/* Writes file f (this rank's): each piece's master, m and v copied from the device and put.
 * Pieces come sorted by parameter, and the plan's parameters are the units' in order, so one
 * cursor walks the units alongside. */
static st_status write_rank_file(gpt_model *m, const ckpt_manifest *plan, int f, const char *path,
                                 int report) {
  ckpt_file_layout fl;
  float *staging = NULL;
  safetensors_stream *stream = NULL;
  save_progress progress = {.report = report, .path = path, .start = seconds_now()};
  progress.last = progress.start;
  ST_CHECK(ckpt_file_layout_make(plan, f, &fl));
  st_status status = mem_alloc((void **)&staging, (size_t)CKPT_CHUNK_ELEMENTS * sizeof(float),
                               MEM_HOST, MEM_WORKSPACE, NULL);
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
    const float *state[CKPT_STATE_COUNT] = {un->master, un->adam_m, un->adam_v};
    for (int st = 0; status == ST_OK && st < CKPT_STATE_COUNT; st++) {
      status = put_state(m, stream, 3 * (size_t)i + st, state[st] + at, piece->end - piece->begin,
                         staging, &progress);
    }
  }
  status = safetensors_stream_finish(stream, status);
  mem_free(staging);
  ckpt_file_layout_free(&fl);
  return status;
}

/* A file's record as the writers send it to rank 0. */
typedef struct file_record {
  char sha256[SHA256_HEX_SIZE];
  uint64_t bytes;
  int32_t file; /* -1: this rank wrote nothing */
} file_record;

/* Rank 0, after every file is in the temporary directory: manifest, DONE, rename into place. */
static st_status finish_save(const ckpt_manifest *m, const char *temp, const char *final,
                             const char *ckpt_dir) {
  char path[PATH_BYTES];
  ST_CHECK(file_path_join(path, sizeof path, temp, "manifest.json"));
  ST_CHECK(ckpt_manifest_write(m, path));
  ST_CHECK(file_path_join(path, sizeof path, temp, "DONE"));
  atomic_file done;
  ST_CHECK(atomic_file_create(&done, path));
  char text[64];
  int n = snprintf(text, sizeof text, "step %lld\n", (long long)m->step);
  ST_CHECK(atomic_file_finish(&done, atomic_file_write(&done, text, (size_t)n)));
  /* A checkpoint of the same step already there (a run resumed from it) is replaced: moved
   * aside, the new one renamed in, the old one removed. */
  snprintf(path, sizeof path, "%s/.step_%lld.old", ckpt_dir, (long long)m->step);
  struct stat st;
  int replacing = stat(final, &st) == 0;
  ST_CHECK(file_remove_flat_dir(path));
  if (replacing && rename(final, path) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot move aside: %s", final, strerror(errno));
  }
  if (rename(temp, final) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot rename into place: %s", final, strerror(errno));
  }
  ST_CHECK(file_sync_directory(ckpt_dir, final));
  return replacing ? file_remove_flat_dir(path) : ST_OK;
}

st_status ckpt_save(gpt_model *model, const ckpt_manifest *run, const char *ckpt_dir, int keep,
                    char *saved, size_t saved_size) {
  int rank, size;
  world(&rank, &size);
  st_mesh_coords c;
  ST_CHECK(model_coords(model, &c));
  char temp[PATH_BYTES], final[PATH_BYTES], path[PATH_BYTES + 64];
  snprintf(temp, sizeof temp, "%s/.step_%lld.tmp", ckpt_dir, (long long)run->step);
  snprintf(final, sizeof final, "%s/step_%lld", ckpt_dir, (long long)run->step);
  const double start = seconds_now();
  file_record *records = NULL; /* rank 0: every rank's file */
  ckpt_manifest m = *run;
  m.params = NULL;
  m.files = NULL;
  m.pieces = NULL;
  m.data = NULL;
  st_status status = ckpt_manifest_plan(&m);
  if (status == ST_OK) status = ckpt_manifest_set_data(&m, run->dp_size, run->data[0]);
  if (rank == 0 && status == ST_OK) status = prepare_dirs(ckpt_dir, temp);
  ST_CHECK_GOTO(job_agree(status), status, done);

  file_record mine = {.file = -1};
  if (c.r == 0) {
    mine.file = c.s * c.T + c.t;
    snprintf(path, sizeof path, "%s/%s", temp, m.files[mine.file].name);
    status = write_rank_file(model, &m, mine.file, path, rank == 0);
    if (status == ST_OK) status = sha256_file(path, mine.sha256, &mine.bytes);
  }
  const int delay_ms = atoi(env_get_string(ENV_CKPT_TEST_DELAY_MS));
  if (delay_ms > 0 && status == ST_OK) usleep((useconds_t)delay_ms * 1000);
  ST_CHECK_GOTO(job_agree(status), status, done);

  if (rank == 0) {
    status =
        mem_alloc((void **)&records, (size_t)size * sizeof *records, MEM_HOST, MEM_WORKSPACE, NULL);
  }
  ST_CHECK_GOTO(job_agree(status), status, done);
  if (size > 1) {
    MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, records, (int)sizeof mine, MPI_BYTE, 0,
               MPI_COMM_WORLD);
  } else {
    records[0] = mine;
  }
  uint64_t total = 0;
  if (rank == 0) {
    for (int i = 0; i < size; i++) {
      if (records[i].file < 0) continue;
      ckpt_file *f = &m.files[records[i].file];
      memcpy(f->sha256, records[i].sha256, sizeof f->sha256);
      f->bytes = records[i].bytes;
      total += f->bytes;
    }
    status = finish_save(&m, temp, final, ckpt_dir);
    if (status == ST_OK) status = tidy_after_save(ckpt_dir, keep, (long long)m.step);
  }
  ST_CHECK_GOTO(job_agree(status), status, done);
  if (rank == 0) {
    const double seconds = seconds_now() - start;
    st_log(ST_LOG_INFO, "checkpoint %s: %.1f MB in %d file%s, %.2f s (%.1f MB/s)", final,
           (double)total / 1e6, m.n_files, m.n_files == 1 ? "" : "s", seconds,
           (double)total / 1e6 / (seconds > 0 ? seconds : 1e-9));
  }
  if (saved) snprintf(saved, saved_size, "%s", final);
done:
  mem_free(records);
  ckpt_manifest_free(&m);
  return status;
}

/* ---- restoring ---------------------------------------------------------------------------- */

static st_status verify_share(const ckpt_source *src) {
  int rank, size;
  world(&rank, &size);
  const ckpt_manifest *m = ckpt_source_manifest(src);
  for (int f = rank; f < m->n_files; f += size) ST_CHECK(ckpt_source_verify(src, f));
  return ST_OK;
}

/* Reads unit u's owned range of every parameter from the checkpoint, chunk by chunk. */
static st_status restore_unit(gpt_model *m, int u, ckpt_source *src, float *buf[3]) {
  unit *un = &m->units[u];
  const unit_layout *l = &un->layout;
  const int64_t owned_end = un->owned_begin + un->owned_numel;
  for (int k = 0; k < l->count; k++) {
    const unit_param *p = &l->params[k];
    const int64_t lo = p->offset > un->owned_begin ? p->offset : un->owned_begin;
    const int64_t hi = p->offset + p->numel < owned_end ? p->offset + p->numel : owned_end;
    char name[CKPT_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", m->prefixes[u], p->name);
    for (int64_t at = lo; at < hi; at += CKPT_CHUNK_ELEMENTS) {
      const int64_t n = hi - at < CKPT_CHUNK_ELEMENTS ? hi - at : CKPT_CHUNK_ELEMENTS;
      for (int st = 0; st < CKPT_STATE_COUNT; st++) {
        ST_CHECK(
            ckpt_source_read(src, (ckpt_state)st, name, p, l->T, l->t, at - p->offset, n, buf[st]));
      }
      ST_CHECK(unit_restore_owned(un, at, n, buf[0], buf[1], buf[2]));
    }
  }
  return ST_OK;
}

static st_status restore_local(gpt_model *m, ckpt_source *src) {
  float *buf[3] = {NULL, NULL, NULL};
  st_status status = ST_OK;
  for (int i = 0; i < 3 && status == ST_OK; i++) {
    status = mem_alloc((void **)&buf[i], (size_t)CKPT_CHUNK_ELEMENTS * sizeof(float), MEM_HOST,
                       MEM_WORKSPACE, NULL);
  }
  for (int u = 0; u < m->n_units && status == ST_OK; u++) status = restore_unit(m, u, src, buf);
  for (int i = 2; i >= 0; i--) mem_free(buf[i]);
  return status;
}

st_status ckpt_restore(gpt_model *m, ckpt_source *src) {
  ST_CHECK(job_agree(ckpt_source_check_model(src, &m->cfg)));
  ST_CHECK(job_agree(verify_share(src)));
  ST_CHECK(job_agree(restore_local(m, src)));
  /* Collective over each shard group (stages 1-2 gather the restored shards). */
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_publish(&m->units[u]));
  return ST_OK;
}
