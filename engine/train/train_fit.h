/* train_fit.h - the start-up memory check of `shardtrain train`: before the model allocates
 * anything, every rank compares the planner's prediction for the run (engine/plan/fit.h) with the
 * memory its device has, and a run that cannot fit stops on every rank with one line naming
 * the prediction, the limit and the cheapest change that fits.
 *
 * The limit of a rank: on a GPU, its free memory (cudaMemGetInfo) divided by the ranks of the
 * node that share that GPU; on the CPU, the host's available RAM (MemAvailable) divided by the
 * ranks on the node (MPI_Comm_split_type shared), since they all allocate from it.
 * ST_MEMORY_LIMIT_BYTES caps the memory found before that division. --no-fit-check skips it. */
#ifndef ST_ENGINE_TRAIN_TRAIN_FIT_H
#define ST_ENGINE_TRAIN_TRAIN_FIT_H

#include "engine/model/gpt_config.h"
#include "engine/plan/planner.h"
#include "engine/train/train_options.h"
#include "sharding/mesh.h"

/* The ranks of this node that draw on the same memory as this rank: all of the node's on the
 * CPU (host RAM), those on the same GPU otherwise. Collective over MPI_COMM_WORLD. */
st_status train_fit_ranks_sharing(const st_device *dev, int *sharers);

/* The planner's input for this run on this rank's device (mesh, stage, batch, dtypes, offload,
 * the device's compute copies, whether it saves checkpoints): what the check and the start-up
 * summary both predict from. */
st_status train_fit_plan_input(const train_options *o, const gpt_config *cfg, const st_mesh *mesh,
                               plan_input *in);

/* Collective over MPI_COMM_WORLD (every rank must call it). ST_OK when the run fits, the check
 * is off, or the memory cannot be read (a warning says so); ST_ERR_UNSUPPORTED with the line
 * above when it does not fit; ST_ERR_INVALID_ARG for a malformed ST_MEMORY_LIMIT_BYTES. The
 * verdict is this rank's: agree on it over the job (job_agree). */
st_status train_fit_check(const train_options *o, const gpt_config *cfg, const st_mesh *mesh);

#endif /* ST_ENGINE_TRAIN_TRAIN_FIT_H */
