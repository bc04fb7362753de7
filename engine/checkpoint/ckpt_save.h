/* ckpt_save.h - one checkpoint save in its three phases, shared by the blocking save
 * (checkpoint.h) and the background one (ckpt_writer.h):
 *   begin, collective: the manifest's piece table planned, rank 0 makes the temporary directory;
 *   write, on each rank alone and without MPI (a thread may run it): a writer rank (of the first
 *     replica, r = 0) streams its file from its owned master, m and v, then checksums it;
 *   commit, collective: every rank's verdict agreed and the files' records gathered; rank 0
 *     writes the manifest and DONE, renames the directory into place and deletes the
 *     checkpoints beyond `keep` (checkpoint.h tells the order and why it is crash-safe). */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_SAVE_H
#define ST_ENGINE_CHECKPOINT_CKPT_SAVE_H

#include <stdint.h>

#include "engine/checkpoint/ckpt_manifest.h"
#include "engine/model/gpt.h"

#define CKPT_PATH_BYTES 4200

/* A file's record as the writers send it to rank 0. */
typedef struct ckpt_file_record {
  char sha256[SHA256_HEX_SIZE];
  uint64_t bytes;
  int32_t file; /* -1: this rank writes none */
} ckpt_file_record;

typedef struct ckpt_save_job {
  ckpt_manifest m; /* the run's fields and the piece table */
  char dir[CKPT_PATH_BYTES], temp[CKPT_PATH_BYTES], final[CKPT_PATH_BYTES];
  char path[CKPT_PATH_BYTES + 64]; /* this rank's file */
  int keep;
  int report;            /* log the write's progress (begin: on rank 0) */
  int delay_first;       /* ST_CKPT_TEST_DELAY_MS before the write, not after: a background save's,
                          * so that the steps after it run before it reads its snapshot */
  ckpt_file_record mine; /* file -1: a replica's rank, which writes none */
  st_status written;     /* the write's verdict */
  char written_error[1024]; /* and its st_last_error(), for the thread that commits */
  double start;             /* when the save began (ckpt_seconds_now) */
} ckpt_save_job;

/* Where a unit's owned master, m and v are copied to: a host snapshot of them. */
typedef struct ckpt_unit_snapshot {
  float *state[CKPT_STATE_COUNT];
} ckpt_unit_snapshot;

/* Seconds of CLOCK_MONOTONIC. */
double ckpt_seconds_now(void);

/* Collective. Plans `run` (the run's fields of the manifest, as for ckpt_save) into job->m and
 * prepares ckpt_dir/.step_<step>.tmp. On failure the job holds nothing to free. */
st_status ckpt_save_begin(ckpt_save_job *job, const gpt_model *model, const ckpt_manifest *run,
                          const char *ckpt_dir, int keep);

/* Writes this rank's file and sets job->written (with job->written_error). The states are read
 * from `snapshot` when given (one entry per unit), else from the units' own buffers through a
 * host staging chunk on the model's stream. */
void ckpt_save_write(ckpt_save_job *job, gpt_model *model, const ckpt_unit_snapshot *snapshot);

/* Collective: completes the save whose every rank has written (or returns, on every rank, the
 * first failing rank's error, leaving the .tmp directory). *total receives the bytes of every
 * file (rank 0; 0 elsewhere). Frees the arrays of job->m in every case. */
st_status ckpt_save_commit(ckpt_save_job *job, uint64_t *total);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_SAVE_H */
