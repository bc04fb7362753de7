/* checkpoint.h - saving a training run's state as a crash-safe sharded checkpoint and
 * restoring it on any mesh (ckpt_manifest.h has the layout).
 *
 * Saving: step_<N> is written under the temporary name .step_<N>.tmp: each rank of the first
 * replica (r = 0) streams its pieces of the fp32 master weights and Adam's moments into its own
 * file (temporary name, fsync, rename); rank 0 then writes the manifest with every file's size
 * and SHA-256, then DONE, syncs the directory and renames it into place. A crash at any point
 * leaves every earlier checkpoint as it was and at worst a .tmp directory, which the next save
 * removes and which a resume never reads. Only then are older checkpoints beyond `keep`
 * deleted. The checkpoint directory must be visible to every rank (a shared file system).
 * ckpt_writer.h runs the same save in the background, from a host snapshot of the states.
 *
 * Restoring: every rank reads only the pieces that intersect its owned range on its own mesh
 * and stage, whatever mesh and stage wrote them; the parameters are the master rounded to the
 * param dtype, exactly what training holds, so a run resumed on its own mesh is bit-identical
 * to one that never stopped. Both are collective over the job (MPI_COMM_WORLD): every rank
 * returns the same status, with the first failing rank's message. */
#ifndef ST_ENGINE_CHECKPOINT_CHECKPOINT_H
#define ST_ENGINE_CHECKPOINT_CHECKPOINT_H

#include <stddef.h>

#include "engine/checkpoint/ckpt_source.h"
#include "engine/model/gpt.h"

/* Saves `model` as ckpt_dir/step_<run->step>. `run` holds the run's fields of the manifest
 * (step, model, cfg, mesh, zero, dtypes, loss scale, micro-batch, hyperparameters, seed,
 * dp_size and data); run->data[0] is recorded for every one of the dp_size ranks, since every
 * dp rank's next global batch starts at the same position (token_data.h). The piece table and
 * checksums are filled here. keep > 0 deletes the oldest complete
 * checkpoints until `keep` remain of those up to this step (later ones, left by a run that this
 * one branched off by resuming an earlier step, are not counted nor deleted). Rank 0 logs the
 * bytes written and the rate. `saved` receives the step directory's path. */
st_status ckpt_save(gpt_model *model, const ckpt_manifest *run, const char *ckpt_dir, int keep,
                    char *saved, size_t saved_size);

/* Claims ckpt_dir, which exists, for this job (one process of it, at start-up, before looking
 * for checkpoints there): an exclusive lock on ckpt_dir/.lock, held through *lock_fd until it
 * is closed or the process ends, so that no two jobs save into one directory (each would remove
 * the other's saves in progress and replace its checkpoints); then a checkpoint that a crash
 * left aside while it was being replaced (.step_<N>.old) is put back. A directory another job
 * holds is ST_ERR_INVALID_ARG naming the holder; a file system without locks only warns. */
st_status ckpt_dir_claim(const char *ckpt_dir, int *lock_fd);

/* The claim's record in ckpt_dir/.lock ("pid P on HOST, TIME"), its first line, into `out`; ""
 * where there is none to read (no such file, or a file system without locks left it empty):
 * the ranks compare what they read with what the claiming rank wrote, to find that they all
 * see the same directory. */
void ckpt_dir_read_claim(const char *ckpt_dir, char *out, size_t size);

/* The newest complete checkpoint (holding DONE) under ckpt_dir: *found is 0 when there is
 * none; a ckpt_dir that does not exist is ST_ERR_INVALID_ARG. */
st_status ckpt_find_latest(const char *ckpt_dir, char *out, size_t size, int *found);

/* Loads the master weights, Adam's moments and the parameters of `model` from `src`: checks
 * the model config, verifies every file's checksum (each file by one rank), and reads. */
st_status ckpt_restore(gpt_model *model, ckpt_source *src);

#endif /* ST_ENGINE_CHECKPOINT_CHECKPOINT_H */
