/* output_paths.h - the files and the checkpoint directory `shardtrain train` will write (and the
 * offline tools' outputs), checked before anything is built or trained, so that a path the run
 * cannot write fails in seconds rather than after the last step. A file check only looks (stat,
 * access): it never creates, opens or truncates a file, so an existing export stays byte for byte
 * what it was until the run replaces it. The checkpoint directory is created (empty) when missing.
 */
#ifndef ST_ENGINE_TRAIN_OUTPUT_PATHS_H
#define ST_ENGINE_TRAIN_OUTPUT_PATHS_H

#include "engine/train/train_options.h"
#include "shardtrain.h"

/* ST_OK when the run will be able to write `path`: it is not a directory, its directory exists
 * and is writable (whole files go to a temporary file there, renamed into place), and its name
 * fits the file system (with the temporary name's suffix). A file the run appends to
 * (`appends`, the metrics) must, if it exists, be writable itself. Failures are
 * ST_ERR_INVALID_ARG with a message naming `what` (the flag, "--export", or the argument) and
 * the path. */
st_status output_path_check(const char *what, const char *path, int appends);

/* The same for a directory to be made whole under a temporary name (reshard's DST): its parent
 * exists and is writable and its name fits. Whether it exists already is the caller's rule. */
st_status output_dir_check(const char *what, const char *path);

/* Checks --export, --metrics, --save-init and --ckpt-dir on world rank `writer` (the rank that
 * writes them; on a cluster the others may not even see its file system) and gives its verdict to
 * every rank, so that each fails with the same message. Collective over MPI_COMM_WORLD. */
st_status output_paths_check_train(const train_options *o, int writer);

#endif /* ST_ENGINE_TRAIN_OUTPUT_PATHS_H */
