/* output_paths.c - start-up checks of the paths `shardtrain train` writes: stat and access
 * for the files, mkdir for the checkpoint directory. */
#include "engine/train/output_paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check_mpi.h"
#include "core/error.h"
#include "engine/io/job_agree.h"

st_status output_path_check(const char *flag, const char *path, int appends) {
  const size_t len = strlen(path);
  if (len == 0) return st_error(ST_ERR_INVALID_ARG, "--%s: the path is empty", flag);
  if (path[len - 1] == '/') {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s names a directory, not a file", flag, path);
  }
  struct stat st;
  const int exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s is a directory, not a file", flag, path);
  }

  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, sizeof dir, ".");
  } else if (slash == path) {
    snprintf(dir, sizeof dir, "/");
  } else if ((size_t)(slash - path) < sizeof dir) {
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  } else {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s: the directory's name is too long", flag, path);
  }
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT) {
      return st_error(ST_ERR_INVALID_ARG, "--%s %s: directory %s does not exist", flag, path, dir);
    }
    return st_error(ST_ERR_INVALID_ARG, "--%s %s: directory %s: %s", flag, path, dir,
                    strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s: %s is not a directory", flag, path, dir);
  }
  /* Writing a new entry needs write and search permission on the directory. */
  if (access(dir, W_OK | X_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s: cannot write in directory %s: %s", flag, path,
                    dir, strerror(errno));
  }
  if (appends && exists && access(path, W_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %s: cannot append to it: %s", flag, path,
                    strerror(errno));
  }
  return ST_OK;
}

/* The checkpoint directory exists (created if needed) and this process can write in it. */
static st_status ckpt_dir_check(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: cannot create: %s", dir, strerror(errno));
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: not a writable directory", dir);
  }
  return ST_OK;
}

static st_status check_train_outputs(const train_options *o) {
  if (o->export_path) ST_CHECK(output_path_check("export", o->export_path, 0));
  if (o->metrics) ST_CHECK(output_path_check("metrics", o->metrics, 1));
  if (o->save_init) ST_CHECK(output_path_check("save-init", o->save_init, 0));
  if (o->ckpt_dir) ST_CHECK(ckpt_dir_check(o->ckpt_dir));
  return ST_OK;
}

st_status output_paths_check_train(const train_options *o, int writer) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return job_agree(rank == writer ? check_train_outputs(o) : ST_OK);
}
