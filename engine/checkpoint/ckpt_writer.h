/* ckpt_writer.h - a training run's checkpoint saves (checkpoint.h), blocking or in the
 * background (--ckpt-async).
 *
 * In the background, a save holds the steps up while it begins (the temporary directory) and
 * each writer rank (of the first replica) copies its owned master, m and v into a host
 * snapshot; a thread then writes and checksums the rank's file from the snapshot (file I/O
 * only, no MPI) while training goes on. The save is committed (manifest, DONE, rename into
 * place, --keep's deletions: rank 0's file system work, which the steps wait for) at the first
 * step boundary where every rank's file is written, which the ranks agree on with one small
 * all-reduce per step while a save is in flight; the next save and the end of the run first
 * wait for it. Until committed, a checkpoint is a .step_<N>.tmp directory that --resume never
 * reads, so a crash, or a failed step, in between leaves it there and the earlier checkpoints
 * as they were. The snapshot (host memory, pinned on a GPU; the planner counts it in the
 * workspace) is allocated with the writer and kept for the run. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_WRITER_H
#define ST_ENGINE_CHECKPOINT_CKPT_WRITER_H

#include <stddef.h>

#include "engine/checkpoint/ckpt_manifest.h"
#include "engine/model/gpt.h"

typedef struct ckpt_writer ckpt_writer;

/* A writer of `model`'s checkpoints; background 0 saves blocking (ckpt_save). In the background,
 * a writer rank's snapshot is allocated here: create it before the steps whose memory counts. */
st_status ckpt_writer_create(ckpt_writer **out, gpt_model *model, int background);

/* Collective. Saves the run at run->step, as ckpt_save does, once the save in flight, if any,
 * is committed; blocking, the save is complete on return. */
st_status ckpt_writer_save(ckpt_writer *w, const ckpt_manifest *run, const char *ckpt_dir,
                           int keep);

/* Collective, at a step boundary after `steps_done` steps: commits the save in flight if every
 * rank's file is written, or, with `wait`, once they are. Does nothing when no save is in
 * flight. */
st_status ckpt_writer_poll(ckpt_writer *w, int wait, long long steps_done);

/* The directory of the last checkpoint committed, or "". */
const char *ckpt_writer_saved(const ckpt_writer *w);

/* Waits for a write in progress and frees the writer; a save not committed stays a .tmp
 * directory. NULL is allowed. */
void ckpt_writer_destroy(ckpt_writer *w);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_WRITER_H */
