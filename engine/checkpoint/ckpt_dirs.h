/* ckpt_dirs.h - the checkpoint directory's layout on disk, for the save (checkpoint.h):
 * complete checkpoints are step_<N> holding DONE; a save in progress is .step_<N>.tmp, which a
 * crash may leave behind and the next save removes; a checkpoint replaced by one of the same
 * step is moved aside as .step_<N>.old while the new one is renamed in. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_DIRS_H
#define ST_ENGINE_CHECKPOINT_CKPT_DIRS_H

#include "shardtrain.h"

/* The N of a directory entry named step_<N> (decimal digits), or -1. */
long long ckpt_step_of_name(const char *name);
/* The same of the last component of a path ("out/step_3/" gives 3). */
long long ckpt_step_of_dir(const char *path);

/* Creates ckpt_dir if needed, removes what crashed saves left (.step_*.tmp) and creates the
 * save's temporary directory `temp`. */
st_status ckpt_dirs_prepare(const char *ckpt_dir, const char *temp);

/* Renames the filled temporary directory `temp` to `final` (step `step`), replacing a
 * checkpoint of the same step already there (a run resumed from it), and syncs ckpt_dir. */
st_status ckpt_dirs_publish(const char *ckpt_dir, const char *temp, const char *final,
                            long long step);

/* After step `saved` is in place: deletes the oldest complete checkpoints until `keep` remain
 * (keep 0: none), counting only those up to `saved`. */
st_status ckpt_dirs_tidy(const char *ckpt_dir, int keep, long long saved);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_DIRS_H */
