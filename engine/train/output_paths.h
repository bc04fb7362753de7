/* output_paths.h - the files and the checkpoint directory `shardtrain train` will write (and the
 * offline tools' outputs), checked before anything is built or trained, so that a path the run
 * cannot write fails in seconds rather than after the last step. A file check only looks (stat,
 * access): it never creates, opens or truncates a file, so an existing export stays byte for byte
 * what it was until the run replaces it. The checkpoint directory is created (empty) when missing,
 * before the files are checked, which may lie in it.
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

/* Whether a and b name the same file: by identity (st_dev, st_ino) when both exist, else by
 * their resolved paths (symbolic links and "." followed through the part that exists). */
int output_same_file(const char *a, const char *b);

/* Whether `path` is directory `dir` or anything below it (resolved as output_same_file). */
int output_inside_dir(const char *path, const char *dir);

/* ST_ERR_INVALID_ARG naming both when the output `path` (of `what`) is inside the checkpoint
 * directory `dir` that the command reads (`dir_what`: the flag or argument naming it). */
st_status output_path_outside(const char *what, const char *path, const char *dir_what,
                              const char *dir);

/* Checks --export, --metrics, --save-init and --ckpt-dir on world rank `writer` (the rank that
 * writes them; on a cluster the others may not even see its file system) and gives its verdict to
 * every rank, so that each fails with the same message. Before anything is created, each output
 * must be no input of the run (a --data-train or --data-val shard, the --init-from file, a file
 * of the --resume-from checkpoint or of a step directory in --ckpt-dir, or a name such a directory
 * takes) and no other output; --ckpt-dir must not lie in the --resume-from checkpoint. Then every
 * other rank must see --ckpt-dir, where the ranks save and resume. Collective over
 * MPI_COMM_WORLD. */
st_status output_paths_check_train(const train_options *o, int writer);

#endif /* ST_ENGINE_TRAIN_OUTPUT_PATHS_H */
